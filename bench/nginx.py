"""The benchmark receiver: one nginx worker answering ``return 200`` on 127.0.0.1.

nginx logs ``$msec $http_webhook_id`` for every request, so the benchmark learns when each
delivery arrived (millisecond resolution, nginx's clock) without the receiver doing any work of
its own. `ensure_nginx` installs it with apt on Debian when it is missing; everything else lives
in a temporary directory that is removed afterwards.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

NGINX = Path("/usr/sbin/nginx")

_CONF = """{user}worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    log_format hookstream '$msec $http_webhook_id{uri}';
    access_log {tmp}/access.log hookstream buffer=256k flush=200ms;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    client_body_buffer_size 64k;
    keepalive_requests 1000000;
    keepalive_timeout 120s;
    server {{
        listen 127.0.0.1:{port};
        location / {{ return 200; }}
    }}
}}
"""


def ensure_nginx() -> Path:
    """The nginx binary; installs the Debian package (as root) when it is missing."""
    found = shutil.which("nginx") or (str(NGINX) if NGINX.exists() else None)
    if found:
        return Path(found)
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise RuntimeError("nginx is missing: install it (apt-get install nginx-light) and retry")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "nginx-light"],
    ):
        subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    if not NGINX.exists():
        raise RuntimeError("apt-get installed nginx-light but /usr/sbin/nginx is missing")
    return NGINX


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@dataclass
class AccessLog:
    """Reads the access log incrementally: ``received[webhook_id]`` is the first arrival (s).

    With ``nginx_receiver(log_path=True)`` each line also ends with the request path, and
    ``by_path[path]`` lists the time of every request to that path, repeats included.
    """

    path: Path
    received: dict[str, float] = field(default_factory=dict)
    repeats: dict[str, int] = field(default_factory=dict)  # arrivals after the first, by id
    by_path: dict[str, list[float]] = field(default_factory=dict)
    lines: int = 0
    _offset: int = 0
    _partial: bytes = b""

    def poll(self) -> int:
        """Read what nginx has written since the last call; return the new line count."""
        try:
            with self.path.open("rb") as handle:
                handle.seek(self._offset)
                chunk = handle.read()
        except FileNotFoundError:
            return 0
        self._offset += len(chunk)
        data = self._partial + chunk
        *complete, self._partial = data.split(b"\n")
        for line in complete:
            msec, _, rest = line.partition(b" ")
            webhook_id, _, uri = rest.partition(b" ")
            key = webhook_id.decode("ascii", errors="replace")
            if key in self.received:
                self.repeats[key] = self.repeats.get(key, 0) + 1
            else:
                self.received[key] = float(msec)
            if uri:
                path = uri.decode("ascii", errors="replace")
                self.by_path.setdefault(path, []).append(float(msec))
        self.lines += len(complete)
        return len(complete)

    def duplicates(self, ids: Iterable[str]) -> int:
        """How many extra arrivals the given webhook ids had (at-least-once delivery)."""
        return sum(self.repeats.get(key, 0) for key in ids)


@dataclass
class Nginx:
    url: str
    log: AccessLog
    port: int
    pid: int  # the master process; its worker is a child

    def url_for(self, path: str) -> str:
        """The URL of another path on the same nginx (every path answers 200)."""
        return f"http://127.0.0.1:{self.port}/{path.lstrip('/')}"


@contextmanager
def nginx_receiver(log_path: bool = False) -> Iterator[Nginx]:
    """Run nginx (``return 200``, one worker) for the duration of the block.

    Every path answers; ``log_path`` adds each request's path to the access log, so deliveries
    to subscriptions with URLs of their own can be counted per URL.
    """
    binary = ensure_nginx()
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="hookstream-bench-nginx-") as tmp:
        conf = Path(tmp) / "nginx.conf"
        user = "user root;\n" if os.geteuid() == 0 else ""
        uri = " $uri" if log_path else ""
        conf.write_text(_CONF.format(user=user, tmp=tmp, port=port, uri=uri))
        process = subprocess.Popen(
            [str(binary), "-c", str(conf), "-p", tmp],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_listening(port, process)
            log = AccessLog(Path(tmp) / "access.log")
            yield Nginx(f"http://127.0.0.1:{port}/hook", log, port, process.pid)
        finally:
            process.terminate()
            process.wait(10)


def wait_listening(port: int, process: subprocess.Popen[bytes], name: str = "nginx") -> None:
    """Wait until the child ``process`` accepts connections on ``port`` (at most 10 s)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited at start with code {process.returncode}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{name} did not listen on port {port} within 10 s")
