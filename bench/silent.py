"""A receiver that accepts every connection, reads the request and never answers, or answers
each request 200 after a fixed delay.

Never answering, it is the dead endpoint of the F3 isolation benchmark: every attempt to it ends
in the subscription's timeout. Answering after a delay (``answer_after_ms``), it is the slow
endpoint of the F7 variant where tenants compete for dispatch slots: each attempt holds a slot
for that long. It runs in a child process of its own (``python -m bench.silent PORT [DELAY_MS]``),
so holding many open connections costs the benchmark's publisher nothing; on SIGTERM it prints
how many connections it accepted and how many requests it read, as one JSON line.
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


_ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"


async def _answer_late(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay_s: float, counts: _Counts
) -> None:
    """HTTP/1.1 keep-alive: read each request (headers and a Content-Length body), wait
    ``delay_s``, answer 200 with no body."""
    while True:
        head = await reader.readuntil(b"\r\n\r\n")
        counts.requests += 1
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        if length:
            await reader.readexactly(length)
        await asyncio.sleep(delay_s)
        writer.write(_ANSWER)
        await writer.drain()


async def _never_answer(reader: asyncio.StreamReader, counts: _Counts) -> None:
    """Read and drop everything: the client waits for an answer that never comes."""
    seen_request = False
    while await reader.read(65536):
        if not seen_request:
            seen_request = True
            counts.requests += 1


async def _serve(port: int, delay_ms: float | None = None) -> dict[str, int]:
    counts = _Counts()

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        counts.connections += 1
        counts.open.add(writer)
        try:
            if delay_ms is None:
                await _never_answer(reader, counts)
            else:
                await _answer_late(reader, writer, delay_ms / 1000, counts)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            counts.open.discard(writer)
            writer.close()

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    server = await asyncio.start_server(connection, "127.0.0.1", port, backlog=1024)
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
def silent_receiver(path: str = "/never", answer_after_ms: float | None = None) -> Iterator[Silent]:
    """Run the receiver in a child process for the duration of the block: never answering, or
    answering every request 200 after ``answer_after_ms``."""
    port = free_port()
    delay = [] if answer_after_ms is None else [str(answer_after_ms)]
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.silent", str(port), *delay],
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
    delay_ms = float(sys.argv[2]) if len(sys.argv) > 2 else None
    counts = asyncio.run(_serve(int(sys.argv[1]), delay_ms))
    print(json.dumps(counts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
