"""Which destination addresses hookstream may deliver to (SPEC Q4): pure, no I/O.

A webhook URL is chosen by a tenant, so without a guard a tenant could make hookstream's workers
POST to the private network they run in: a cloud metadata service, an admin port on loopback, a
database on 10/8. `blocked_reason` judges one IP address; every address a destination resolves to
must pass, both when a subscription is written and again at each connection (against DNS
rebinding, see ``streams.adapters.ssrf``).

Refused: private (RFC 1918, IPv6 unique-local), loopback, link-local (the metadata services
169.254.169.254 and fd00:ec2::254 live there or in unique-local space), multicast, shared CGNAT
space (100.64.0.0/10), unspecified, reserved, documentation and benchmarking ranges, and the IPv6
forms that embed an IPv4 address (IPv4-mapped, IPv4-compatible, 6to4, Teredo, NAT64), judged by
the IPv4 address inside. An operator can allow-list networks (for example an internal receiver).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from typing import Final

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: The reason code of every refusal, as the ledger, the DLQ and the API's 422 report it.
BLOCKED_DESTINATION: Final = "blocked_destination"

_CGNAT: Final = ipaddress.IPv4Network("100.64.0.0/10")
_METADATA: Final = frozenset(
    {ipaddress.IPv4Address("169.254.169.254"), ipaddress.IPv6Address("fd00:ec2::254")}
)
_NAT64: Final = (
    ipaddress.IPv6Network("64:ff9b::/96"),  # the well-known prefix
    ipaddress.IPv6Network("64:ff9b:1::/48"),  # local-use translation prefixes
)
_IPV4_COMPATIBLE: Final = ipaddress.IPv6Network("::/96")


def parse_networks(texts: Iterable[str]) -> tuple[IPNetwork, ...]:
    """CIDR strings to networks; raises ValueError naming the first bad one."""
    out: list[IPNetwork] = []
    for text in texts:
        try:
            out.append(ipaddress.ip_network(text.strip(), strict=False))
        except ValueError:
            raise ValueError(f"{text!r} is not a CIDR network") from None
    return tuple(out)


def _is_nat64(address: ipaddress.IPv6Address) -> bool:
    return any(address in net for net in _NAT64)


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries inside it, if it is one of the forms that do."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]  # the client's address; the server half is public by design
    if _is_nat64(address):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address in _IPV4_COMPATIBLE and int(address) > 1:  # not :: or ::1, judged on their own
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _own_reason(address: IPAddress) -> str | None:
    checks = (
        (address in _METADATA, "a cloud metadata address"),
        (address.is_unspecified, "the unspecified address"),
        (address.is_loopback, "a loopback address"),
        (address.is_link_local, "a link-local address"),
        (address.is_multicast, "a multicast address"),
        (isinstance(address, ipaddress.IPv4Address) and address in _CGNAT, "shared CGNAT space"),
        (address.is_private, "a private address"),
        (address.is_reserved, "a reserved address"),
        (not address.is_global, "not a public address"),
    )
    for hit, reason in checks:
        if hit:
            return reason
    return None


def blocked_reason(address: IPAddress | str, allowed: Sequence[IPNetwork] = ()) -> str | None:
    """Why hookstream must not connect to ``address``, or None when it may.

    ``allowed`` networks win over every rule (an operator's explicit choice). An IPv6 address
    that embeds an IPv4 one is refused when either of them is.
    """
    ip = ipaddress.ip_address(address) if isinstance(address, str) else address
    if isinstance(ip, ipaddress.IPv6Address) and ip.scope_id:
        ip = ipaddress.IPv6Address(str(ip).split("%", 1)[0])
    if any(ip.version == net.version and ip in net for net in allowed):
        return None
    if isinstance(ip, ipaddress.IPv6Address):
        inner = embedded_ipv4(ip)
        if inner is not None and any(inner in net for net in allowed if net.version == 4):
            return None
        if inner is not None:
            inner_reason = _own_reason(inner)
            if inner_reason is not None:
                return f"embeds {inner}: {inner_reason}"
            if ip.ipv4_mapped is not None or ip in _IPV4_COMPATIBLE or _is_nat64(ip):
                return None  # a public IPv4 destination, written the IPv6 way
    return _own_reason(ip)
