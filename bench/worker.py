"""One hookstream worker in a child process, as an operator runs it, with its CPU and RSS sampled.

The worker is ``python -m streams.cli worker`` configured only through ``HOOKSTREAM_*``
variables, exactly like production. A sampler thread reads the process' CPU time and resident
memory every `SAMPLE_S` seconds (psutil when installed, else /proc), so a benchmark can report
the worker's CPU% over its steady window and its peak RSS.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench.cpu import percent_between, process_cpu_s, stat_fields
from streams.settings import Settings

SAMPLE_S = 0.25
_PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class Sample:
    at: float  # time.time()
    cpu_s: float  # user + system CPU seconds of the worker so far
    rss: int  # bytes


def _read_proc(pid: int) -> tuple[float, int]:
    try:
        import psutil
    except ImportError:
        rss_pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
        return process_cpu_s(stat_fields(pid)), rss_pages * _PAGE
    proc = psutil.Process(pid)
    times = proc.cpu_times()
    return times.user + times.system, proc.memory_info().rss


def worker_env(settings: Settings, extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "HOOKSTREAM_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
            "HOOKSTREAM_TOPIC_PREFIX": settings.topic_prefix,
            "HOOKSTREAM_GROUP_ID": settings.group_id,
            "HOOKSTREAM_DATA_DIR": str(settings.data_dir.resolve()),
            "HOOKSTREAM_TOPICS_FILE": str(settings.topics_file.resolve()),
            "HOOKSTREAM_WEB_PORT": str(settings.web_port),
            "HOOKSTREAM_ALLOW_PRIVATE_DESTINATIONS": "true",
            "HOOKSTREAM_DISPATCH_CONCURRENCY": str(settings.dispatch_concurrency),
            "HOOKSTREAM_DISPATCH_BATCH_SIZE": str(settings.dispatch_batch_size),
            **extra,
        }
    )
    if settings.secret_key is not None:
        env["HOOKSTREAM_SECRET_KEY"] = settings.secret_key.get_secret_value()
    return env


#: How an operator starts a worker.
WORKER_COMMAND = ("-m", "streams.cli", "worker")


class Worker:
    """A running worker process and its resource samples.

    ``command`` (the interpreter's arguments) runs another process the same way, configured by
    the same ``HOOKSTREAM_*`` variables and sampled alike: the P2 floor relay (`bench.floor`).
    """

    def __init__(
        self,
        settings: Settings,
        log_path: Path,
        extra_env: dict[str, str],
        command: tuple[str, ...] = WORKER_COMMAND,
    ) -> None:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_path
        with log_path.open("wb") as log_file:
            self.process = subprocess.Popen(
                [sys.executable, *command],
                env=worker_env(settings, extra_env),
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="worker-sampler", daemon=True)
        self._thread.start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            try:
                cpu, rss = _read_proc(self.pid)
            except Exception:  # the process is gone; the caller notices through alive()
                return
            self.samples.append(Sample(time.time(), cpu, rss))

    def cpu_percent(self, start: float, end: float) -> float | None:
        """The worker's CPU use between two wall-clock times, in % of one core."""
        return percent_between([(s.at, s.cpu_s) for s in self.samples], start, end)

    def peak_rss(self, start: float = 0.0, end: float = float("inf")) -> int:
        return max((s.rss for s in self.samples if start <= s.at <= end), default=0)

    def last_rss(self) -> int:
        return self.samples[-1].rss if self.samples else 0

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout_s``; returns the exit code."""
        self._stop.set()
        if self.alive():
            self.process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout_s)
        if self.alive():
            self.process.kill()
            self.process.wait(10)
        self._thread.join(2)
        return self.process.returncode

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])
