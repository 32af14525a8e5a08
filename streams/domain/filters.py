"""Event-type filters and the router's subscription index (SPEC S1, P7).

Event types are dot-separated segments of ``[A-Za-z0-9_-]``, such as ``invoice.paid``. A
subscription's filters are exact types, prefix wildcards and the catch-all:

- ``invoice.paid`` matches that type only;
- ``invoice.*`` matches every type below ``invoice`` at any depth (``invoice.paid``,
  ``invoice.paid.v2``), but not ``invoice`` itself;
- ``*`` matches every type.

A subscription with **no filters receives every event type**, the same as ``["*"]``: creating a
subscription without choosing types is taken to mean "send me everything", which is what a new
endpoint owner expects to see in a demo; to receive nothing, disable the subscription instead.

`SubscriptionIndex` answers the router's question "which active subscriptions of this tenant want
this type?" with dictionary lookups: one for the exact type, one per dot in the type for the
wildcards, and one for the catch-alls. The work grows with the matches and the depth of the type,
never with the number of subscriptions (P7).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

__all__ = [
    "CATCH_ALL",
    "MAX_LENGTH",
    "SubscriptionIndex",
    "matches",
    "validate_event_type",
    "validate_filter",
]

CATCH_ALL = "*"
#: Longest event type or filter accepted, in characters.
MAX_LENGTH = 256

_SEGMENTS = r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*"
_EVENT_TYPE = re.compile(_SEGMENTS)
_FILTER = re.compile(rf"\*|{_SEGMENTS}(?:\.\*)?")
_WILDCARD_SUFFIX = ".*"


def _check(kind: str, text: str, pattern: re.Pattern[str], shape: str) -> str:
    if not text:
        raise ValueError(f"{kind} must not be empty")
    if len(text) > MAX_LENGTH:
        raise ValueError(f"{kind} {text[:40]!r}... is longer than {MAX_LENGTH} characters")
    if pattern.fullmatch(text) is None:
        raise ValueError(f"{kind} {text!r} is not valid: {shape}")
    return text


def validate_event_type(name: str) -> str:
    """Return ``name`` if it is a valid event type, else raise ValueError saying why."""
    return _check(
        "event type",
        name,
        _EVENT_TYPE,
        "use segments of letters, digits, '_' or '-' separated by '.', like 'invoice.paid'",
    )


def validate_filter(pattern: str) -> str:
    """Return ``pattern`` if it is a valid filter, else raise ValueError saying why."""
    return _check(
        "filter",
        pattern,
        _FILTER,
        "use an event type like 'invoice.paid', a prefix wildcard like 'invoice.*', or '*' "
        "(segments of letters, digits, '_' or '-' separated by '.'; '*' only as a whole last "
        "segment)",
    )


def _matches_one(pattern: str, event_type: str) -> bool:
    if pattern in (CATCH_ALL, event_type):
        return True
    if pattern.endswith(_WILDCARD_SUFFIX):
        stem = pattern[:-1]  # keeps the dot: "invoice."
        return len(event_type) > len(stem) and event_type.startswith(stem)
    return False


def matches(filters: Sequence[str], event_type: str) -> bool:
    """Whether a subscription with (validated) ``filters`` receives ``event_type``."""
    if not filters:
        return True
    return any(_matches_one(pattern, event_type) for pattern in filters)


# tenant -> key -> subscription ids. Keys: the exact type, the wildcard's stem, or "" (catch-all).
_Table = dict[str, dict[str, set[str]]]


def _add(table: _Table, tenant_id: str, key: str, subscription_id: str) -> None:
    table.setdefault(tenant_id, {}).setdefault(key, set()).add(subscription_id)


def _discard(table: _Table, tenant_id: str, key: str, subscription_id: str) -> None:
    by_key = table.get(tenant_id)
    if by_key is None:
        return
    members = by_key.get(key)
    if members is None:
        return
    members.discard(subscription_id)
    if not members:  # drop empty containers so removed subscriptions cost no memory
        del by_key[key]
        if not by_key:
            del table[tenant_id]


class SubscriptionIndex:
    """The active subscriptions of every tenant, looked up by event type.

    Inactive (suspended or disabled) subscriptions are not indexed: upserting one with
    ``active=False`` removes it, and ``len`` counts the indexed, active subscriptions.
    """

    def __init__(self) -> None:
        self._entries: dict[str, tuple[str, tuple[str, ...]]] = {}
        self._exact: _Table = {}
        self._wildcard: _Table = {}
        self._catch_all: _Table = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, subscription_id: object) -> bool:
        return subscription_id in self._entries

    def _slots(self, filters: tuple[str, ...]) -> Iterable[tuple[_Table, str]]:
        if not filters:
            yield self._catch_all, ""
        for pattern in filters:
            if pattern == CATCH_ALL:
                yield self._catch_all, ""
            elif pattern.endswith(_WILDCARD_SUFFIX):
                yield self._wildcard, pattern[: -len(_WILDCARD_SUFFIX)]
            else:
                yield self._exact, pattern

    def upsert(
        self, subscription_id: str, tenant_id: str, filters: Sequence[str], active: bool = True
    ) -> None:
        """Add or replace a subscription. Invalid filters raise ValueError and change nothing."""
        checked = tuple(validate_filter(pattern) for pattern in filters)
        self.remove(subscription_id)
        if not active:
            return
        self._entries[subscription_id] = (tenant_id, checked)
        for table, key in self._slots(checked):
            _add(table, tenant_id, key, subscription_id)

    def remove(self, subscription_id: str) -> None:
        """Forget a subscription; removing an unknown id does nothing."""
        entry = self._entries.pop(subscription_id, None)
        if entry is None:
            return
        tenant_id, filters = entry
        for table, key in self._slots(filters):
            _discard(table, tenant_id, key, subscription_id)

    def match(self, tenant_id: str, event_type: str) -> list[str]:
        """Ids of the tenant's active subscriptions that receive ``event_type``, each once.

        The order is unspecified.
        """
        found: list[set[str]] = []
        exact = self._exact.get(tenant_id)
        if exact is not None and event_type in exact:
            found.append(exact[event_type])
        wildcard = self._wildcard.get(tenant_id)
        if wildcard is not None:
            # "a.b.c" asks for the stems "a" and "a.b"; a stem must leave something after its dot.
            dot = event_type.find(".")
            while 0 <= dot < len(event_type) - 1:
                members = wildcard.get(event_type[:dot])
                if members is not None:
                    found.append(members)
                dot = event_type.find(".", dot + 1)
        catch_all = self._catch_all.get(tenant_id)
        if catch_all is not None:
            found.append(catch_all[""])
        if not found:
            return []
        if len(found) == 1:
            return list(found[0])
        return list(set().union(*found))
