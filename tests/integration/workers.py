"""Real `hookstream worker` processes for tests: start, wait until ready, stop or kill -9."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from streams.settings import DURATION_FIELDS, Settings

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def settings_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The HOOKSTREAM_* environment that reproduces ``settings`` in a child process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKSTREAM_")}
    for name, value in settings.model_dump().items():
        if value is None:
            continue
        if hasattr(value, "get_secret_value"):
            value = value.get_secret_value()
        if isinstance(value, tuple):
            value = ",".join(f"{v}s" for v in value)
        elif name in DURATION_FIELDS:
            value = f"{value}s"
        env[f"HOOKSTREAM_{name.upper()}"] = (
            str(value).lower() if isinstance(value, bool) else str(value)
        )
    env.update(extra)
    return env


class WorkerProcess:
    """One worker child process with its own data dir and web port."""

    def __init__(self, settings: Settings, name: str, log_dir: Path) -> None:
        self.port = free_port()
        self.data_dir = log_dir / f"{name}-data"
        self.log_path = log_dir / f"{name}.log"
        self.env = settings_env(
            settings, HOOKSTREAM_WEB_PORT=str(self.port), HOOKSTREAM_DATA_DIR=str(self.data_dir)
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "streams.cli", "worker"],
                env=self.env,
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        return self

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.get(f"http://127.0.0.1:{self.port}{path}", timeout=5, **kwargs)

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited early:\n{self.tail()}")
            try:
                if self.get("/readyz").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise AssertionError(f"worker not ready within {timeout_s}s:\n{self.tail()}")

    def tail(self, lines: int = 30) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, timeout_s: float = 30.0) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)

    def kill(self) -> None:
        """kill -9: no shutdown, no final commit."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
