"""How fast each hookstream transport POSTs a 1 KB delivery to a fast local receiver (SPEC §5, P1).

    python -m bench.http_clients --seconds 5 --concurrency 8,64 --json out.json

The receiver is nginx (``return 200``) when /usr/sbin/nginx exists, otherwise an aiohttp
low-level server in a separate process (on uvloop when it is installed). Either way it runs in
its own process, so the client under test has the benchmark process to itself. The clients run
on uvloop, the worker's event loop. Each (transport, concurrency) pair runs three times,
interleaved; reported are the median requests/s and the median CPU time of this process per
request (the figure that matters to a CPU-bound worker), with the ratios h1/aiohttp and
aiohttp/httpx. This is a benchmark, not a test: nothing asserts on the numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvloop

from bench.httpx_transport import HttpxTransport
from streams.adapters.http import AiohttpTransport, HttpRequest, Transport
from streams.adapters.http1 import H1Transport

NGINX = Path("/usr/sbin/nginx")
BODY = b'{"id":"evt_bench","type":"bench.tick","data":{"pad":"' + b"x" * 956 + b'"},"attempt":1}'
RUNS = 3
HEADERS = {"Content-Type": "application/json", "webhook-id": "msg_bench"}

_NGINX_CONF = """
worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    keepalive_requests 1000000;
    server {{
        listen 127.0.0.1:{port};
        location / {{ return 200; }}
    }}
}}
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _wait_listening(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the receiver exited early with code {process.returncode}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"the receiver did not listen on port {port} within 10 s")


@contextmanager
def receiver() -> Iterator[tuple[str, str]]:
    """Start the fastest receiver available; yields (url, description)."""
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="hookstream-bench-") as tmp:
        if NGINX.exists():
            conf = Path(tmp) / "nginx.conf"
            user = "user root;\n" if os.geteuid() == 0 else ""
            conf.write_text(user + _NGINX_CONF.format(tmp=tmp, port=port))
            command = [str(NGINX), "-c", str(conf), "-p", tmp]
            description = "nginx (return 200, 1 worker)"
        else:
            command = [sys.executable, "-m", "bench.http_clients", "--serve", str(port)]
            description = "aiohttp low-level server in a separate process" + (
                " on uvloop" if _has_uvloop() else ""
            )
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        try:
            _wait_listening(port, process)
            yield f"http://127.0.0.1:{port}/hook", description
        finally:
            process.terminate()
            process.wait(10)


def _has_uvloop() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def serve(port: int) -> None:
    """The fallback receiver: answer every request 200 with an empty body, as fast as it can."""
    from aiohttp import web

    async def handle(request: web.BaseRequest) -> web.Response:
        await request.read()
        return web.Response(status=200)

    async def main() -> None:
        server = web.Server(handle, access_log=None)
        loop = asyncio.get_running_loop()
        listener = await loop.create_server(server, "127.0.0.1", port, backlog=1024)
        async with listener:
            await listener.serve_forever()

    if _has_uvloop():
        import uvloop

        uvloop.run(main())
    else:
        asyncio.run(main())


async def measure(
    make: Callable[[], Transport], url: str, concurrency: int, seconds: float
) -> float:
    """Requests/s of one transport at one concurrency, after a short warm-up."""
    rps, _ = await measure_with_cpu(make, url, concurrency, seconds)
    return rps


async def measure_with_cpu(
    make: Callable[[], Transport], url: str, concurrency: int, seconds: float
) -> tuple[float, float]:
    """Requests/s and this process's CPU µs per request, after a short warm-up."""
    transport = make()
    request = HttpRequest(url, BODY, HEADERS, 10.0)
    done = 0
    stop_at = 0.0

    async def worker() -> None:
        nonlocal done
        while time.perf_counter() < stop_at:
            response = await transport.send(request)
            if response.status != 200:
                raise RuntimeError(f"the receiver answered {response.status}")
            done += 1

    try:
        stop_at = time.perf_counter() + min(0.5, seconds / 4)  # warm up the pool
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        done = 0
        started, cpu = time.perf_counter(), time.process_time()
        stop_at = started + seconds
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        return done / elapsed, cpu * 1e6 / max(done, 1)
    finally:
        await transport.aclose()


def _clients(concurrency: int) -> dict[str, Callable[[], Transport]]:
    return {
        "h1": lambda: H1Transport(max_connections=concurrency, per_host_limit=concurrency),
        "aiohttp": lambda: AiohttpTransport(
            max_connections=concurrency, per_host_limit=concurrency
        ),
        "httpx": lambda: HttpxTransport(max_connections=concurrency),
    }


async def run(seconds: float, levels: list[int]) -> dict[str, Any]:
    load_before = os.getloadavg()[0]  # other work on the box skews both clients' numbers
    with receiver() as (url, description):
        print(f"receiver: {description}", flush=True)
        results: list[dict[str, Any]] = []
        for concurrency in levels:
            samples: dict[str, list[float]] = {name: [] for name in _clients(concurrency)}
            cpu: dict[str, list[float]] = {name: [] for name in _clients(concurrency)}
            for _ in range(RUNS):  # interleaved, so drift on the box hits every client alike
                for name, make in _clients(concurrency).items():
                    rps, cpu_us = await measure_with_cpu(make, url, concurrency, seconds)
                    samples[name].append(rps)
                    cpu[name].append(cpu_us)
            medians = {name: statistics.median(values) for name, values in samples.items()}
            cpu_medians = {name: statistics.median(values) for name, values in cpu.items()}
            results.append(
                {
                    "concurrency": concurrency,
                    "runs": samples,
                    "cpu_us_per_request_runs": cpu,
                    "median_rps": medians,
                    "median_cpu_us_per_request": cpu_medians,
                    "ratio_aiohttp_over_httpx": medians["aiohttp"] / medians["httpx"],
                    "ratio_h1_over_aiohttp": medians["h1"] / medians["aiohttp"],
                    "cpu_ratio_aiohttp_over_h1": cpu_medians["aiohttp"] / cpu_medians["h1"],
                }
            )
    return {
        "receiver": description,
        "body_bytes": len(BODY),
        "seconds_per_run": seconds,
        "runs": RUNS,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average_1m_before_after": [load_before, os.getloadavg()[0]],
        "results": results,
    }


def print_table(report: dict[str, Any]) -> None:
    before, after = report["load_average_1m_before_after"]
    print(f"load average (1 min) before/after: {before:.1f}/{after:.1f} on {report['cpus']} cpus")
    print("req/s (CPU µs per request)")
    print(f"{'concurrency':>11}  {'h1':>16}  {'aiohttp':>16}  {'httpx':>16}  h1/aiohttp")
    for row in report["results"]:
        rps, cpu = row["median_rps"], row["median_cpu_us_per_request"]
        cells = "  ".join(
            f"{f'{rps[n]:,.0f} ({cpu[n]:.0f})':>16}" for n in ("h1", "aiohttp", "httpx")
        )
        print(f"{row['concurrency']:>11}  {cells}  {row['ratio_h1_over_aiohttp']:.2f}x")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.http_clients", description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each run")
    parser.add_argument("--concurrency", default="8,64", help="comma-separated levels")
    parser.add_argument("--json", type=Path, help="write the results here as JSON")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)  # the receiver process
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve)
        return
    if shutil.which("nginx") is None and not NGINX.exists():
        print("nginx not found: using the aiohttp receiver", flush=True)
    levels = [int(level) for level in args.concurrency.split(",") if level.strip()]
    report = uvloop.run(run(args.seconds, levels))
    print_table(report)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
