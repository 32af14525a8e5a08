"""The SSRF guard (SPEC Q4): a table of addresses, writes, and DNS rebinding at delivery."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from streams.adapters.http import HttpRequest
from streams.adapters.ssrf import (
    DELIVERY_CLIENTS,
    GuardedResolver,
    GuardedTransport,
    check_destination,
)
from streams.domain.models import FailureKind
from streams.domain.ssrf import blocked_reason, parse_networks
from streams.errors import TransportError, ValidationError
from streams.services.subscriptions import create_subscription
from streams.settings import load_settings
from tests.receivers import Receiver

BLOCKED = [
    "10.1.2.3", "172.16.0.1", "192.168.0.10", "127.0.0.1", "127.9.9.9", "0.0.0.0",
    "169.254.169.254", "169.254.1.1", "100.64.0.1", "100.127.255.254", "224.0.0.1",
    "239.255.255.250", "240.0.0.1", "255.255.255.255", "192.0.2.1", "198.18.0.1",
    "::1", "::", "fe80::1", "fc00::1", "fd12:3456::1", "fd00:ec2::254", "ff02::1",
    "::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254", "::127.0.0.1",
    "2002:7f00:1::1", "2002:a9fe:a9fe::1", "64:ff9b::a00:1", "64:ff9b::7f00:1",
    "64:ff9b:1::a00:1", "fe80::1%eth0",
]  # fmt: skip
ALLOWED = ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"]


@pytest.mark.parametrize("address", BLOCKED)
def test_blocked_addresses(address: str) -> None:
    """Q4: private, loopback, link-local, metadata, CGNAT, multicast and embedded forms."""
    assert blocked_reason(address) is not None


@pytest.mark.parametrize("address", ALLOWED)
def test_public_addresses_pass(address: str) -> None:
    assert blocked_reason(address) is None


def test_allow_list_wins() -> None:
    """Q4: an operator's allow-listed network is reachable, and nothing else is."""
    allowed = parse_networks(["10.20.0.0/16"])
    assert blocked_reason("10.20.1.1", allowed) is None
    assert blocked_reason("::ffff:10.20.1.1", allowed) is None
    assert blocked_reason("10.21.1.1", allowed) is not None
    with pytest.raises(ValueError, match="CIDR"):
        parse_networks(["not-a-net"])


def test_check_destination_resolves_every_address() -> None:
    def lookup(host: str, port: int) -> list[str]:
        return {"good.test": ["8.8.8.8"], "mixed.test": ["8.8.8.8", "10.0.0.1"]}[host]

    assert check_destination("https://good.test/x", lookup=lookup) is None
    assert "10.0.0.1" in (check_destination("https://mixed.test/x", lookup=lookup) or "")
    assert check_destination("https://[::1]:8443/x", lookup=lookup) is not None
    assert check_destination("https://169.254.169.254/latest", lookup=lookup) is not None

    def nxdomain(host: str, port: int) -> list[str]:
        raise socket.gaierror(socket.EAI_NONAME, "no such host")

    assert "does not resolve" in (check_destination("https://gone.test/", lookup=nxdomain) or "")


def test_create_refuses_blocked_destination_before_writing(tmp_path: Any) -> None:
    """Q4: the 422 names url with reason blocked_destination; nothing reaches Kafka."""
    settings = load_settings(
        kafka_bootstrap="127.0.0.1:1", data_dir=tmp_path, allow_private_destinations=False
    )

    def lookup(host: str, port: int) -> list[str]:
        return ["169.254.169.254"]

    with pytest.raises(ValidationError) as caught:
        create_subscription(
            settings, {"tenant_id": "acme", "url": "https://meta.test/"}, lookup=lookup
        )
    assert caught.value.fields["url"].startswith("blocked_destination")


class RebindingResolver(AbstractResolver):
    """First answer public, every later one loopback: the DNS-rebinding attack."""

    def __init__(self) -> None:
        self.calls = 0

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.calls += 1
        address = "93.184.216.34" if self.calls == 1 else "127.0.0.1"
        return [
            ResolveResult(
                hostname=host, host=address, port=port, family=socket.AF_INET, proto=0, flags=0
            )
        ]

    async def close(self) -> None:
        return None


@pytest.mark.parametrize("client", DELIVERY_CLIENTS)
async def test_dns_rebinding_is_refused_and_never_connects(
    receiver_factory: Any, client: str
) -> None:
    """Q4: public when checked, private at delivery: refused, the receiver sees nothing."""
    receiver: Receiver = receiver_factory()
    inner = RebindingResolver()
    first = await inner.resolve("rebind.test", receiver.port)
    assert blocked_reason(first[0]["host"]) is None  # what the write-time check saw
    transport = GuardedTransport(DELIVERY_CLIENTS[client](resolver=GuardedResolver(inner=inner)))
    request = HttpRequest(f"http://rebind.test:{receiver.port}/hook", b"{}", {}, 5.0)
    try:
        with pytest.raises(TransportError) as caught:
            await transport.send(request)
    finally:
        await transport.aclose()
    assert caught.value.kind == FailureKind.BLOCKED_DESTINATION.value
    # the reason code is said once: "blocked_destination: rebind.test resolves to 127.0.0.1, ..."
    assert str(caught.value).count("blocked_destination") == 1
    assert str(caught.value).startswith("blocked_destination: rebind.test resolves to 127.0.0.1")
    assert inner.calls == 2
    assert receiver.requests == []


@pytest.mark.parametrize("client", DELIVERY_CLIENTS)
async def test_ip_literal_hosts_are_refused_too(receiver_factory: Any, client: str) -> None:
    """Q4: neither client resolves an IP literal, so the guard checks it itself."""
    receiver: Receiver = receiver_factory()
    transport = GuardedTransport(DELIVERY_CLIENTS[client](resolver=GuardedResolver()))
    try:
        with pytest.raises(TransportError) as caught:
            await transport.send(HttpRequest(receiver.url("/x"), b"{}", {}, 5.0))
    finally:
        await transport.aclose()
    assert caught.value.kind == FailureKind.BLOCKED_DESTINATION.value
    assert receiver.requests == []
