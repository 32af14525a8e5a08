"""The README's first command, `hookstream demo`, end to end on the real broker (SPEC §1).

The demo publishes three event types to four receivers (healthy, flaky, always failing, gone),
and must end with every delivery settled: the healthy and flaky endpoints get everything, the
failing one's deliveries are exhausted and the gone one's dead-lettered on 404, every signature
verifies, and the gone endpoint is suspended with its owner's notices. It runs against the
session's broker (``--keep-kafka``: the test does not own it) with a small event count.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable

import httpx
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from streams.adapters.processes import process_alive
from streams.demo.run import DEMO_OVERRIDES
from streams.demo.state import (
    delete_demo_groups,
    notable_log_lines,
    worker_log,
)
from streams.settings import Settings, load_settings
from tests.conftest import REPO

pytestmark = pytest.mark.integration

PER_TYPE = 10
#: librdkafka's own format: ``%<level>|<time>|<facility>|<client>| message``.
RAW_LIBRDKAFKA = re.compile(r"^%\d\|\d+\.\d+\|")
#: The demo's line naming its worker process.
WORKER_STARTED = re.compile(r"worker started \(pid (\d+)\)")


#: The longest a demo can take and still end by itself: the broker check, the reset (up to
#: 60 s for its topics and 60 s for its groups), 180 s for the deliveries to settle, 60 s for
#: the suspension, 30 s to stop its worker. The tests wait that long, so that a slow demo's own
#: report (what fell short, its worker log's warnings) reaches the test's output.
DEMO_MAX_S = 420


@pytest.mark.timeout(DEMO_MAX_S + 60)
def test_demo_settles_every_delivery_and_suspends_the_gone_endpoint(kafka_bootstrap: str) -> None:
    env = {**os.environ, "HOOKSTREAM_KAFKA_BOOTSTRAP": kafka_bootstrap}
    command = [sys.executable, "-m", "streams.cli", "demo", "--events", str(PER_TYPE)]
    demo = subprocess.Popen(
        [*command, "--keep-kafka", "--json"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        stdout, stderr = demo.communicate(timeout=DEMO_MAX_S)
    except subprocess.TimeoutExpired:
        _kill_session(demo)
        stdout, stderr = demo.communicate(timeout=30)
        notes = "\n".join(notable_log_lines(REPO / worker_log(load_settings(**DEMO_OVERRIDES))))
        pytest.fail(
            f"the demo did not end within {DEMO_MAX_S}s\n{stdout[-3000:]}{stderr[-3000:]}\n"
            f"its worker's warnings and errors:\n{notes}"
        )
    finally:
        _kill_session(demo)
    run = subprocess.CompletedProcess(demo.args, demo.returncode, stdout, stderr)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    # X2: librdkafka's own log lines go through Python logging, never raw onto the terminal
    raw = [line for line in (run.stdout + run.stderr).splitlines() if RAW_LIBRDKAFKA.match(line)]
    assert not raw, raw[:5]
    lines = run.stdout.splitlines()
    summary = json.loads("\n".join(lines[lines.index("{") :]))
    published = PER_TYPE * 3
    assert summary["published"] == published
    # healthy gets every type, flaky its one type (after retries): 4 x PER_TYPE delivered
    assert summary["delivered"] == PER_TYPE * 4, summary
    assert summary["retried_then_delivered"] == PER_TYPE
    # broken: exhausted after its retries; gone: 404, a permanent failure (D5, D8)
    assert sum(summary["dead_lettered"].values()) == PER_TYPE * 2, summary["dead_lettered"]
    assert summary["bad_signatures"] == 0
    assert summary["verified"] >= summary["delivered"]
    assert "sub_demo_gone" in summary["suspended"], summary["suspended"]
    assert any(line.startswith("endpoint.suspended") for line in summary["notices"]), summary
    # U1: the suspension notice links to the subscription's page in the owner's portal
    assert summary["portal_link"].startswith("http://127.0.0.1:6067/portal/link?token="), summary


def test_demo_reset_deletes_groups_that_hold_offsets(
    make_settings: Callable[..., Settings], make_topic: Callable[[str, int], str]
) -> None:
    """The demo starts from nothing: its consumer groups go with its topics (SPEC §1).

    A group left behind with committed offsets would have them applied to the recreated
    topics, and the new run's first records on each partition would be skipped.
    """
    settings = make_settings()
    topic = make_topic(f"{settings.topic_prefix}stale", 2)
    groups = [settings.group_id, f"{settings.group_id}-router", f"{settings.group_id}-dispatch"]
    for group in groups:
        consumer = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": group})
        try:
            consumer.commit(
                offsets=[TopicPartition(topic, 0, 10), TopicPartition(topic, 1, 3)],
                asynchronous=False,
            )
        finally:
            consumer.close()
    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap})

    def ours() -> set[str]:
        listed = admin.list_consumer_groups(request_timeout=15).result().valid
        return {g.group_id for g in listed} & set(groups)

    assert ours() == set(groups)
    delete_demo_groups(settings, timeout_s=60)
    assert ours() == set()
    delete_demo_groups(settings, timeout_s=5)  # nothing left to delete is not an error


@pytest.mark.timeout(DEMO_MAX_S + 180)
def test_u1_r1_the_demo_holds_its_worker_so_the_gone_endpoint_is_reenabled_from_the_portal(
    kafka_bootstrap: str,
) -> None:
    """U1, R1: with --keep-worker the demo, after its summary, fixes the gone endpoint and keeps
    the worker up; a re-enable (the portal's button calls this same view) passes its probe and
    starts the backfill; Ctrl-C then ends the demo cleanly."""
    env = {**os.environ, "HOOKSTREAM_KAFKA_BOOTSTRAP": kafka_bootstrap}
    command = [sys.executable, "-m", "streams.cli", "demo", "--events", "5"]
    demo = subprocess.Popen(
        [*command, "--keep-kafka", "--keep-worker"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=_ctrl_c_delivered, start_new_session=True,
    )  # fmt: skip
    seen: list[str] = []
    try:
        assert demo.stdout is not None
        deadline = time.monotonic() + DEMO_MAX_S
        for line in demo.stdout:
            seen.append(line)
            if "answers 200 again" in line or time.monotonic() > deadline:
                break
        assert any("answers 200 again" in line for line in seen), "".join(seen[-40:])
        assert any("suspended" in line and "sub_demo_gone" in line for line in seen)
        answer = httpx.post(
            "http://127.0.0.1:6067/v1/subscriptions/sub_demo_gone/reenable",
            headers={"Authorization": "Bearer demo-operator-key"},
            timeout=60,
        )
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["reenabled"] is True and body["probe"]["status"] == 200, body
        assert body["subscription"]["status"] == "active"
        assert body["backfill"] is not None
    finally:
        demo.send_signal(signal.SIGINT)
        try:
            code = demo.wait(60)
        except subprocess.TimeoutExpired:
            _kill_session(demo)
            code = demo.wait(10)
        if demo.stdout is not None:
            seen.extend(demo.stdout.read().splitlines(keepends=True))
            demo.stdout.close()
    assert code == 0, "".join(seen[-40:])


@pytest.mark.timeout(300)
def test_sigterm_ends_the_demo_and_its_worker(kafka_bootstrap: str) -> None:
    """SIGTERM (``kill``, a service manager) stops the demo as Ctrl-C does: the worker it
    started goes with it, and the demo says why it stopped (exit 143). It used to end at once
    and leave its worker running, holding the API's port 6067."""
    env = {**os.environ, "HOOKSTREAM_KAFKA_BOOTSTRAP": kafka_bootstrap}
    demo = subprocess.Popen(
        [sys.executable, "-m", "streams.cli", "demo", "--events", "5", "--keep-kafka"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    seen: list[str] = []
    worker_pid = None
    try:
        assert demo.stdout is not None
        for line in demo.stdout:
            seen.append(line)
            found = WORKER_STARTED.search(line)
            if found is not None:
                worker_pid = int(found.group(1))
                break
        assert worker_pid is not None, "".join(seen[-40:])
        demo.send_signal(signal.SIGTERM)
        code = demo.wait(60)
        seen.extend(demo.stdout.read().splitlines(keepends=True))
    finally:
        if demo.poll() is None:
            _kill_session(demo)
            demo.wait(10)
        if demo.stdout is not None:
            demo.stdout.close()
    assert code == 128 + signal.SIGTERM, "".join(seen[-40:])
    assert any("demo stopped (SIGTERM)" in line for line in seen), "".join(seen[-40:])
    deadline = time.monotonic() + 10
    try:
        while process_alive(worker_pid):
            assert time.monotonic() < deadline, f"the demo's worker {worker_pid} outlived it"
            time.sleep(0.2)
    finally:  # a failure leaves no worker behind on the session's broker
        if process_alive(worker_pid):
            os.kill(worker_pid, signal.SIGKILL)


def _ctrl_c_delivered() -> None:
    """In the demo's process, before it starts: Ctrl-C stops it, as in a terminal. A test run
    started in the background by a shell without job control (``make test &``) hands its
    children SIGINT ignored, and Python keeps it so: the demo would never see the test's
    Ctrl-C (CI of 2026-12-04 04:46 waited 60 s for it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _kill_session(demo: subprocess.Popen[str]) -> None:
    """Kill what is left of a demo's session (it runs in one of its own): the demo and the
    worker it started, which a demo killed alone would leave on the session's broker, in the
    demo's consumer groups, where the next demo test found it (CI of 2026-12-07)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(demo.pid, signal.SIGKILL)


@pytest.mark.timeout(DEMO_MAX_S + 120)
def test_a_demo_stops_the_worker_a_killed_demo_left_running(kafka_bootstrap: str) -> None:
    """SPEC §1: a demo killed with -9 cannot stop its worker, which stays in the demo's consumer
    groups; the next demo stops it (it is named in the data dir) and runs as usual, where it
    used to fail on "The group is not empty" (CI of 2026-12-07, after a pytest timeout)."""
    env = {**os.environ, "HOOKSTREAM_KAFKA_BOOTSTRAP": kafka_bootstrap}
    command = [sys.executable, "-m", "streams.cli", "demo", "--events", "5", "--keep-kafka"]
    killed = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    seen: list[str] = []
    try:
        assert killed.stdout is not None
        for line in killed.stdout:
            seen.append(line)
            if WORKER_STARTED.search(line) is not None:
                break
        found = WORKER_STARTED.search("".join(seen))
        assert found is not None, "".join(seen[-40:])
        left = int(found.group(1))
        killed.kill()  # the demo alone: its worker is left running
        killed.wait(10)
        time.sleep(1)
        assert process_alive(left), "the worker went with the demo; nothing is left to test"
        again = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, start_new_session=True,
        )  # fmt: skip
        try:
            out, _ = again.communicate(timeout=DEMO_MAX_S)
        finally:
            _kill_session(again)
        assert f"stopped the worker (pid {left}) that an earlier demo left running" in out, out
        assert again.returncode == 0, out[-3000:]
        assert not process_alive(left)
    finally:
        _kill_session(killed)
        if killed.stdout is not None:
            killed.stdout.close()


@pytest.mark.timeout(DEMO_MAX_S)
def test_a_worker_that_cannot_start_ends_the_demo_at_once_saying_why(kafka_bootstrap: str) -> None:
    """SPEC §1: with the API's port 6067 taken, the demo's worker exits at start; the demo ends
    within seconds, not after its 3 minutes of waiting, and says why from the worker's log."""
    env = {**os.environ, "HOOKSTREAM_KAFKA_BOOTSTRAP": kafka_bootstrap}
    command = [sys.executable, "-m", "streams.cli", "demo", "--events", "5", "--keep-kafka"]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", DEMO_OVERRIDES["web_port"]))
        taken.listen()
        demo = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, start_new_session=True,
        )  # fmt: skip
        began = time.monotonic()
        try:
            out, _ = demo.communicate(timeout=DEMO_MAX_S - 30)
        finally:
            _kill_session(demo)
    waited = time.monotonic() - began
    assert demo.returncode == 1, out[-3000:]
    assert "demo incomplete: the worker exited with code 1 during the demo" in out, out[-3000:]
    assert "address already in use" in out, out[-3000:]
    # it did not wait out the 180 s it gives its deliveries to settle (seconds on an idle box)
    assert waited < 180, f"the demo took {waited:.0f}s to notice its worker was gone"
