"""The dashboard and the alerts against a real Prometheus scraping a real pipeline (SPEC O1, O3).

A whole pipeline runs in-process (`PipelineHarness`) on the real broker, delivering to real local
receivers: some answer 200, some 500 (retried, then dead-lettered) and some 404 (dead-lettered at
once); a malformed event is refused at ingest. Its metrics are served over HTTP from the same
`streams.metrics.REGISTRY` that a worker's ``/metrics`` serves, the lag exporter runs every
second, and a real Prometheus scrapes every second and evaluates the alert rules.

Then every PromQL expression in dashboards/hookstream.json and in
deploy/prometheus/rules/hookstream.yml is sent to Prometheus' HTTP API:

- Dashboard variables are substituted: ``$job`` -> ``hookstream`` (the scrape job),
  ``$group`` -> ``<the test's group id>.*`` (a regex, as the variable's "All" value is),
  ``$__rate_interval`` -> ``1m``, ``$__interval`` -> ``5s``, ``$__range`` -> ``5m``. Any ``$`` left
  over fails the test. Each query must return at least one series.
- An alert expression only returns series while it fires, so each is split at its top-level
  comparison and set operators (``>``, ``==``, ``and``, ...; ``on``/``group_left`` modifiers
  dropped): every operand that is not a plain number must return at least one series (its inputs
  exist), and the whole expression must evaluate without error. Prometheus must also report every
  rule group as loaded with no evaluation error.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Producer
from prometheus_client import start_http_server

import streams.api.metrics_page  # noqa: F401  (hookstream_build_info, as every worker serves it)
from streams.adapters.lag import LagExporter
from streams.metrics.families import REGISTRY
from streams.settings import Settings
from tests.conftest import REPO
from tests.integration.pipeline_harness import PipelineHarness, make_event
from tests.receivers import Receiver, Respond

pytestmark = pytest.mark.integration

DASHBOARD = REPO / "dashboards" / "hookstream.json"
RULES = REPO / "deploy" / "prometheus" / "rules" / "hookstream.yml"
RULE_TESTS = REPO / "deploy" / "prometheus" / "rules" / "hookstream_test.yml"
INSTALL = REPO / "deploy" / "prometheus" / "install.sh"
SHORT = {"retry_schedule": "1s,2s", "retry_window": "1m", "retry_jitter": 0.1}


@pytest.fixture(scope="module")
def prometheus_bin() -> str:
    """Prometheus and promtool, installed by the repo's own script; a failure fails the test."""
    done = subprocess.run(
        ["bash", str(INSTALL)], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, f"install.sh failed:\n{done.stdout}\n{done.stderr}"
    binary, promtool = shutil.which("prometheus"), shutil.which("promtool")
    assert binary and promtool, "prometheus/promtool missing after install.sh"
    return binary


def test_o3_alert_rules_pass_promtool_check_and_unit_tests(prometheus_bin: str) -> None:
    for args in (["check", "rules", str(RULES)], ["test", "rules", str(RULE_TESTS)]):
        done = subprocess.run(
            ["promtool", *args], capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, f"promtool {' '.join(args)}:\n{done.stdout}{done.stderr}"


# --- the expressions under test ------------------------------------------------------------------


def dashboard_queries(group_regex: str) -> list[str]:
    values = {
        "job": "hookstream",
        "group": group_regex,
        "__rate_interval": "1m",
        "__interval": "5s",
        "__range": "5m",
    }
    panels = json.loads(DASHBOARD.read_text())["panels"]
    queries = []
    for panel in panels:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for name in sorted(values, key=len, reverse=True):
                expr = expr.replace(f"${{{name}}}", values[name]).replace(f"${name}", values[name])
            assert "$" not in expr, f"unsubstituted variable in {panel['title']!r}: {expr}"
            queries.append(expr)
    return queries


def alert_expressions() -> dict[str, str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["alert"]: rule["expr"] for group in groups for rule in group["rules"]}


_SPLIT = re.compile(r"(>=|<=|==|!=|>|<|\band\b|\bor\b|\bunless\b)")
_MODIFIER = re.compile(r"^\s*(bool|on|ignoring|group_left|group_right)\b\s*(\([^()]*\))?")
_NUMBER = re.compile(r"^\s*[\d.]+\s*$")


def operands(expr: str) -> list[str]:
    """``expr`` split at its top-level comparison and set operators, modifiers dropped."""
    pieces, depth, quoted, start, i = [], 0, False, 0, 0
    while i < len(expr):
        char = expr[i]
        if quoted:
            i += 2 if char == "\\" else 1
            quoted = char != '"' if char != "\\" else quoted
            continue
        if char == '"':
            quoted = True
        elif char in "({[":
            depth += 1
        elif char in ")}]":
            depth -= 1
        elif depth == 0 and (match := _SPLIT.match(expr, i)):
            pieces.append(expr[start:i])
            i = start = match.end()
            continue
        i += 1
    pieces.append(expr[start:])
    cleaned = []
    for piece in pieces:
        while match := _MODIFIER.match(piece):
            piece = piece[match.end() :]
        if piece.strip() and not _NUMBER.match(piece):
            cleaned.append(piece.strip())
    return cleaned


def test_o3_alert_operands_are_split_as_documented() -> None:
    expr = 'max by (t) (x{t=~"a>b"}) > on (t) group_left () (2 * max by (t) (y) + 60) and z == 0'
    assert operands(expr) == ['max by (t) (x{t=~"a>b"})', "(2 * max by (t) (y) + 60)", "z"]


# --- a real Prometheus ------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Prometheus:
    def __init__(self, base: str) -> None:
        self.base = base

    def get(self, path: str, **params: str) -> Any:
        url = f"{self.base}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as answer:
            return json.loads(answer.read())

    def ready(self) -> bool:
        with urllib.request.urlopen(f"{self.base}/-/ready", timeout=5) as answer:
            return bool(answer.status == 200)

    def query(self, expr: str) -> list[Any]:
        try:
            body = self.get("/api/v1/query", query=expr)
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"{expr}: {exc.read().decode()}") from exc
        assert body["status"] == "success", (expr, body)
        return list(body["data"]["result"])


@pytest.fixture
def metrics_port() -> Iterator[int]:
    """The worker's registry over HTTP, as ``GET /metrics`` serves it in a worker."""
    server, thread = start_http_server(0, addr="127.0.0.1", registry=REGISTRY)
    yield int(server.server_port)
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.fixture
def prometheus(prometheus_bin: str, metrics_port: int, tmp_path: Path) -> Iterator[Prometheus]:
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [
            {
                "job_name": "hookstream",
                "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}],
            }
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = (tmp_path / "prometheus.log").open("w")
    process = subprocess.Popen(
        [
            prometheus_bin,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = Prometheus(f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, (tmp_path / "prometheus.log").read_text()
            try:
                if server.ready():
                    break
            except OSError:
                assert time.monotonic() < deadline, "Prometheus did not become ready in 30 s"
            time.sleep(0.2)
        yield server
    finally:
        process.terminate()
        process.wait(10)
        log.close()


def counter(name: str, **labels: str) -> float:
    return sum(
        sample.value
        for metric in REGISTRY.collect()
        for sample in metric.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    )


async def until(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.5)


@pytest.mark.timeout(240)
async def test_o3_every_dashboard_and_alert_query_returns_data_from_a_real_pipeline(
    make_settings: Callable[..., Settings],
    receiver_factory: Callable[..., Receiver],
    prometheus: Prometheus,
) -> None:
    # the breaker stays closed here: the counts below assume every attempt is made
    settings = make_settings(**SHORT, breaker_failures=100000, breaker_min_attempts=1000000)
    receiver = receiver_factory()
    before = {
        name: counter(name)
        for name in (
            "hookstream_deliveries_total",
            "hookstream_retries_scheduled_total",
            "hookstream_dlq_total",
            "hookstream_events_routed_total",
            "hookstream_events_invalid_total",
        )
    }
    async with PipelineHarness(settings) as h:
        stop = asyncio.Event()
        exporter = LagExporter(settings, interval_s=1.0)
        exporting = asyncio.create_task(exporter.run(stop))
        try:
            for path, status in (("/ok", 200), ("/broken", 500), ("/gone", 404)):
                await h.subscribe(receiver.route(path, Respond(status)), ["order.*"])
            await h.publish([make_event("acme", "order.created", n) for n in range(10)])
            poison = Producer({"bootstrap.servers": settings.kafka_bootstrap})
            poison.produce(settings.topic("events"), key=b"acme", value=b"\xc3\x01garbage")
            poison.flush(10)
            # 10 to /gone at once, 10 to /broken after 3 attempts, 1 poison event
            await h.dead_letters_until(21, timeout_s=60)
            await until(lambda: exporter.last is not None, 30, "a lag measurement")
            await asyncio.sleep(5)  # a few scrapes and rule evaluations of the final state
            await check_queries(prometheus, settings)
        finally:
            stop.set()
            await exporting
    grew = {name: counter(name) - value for name, value in before.items()}
    # These prove the lanes call the helpers (the lead's wiring, see docs/observability.md).
    assert grew["hookstream_deliveries_total"] >= 40, grew  # 10 ok + 30 broken + 10 gone
    assert grew["hookstream_retries_scheduled_total"] >= 20, grew
    assert grew["hookstream_dlq_total"] >= 21, grew
    assert grew["hookstream_events_routed_total"] >= 10, grew
    assert grew["hookstream_events_invalid_total"] >= 1, grew


async def check_queries(prometheus: Prometheus, settings: Settings) -> None:
    def run() -> None:
        assert prometheus.query('up{job="hookstream"} == 1'), "Prometheus does not scrape us"
        empty = [q for q in dashboard_queries(f"{settings.group_id}.*") if not prometheus.query(q)]
        assert not empty, "dashboard queries without data:\n" + "\n".join(empty)
        for name, expr in alert_expressions().items():
            prometheus.query(expr)  # evaluates without error (fires or not)
            for operand in operands(expr):
                assert prometheus.query(operand), f"{name}: no data for {operand}"
        groups = prometheus.get("/api/v1/rules")["data"]["groups"]
        rules = [rule for group in groups for rule in group["rules"]]
        assert len(rules) == len(alert_expressions())
        assert all(rule["health"] == "ok" for rule in rules), rules
        lagging = prometheus.query(
            f'count by (group) (hookstream_consumer_lag{{group=~"{settings.group_id}-.*"}})'
        )
        found = {series["metric"]["group"] for series in lagging}
        assert {f"{settings.group_id}-router", f"{settings.group_id}-dispatch"} <= found

    await asyncio.to_thread(run)
