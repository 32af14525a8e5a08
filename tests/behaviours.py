"""What a test receiver does with a request on a path (`tests.receivers`): well-behaved and
hostile behaviours, each a small frozen dataclass."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Respond:
    """Answer ``status`` after ``delay_s``, with extra headers (Retry-After, Location...)."""

    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    delay_s: float = 0.0


@dataclass(frozen=True)
class Reset:
    """Read the request, then reset the connection (SO_LINGER 0): the client sees an RST."""


@dataclass(frozen=True)
class Close:
    """Read the request, then close the connection cleanly without answering."""


@dataclass(frozen=True)
class Silent:
    """Accept and read the request, then never answer, until the client gives up."""


@dataclass(frozen=True)
class HugeBody:
    """A 200 whose body never ends in practice: ``content_length`` bytes (None: endless chunked),
    written ``chunk_size`` at a time with ``interval_s`` between chunks."""

    content_length: int | None = 2 * 1024**3
    chunk_size: int = 65536
    interval_s: float = 0.0


@dataclass(frozen=True)
class Trickle:
    """Slowloris: a 200 with headers promptly, then one body byte every ``interval_s``."""

    interval_s: float = 0.1
    content_length: int = 1_000_000


@dataclass(frozen=True)
class Garbage:
    """Answer with ``data`` as it is (not HTTP, or broken HTTP), then close."""

    data: bytes = b"SPAM SPAM SPAM\r\n\r\n"


@dataclass(frozen=True)
class Http10:
    """An HTTP/1.0 200 without Content-Length: the body ends when the connection closes."""

    body: bytes = b"ok from an old server"


@dataclass(frozen=True)
class Capacity:
    """A server that handles ``limit`` requests at once: each gets a 200 after ``delay_s``, and
    a request beyond the limit gets an immediate 503 (counted in `Receiver.overflows`)."""

    limit: int
    delay_s: float = 0.05


Behaviour = Respond | Reset | Close | Silent | HugeBody | Trickle | Garbage | Http10 | Capacity


@dataclass(frozen=True)
class PerId:
    """Script one delivery's attempts: the n-th request carrying a given ``webhook-id`` gets
    ``steps[n]``, and every request after the last step gets the last step again."""

    steps: tuple[Behaviour, ...]
