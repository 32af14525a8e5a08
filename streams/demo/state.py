"""The demo's worker process and its state: started from nothing each time.

`hookstream demo` runs its worker as a child process with the demo's settings; a new demo first
deletes the previous one's topics, consumer groups and tables (`reset_demo_state`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from streams.adapters.kafka_admin import TopicAdmin
from streams.adapters.kafka_clients import LIBRDKAFKA_LOG
from streams.adapters.processes import process_alive, runs_with, wait_exit
from streams.errors import HookstreamError
from streams.settings import Settings


def reset_demo_state(settings: Settings, state_dir: Path) -> None:
    """Start every demo from nothing: its topics, consumer groups, changelogs and tables.

    Only what belongs to the demo is touched: topics under the ``demo.`` prefix and
    ``hookstream-demo*`` (the demo's group id), and the demo worker's own data dir.
    """
    admin = TopicAdmin(settings)
    doomed = admin.names_with_prefix(settings.topic_prefix)
    doomed += admin.names_with_prefix(f"{settings.group_id}-")
    admin.delete(doomed)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (
        admin.names_with_prefix(settings.topic_prefix)
        or admin.names_with_prefix(f"{settings.group_id}-")
    ):
        time.sleep(0.5)
    delete_demo_groups(settings, timeout_s=60)
    shutil.rmtree(state_dir, ignore_errors=True)


def delete_demo_groups(settings: Settings, timeout_s: float) -> None:
    """Delete the demo's consumer groups, and return only once the broker lists none of them.

    Kafka drops a deleted topic's committed offsets, but a broker still loading its group
    coordinator can miss that and keep them. Offsets left behind would be applied to the
    recreated topics: up to that offset the new run's records would be skipped, and the demo
    would wait for deliveries that never come. So the groups go too, retried until they are
    gone. ``GROUP_ID_NOT_FOUND`` counts as gone; anything else still failing at the deadline
    stops the demo with the error.
    """
    # librdkafka's own log lines through Python logging, never raw on the terminal (X2)
    conf: dict[str, Any] = {"bootstrap.servers": settings.kafka_bootstrap, "logger": LIBRDKAFKA_LOG}
    client = AdminClient(conf)
    deadline = time.monotonic() + timeout_s
    while True:
        listing = client.list_consumer_groups(request_timeout=15).result()
        ours = [
            g.group_id
            for g in listing.valid
            if g.group_id == settings.group_id or g.group_id.startswith(f"{settings.group_id}-")
        ]
        problems = [str(error) for error in listing.errors]
        if not ours and not problems:
            return
        if ours:
            for group, future in client.delete_consumer_groups(ours, request_timeout=15).items():
                try:
                    future.result()
                except KafkaException as exc:
                    if exc.args[0].code() != KafkaError.GROUP_ID_NOT_FOUND:
                        problems.append(f"{group}: {exc.args[0].str()}")
        if time.monotonic() >= deadline:
            left = ", ".join(ours) or "none listed"
            raise HookstreamError(
                f"could not delete the demo's consumer groups within {timeout_s:g}s "
                f"(left: {left}; errors: {'; '.join(problems) or 'none'})"
            )
        time.sleep(0.5)


def worker_dir(settings: Settings) -> Path:
    """The demo worker's own state (RocksDB tables), one per demo group."""
    return settings.data_dir / f"{settings.group_id}-worker"


def _seconds(values: tuple[float, ...]) -> str:
    return ",".join(f"{v:g}s" for v in values)


def _worker_env(settings: Settings) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "HOOKSTREAM_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
            "HOOKSTREAM_TOPIC_PREFIX": settings.topic_prefix,
            "HOOKSTREAM_GROUP_ID": settings.group_id,
            "HOOKSTREAM_DATA_DIR": str(worker_dir(settings).resolve()),
            "HOOKSTREAM_RETRY_SCHEDULE": _seconds(settings.retry_schedule),
            "HOOKSTREAM_RETRY_WINDOW": f"{settings.retry_window:g}s",
            "HOOKSTREAM_ALLOW_PRIVATE_DESTINATIONS": "true",
            "HOOKSTREAM_WEB_PORT": str(settings.web_port),
            "HOOKSTREAM_BREAKER_FAILURES": str(settings.breaker_failures),
            "HOOKSTREAM_BREAKER_MIN_ATTEMPTS": str(settings.breaker_min_attempts),
            "HOOKSTREAM_TOPICS_FILE": str(settings.topics_file.resolve()),
        }
    )
    if settings.admin_token is not None:
        env["HOOKSTREAM_ADMIN_TOKEN"] = settings.admin_token.get_secret_value()
    if settings.portal_url is not None:
        env["HOOKSTREAM_PORTAL_URL"] = settings.portal_url
    if settings.secret_key is not None:
        env["HOOKSTREAM_SECRET_KEY"] = settings.secret_key.get_secret_value()
    return env


def worker_log(settings: Settings) -> Path:
    """Where the demo's worker writes its log."""
    return settings.data_dir / f"{settings.group_id}-worker.log"


#: Worker log lines worth showing when a demo falls short: warnings and errors, and the
#: milestones that date them: the consumer group's joins (a rebalance in the middle of a demo
#: shows as a second one), the worker ready, and the suspension policy applied (outcomes
#: counted before it were counted under the default policy, 5 failures over 1 hour).
_NOTABLE_LEVELS = frozenset({"WARNING", "ERROR", "CRITICAL"})
_MILESTONES = ("Joined group", "[^_Worker]: Ready", "suspension policy applied")


def notable_log_lines(path: Path, limit: int = 25) -> list[str]:
    """The last ``limit`` notable lines of a worker's JSON log, as ``time level logger: msg``;
    a line that is not JSON (a traceback's, a library's raw output) is kept as it is."""
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return [f"(the worker's log {path} could not be read: {exc.strerror})"]
    notable = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            if line.strip():
                notable.append(line)
            continue
        if not isinstance(entry, dict):
            continue
        msg = str(entry.get("msg", ""))
        if entry.get("level") in _NOTABLE_LEVELS or msg.startswith(_MILESTONES):
            extra = {k: v for k, v in entry.items() if k not in ("ts", "level", "logger", "msg")}
            if isinstance(extra.get("exc"), str):  # a traceback: its last line says what broke
                extra["exc"] = extra["exc"].strip().splitlines()[-1]
            tail = f" {json.dumps(extra)}" if extra else ""
            notable.append(
                f"{entry.get('ts')} {entry.get('level')} {entry.get('logger')}: {msg}{tail}"
            )
    return notable[-limit:]


#: How the demo starts its worker; a process whose command line holds these is one.
WORKER_COMMAND = ("-m", "streams.cli", "worker")


def worker_pid_file(settings: Settings) -> Path:
    """The demo worker's pid, kept while it runs, so that the next demo can stop a worker that a
    demo killed with -9 (or a lost terminal) left behind."""
    return settings.data_dir / f"{settings.group_id}-worker.pid"


def start_worker(settings: Settings) -> subprocess.Popen[bytes]:
    """`hookstream worker` in a child process, logging to the data dir; its pid is recorded."""
    log_path = worker_log(settings)
    worker_dir(settings).mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log_file:
        worker = subprocess.Popen(
            [sys.executable, "-m", "streams.cli", "worker"],  # WORKER_COMMAND
            env=_worker_env(settings),
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    worker_pid_file(settings).write_text(f"{worker.pid}\n")
    return worker


def stop_worker(settings: Settings, worker: subprocess.Popen[bytes], wait_s: float = 30) -> None:
    """Stop the demo's worker: SIGTERM, SIGKILL after ``wait_s``; then forget its pid."""
    worker.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        worker.wait(wait_s)
    if worker.poll() is None:
        worker.kill()
        worker.wait(10)
    worker_pid_file(settings).unlink(missing_ok=True)


def stop_left_worker(settings: Settings, wait_s: float = 30) -> int | None:
    """Stop the worker an earlier demo left running, if its pid file names a live demo worker;
    the pid stopped, or None. Such a worker stays in the demo's consumer groups, which the new
    demo must delete ("The group is not empty"), and holds the API's port. A pid that runs
    something else now (a reused pid) is left alone, as the local broker's is
    (`streams.adapters.processes`).
    """
    pid_file = worker_pid_file(settings)
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    pid_file.unlink(missing_ok=True)
    if pid <= 0 or not (process_alive(pid) and runs_with(pid, *WORKER_COMMAND)):
        return None
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        if not wait_exit(pid, wait_s):
            os.kill(pid, signal.SIGKILL)
    return pid
