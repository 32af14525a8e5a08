"""The SSRF guard at the network edge (SPEC Q4): at subscription writes and at every connection.

- `check_destination` resolves a URL's host once, synchronously, and refuses it when any address
  is not allowed (`streams.domain.ssrf`). The subscription services call it before writing.
- `GuardedResolver` is an aiohttp resolver: it resolves, then refuses the whole answer when any
  address is not allowed. Both delivery clients (`H1Transport`, `AiohttpTransport`) connect
  only to the addresses a resolver returned, so the addresses that were checked are the ones
  connected to: a name that answered with a public address when the subscription was created
  and with a private one later (DNS rebinding) is refused at delivery, before any connection
  is made.
- `GuardedTransport` wraps a transport: it refuses URLs whose host is an IP literal (neither
  client asks a resolver about those) and reports the resolver's refusals as
  ``FailureKind.BLOCKED_DESTINATION``, a permanent outcome (D5).

Setting ``HOOKSTREAM_ALLOW_PRIVATE_DESTINATIONS`` switches all of this off, for local development
and tests; `guard_transport` is then the identity.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from streams.adapters.http import (
    AiohttpTransport,
    HttpRequest,
    HttpResponse,
    Transport,
    ip_literal,
)
from streams.adapters.http1 import H1Transport
from streams.domain.models import FailureKind
from streams.domain.ssrf import BLOCKED_DESTINATION, IPNetwork, blocked_reason, parse_networks
from streams.errors import TransportError
from streams.settings import Settings

#: A synchronous host lookup: (host, port) -> the IP addresses it resolves to, as text.
HostLookup = Callable[[str, int], list[str]]

_LITERAL_CACHE_SIZE = 4096
#: The delivery clients, by the name ``HOOKSTREAM_HTTP_CLIENT`` gives them.
DELIVERY_CLIENTS: dict[str, type[H1Transport] | type[AiohttpTransport]] = {
    "h1": H1Transport,
    "aiohttp": AiohttpTransport,
}


class BlockedDestinationError(OSError):
    """A destination resolved to an address hookstream must not connect to."""

    def __init__(self, host: str, address: str, reason: str) -> None:
        self.host = host
        self.address = address
        self.reason = reason
        #: what was refused, without the reason code a `TransportError` puts in front
        self.detail = f"{host} resolves to {address}, {reason}"
        super().__init__(f"{BLOCKED_DESTINATION}: {self.detail}")


def system_lookup(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to through the system resolver."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def check_destination(
    url: str, allowed: Sequence[IPNetwork] = (), lookup: HostLookup = system_lookup
) -> str | None:
    """Why ``url`` may not be delivered to, or None when every address it resolves to is fine.

    A host that does not resolve at all is refused too: hookstream cannot check it.
    """
    parts = urlsplit(url)
    host = parts.hostname or ""
    literal = ip_literal(host)
    if literal is not None:
        addresses = [literal]
    else:
        try:
            addresses = lookup(host, parts.port or 443)
        except OSError:
            return f"{host} does not resolve"
        if not addresses:
            return f"{host} does not resolve"
    for address in addresses:
        reason = blocked_reason(address, allowed)
        if reason is not None:
            return f"{host} resolves to {address}: {reason}" if literal is None else reason
    return None


class GuardedResolver(AbstractResolver):
    """Resolves through ``inner`` and raises `BlockedDestinationError` for a refused answer."""

    def __init__(
        self, allowed: Sequence[IPNetwork] = (), inner: AbstractResolver | None = None
    ) -> None:
        self._allowed = tuple(allowed)
        self._inner = inner

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        if self._inner is None:
            self._inner = DefaultResolver()  # created lazily, inside the running loop
        results = await self._inner.resolve(host, port, family)
        for result in results:
            reason = blocked_reason(result["host"], self._allowed)
            if reason is not None:
                raise BlockedDestinationError(host, result["host"], reason)
        return results

    async def close(self) -> None:
        if self._inner is not None:
            await self._inner.close()


def _blocked_cause(exc: BaseException) -> BlockedDestinationError | None:
    seen: BaseException | None = exc
    for _ in range(8):  # the chains aiohttp builds are short; never loop on a cycle
        if seen is None:
            return None
        if isinstance(seen, BlockedDestinationError):
            return seen
        seen = getattr(seen, "os_error", None) or seen.__cause__ or seen.__context__
    return None


class GuardedTransport:
    """A `Transport` that refuses blocked IP-literal hosts and names resolver refusals."""

    def __init__(self, inner: Transport, allowed: Sequence[IPNetwork] = ()) -> None:
        self._inner = inner
        self._allowed = tuple(allowed)
        self._literals: dict[str, str | None] = {}

    def _literal_reason(self, url: str) -> str | None:
        if url in self._literals:
            return self._literals[url]
        host = urlsplit(url).hostname or ""
        literal = ip_literal(host)
        reason = None if literal is None else blocked_reason(literal, self._allowed)
        if len(self._literals) >= _LITERAL_CACHE_SIZE:
            self._literals.clear()
        self._literals[url] = reason
        return reason

    async def send(self, request: HttpRequest) -> HttpResponse:
        reason = self._literal_reason(request.url)
        if reason is not None:
            raise TransportError(FailureKind.BLOCKED_DESTINATION.value, reason)
        try:
            return await self._inner.send(request)
        except TransportError as exc:
            blocked = _blocked_cause(exc)
            if blocked is None or exc.kind == FailureKind.BLOCKED_DESTINATION.value:
                raise
            raise TransportError(FailureKind.BLOCKED_DESTINATION.value, blocked.detail) from exc

    async def aclose(self) -> None:
        await self._inner.aclose()


def allowed_networks(settings: Settings) -> tuple[IPNetwork, ...]:
    """The operator's allow-list of destination networks (CIDRs), from the settings."""
    # `destination_allowlist` is a tuple of CIDR strings once the settings declare it; until
    # then nothing is allow-listed.
    return parse_networks(getattr(settings, "destination_allowlist", ()) or ())


def guarded_transport(settings: Settings, **transport_options: Any) -> Transport:
    """The delivery transport (``http_client``) with the SSRF guard on, unless private
    destinations are allowed."""
    client = DELIVERY_CLIENTS[settings.http_client]
    if settings.allow_private_destinations:
        return client(**transport_options)
    allowed = allowed_networks(settings)
    inner = client(resolver=GuardedResolver(allowed), **transport_options)
    return GuardedTransport(inner, allowed)


def destination_problem(
    settings: Settings, url: str, lookup: HostLookup = system_lookup
) -> str | None:
    """`check_destination` under the settings: None when the guard is off."""
    if settings.allow_private_destinations:
        return None
    return check_destination(url, allowed_networks(settings), lookup)
