"""A receiver that accepts every connection, reads the request and never answers.

The dead endpoint of the F3 isolation benchmark: every attempt to it ends in the
subscription's timeout. It runs in a child process of its own (``python -m bench.silent PORT``),
so holding many open connections costs the benchmark's publisher nothing; on SIGTERM it prints
how many connections it accepted and how many of them sent a request, as one JSON line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from bench.nginx import free_port, wait_listening


@dataclass
class _Counts:
    connections: int = 0
    requests: int = 0
    open: set[asyncio.StreamWriter] = field(default_factory=set)


async def _serve(port: int) -> dict[str, int]:
    counts = _Counts()

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        counts.connections += 1
        counts.open.add(writer)
        seen_request = False
        try:
            while chunk := await reader.read(65536):
                if not seen_request:
                    seen_request = True
                    counts.requests += 1
                del chunk  # read and dropped: the client waits for an answer that never comes
        except ConnectionError:
            pass
        finally:
            counts.open.discard(writer)
            writer.close()

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    server = await asyncio.start_server(hold, "127.0.0.1", port, backlog=1024)
    async with server:
        await stop.wait()
    for writer in list(counts.open):
        writer.close()
    return {"connections": counts.connections, "requests": counts.requests}


@dataclass
class Silent:
    url: str
    port: int
    counts: dict[str, Any] = field(default_factory=dict)  # filled when the block ends


@contextmanager
def silent_receiver(path: str = "/never") -> Iterator[Silent]:
    """Run the never-answering receiver in a child process for the duration of the block."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.silent", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    silent = Silent(f"http://127.0.0.1:{port}/{path.lstrip('/')}", port)
    try:
        wait_listening(port, process, "the silent receiver")
        yield silent
    finally:
        process.terminate()
        try:
            out, _ = process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            out, _ = process.communicate(timeout=10)
        with contextlib.suppress(ValueError, IndexError):
            silent.counts = json.loads(out.decode().strip().splitlines()[-1])


def main() -> int:
    counts = asyncio.run(_serve(int(sys.argv[1])))
    print(json.dumps(counts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
