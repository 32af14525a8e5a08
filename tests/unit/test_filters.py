"""S1, P7: event-type filters and the router's subscription index."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from streams.domain import filters as filters_module
from streams.domain.filters import (
    MAX_LENGTH,
    SubscriptionIndex,
    matches,
    validate_event_type,
    validate_filter,
)


@pytest.mark.parametrize(
    "pattern",
    ["*", "invoice", "invoice.paid", "invoice.*", "invoice.paid.v2", "a-b_C9.*", "x" * MAX_LENGTH],
)
def test_S1_valid_filters_are_returned_unchanged(pattern: str) -> None:
    assert validate_filter(pattern) == pattern


@pytest.mark.parametrize(
    "pattern",
    [
        "",
        "invoice.",
        ".invoice",
        "invoice..paid",
        "inv*",
        "*.paid",
        "invoice.*.paid",
        "invoice.**",
        "**",
        "in voice",
        " invoice",
        "invoice/paid",
        "rechnung.bezahlt.ä",
        "x" * (MAX_LENGTH + 1),
    ],
)
def test_S1_invalid_filters_get_a_clear_error(pattern: str) -> None:
    with pytest.raises(ValueError, match="filter"):
        validate_filter(pattern)


@pytest.mark.parametrize("name", ["*", "invoice.*", "", "invoice.", "a b"])
def test_S1_event_types_have_no_wildcards(name: str) -> None:
    with pytest.raises(ValueError, match="event type"):
        validate_event_type(name)


def test_S1_valid_event_type() -> None:
    assert validate_event_type("invoice.paid.v2") == "invoice.paid.v2"


@pytest.mark.parametrize(
    ("filters", "event_type", "expected"),
    [
        (["invoice.paid"], "invoice.paid", True),
        (["invoice.paid"], "invoice.paid.v2", False),
        (["invoice.paid"], "invoice", False),
        (["invoice.*"], "invoice.paid", True),
        (["invoice.*"], "invoice.paid.v2", True),
        (["invoice.*"], "invoice", False),
        (["invoice.*"], "invoices.paid", False),
        (["invoice.paid.*"], "invoice.paid.v2", True),
        (["invoice.paid.*"], "invoice.paid", False),
        (["*"], "anything.at.all", True),
        (["customer.created", "invoice.*"], "invoice.voided", True),
        (["customer.created", "invoice.*"], "customer.deleted", False),
        ([], "anything", True),  # no filters: every event type
    ],
)
def test_S1_matches(filters: list[str], event_type: str, expected: bool) -> None:
    assert matches(filters, event_type) is expected


# --- the index -----------------------------------------------------------------------------------


def test_P7_index_finds_exact_wildcard_and_catch_all() -> None:
    index = SubscriptionIndex()
    index.upsert("exact", "acme", ["invoice.paid"], active=True)
    index.upsert("wild", "acme", ["invoice.*"], active=True)
    index.upsert("all", "acme", ["*"], active=True)
    index.upsert("none", "acme", [], active=True)
    index.upsert("other", "acme", ["customer.*"], active=True)
    assert sorted(index.match("acme", "invoice.paid")) == ["all", "exact", "none", "wild"]
    assert sorted(index.match("acme", "invoice")) == ["all", "none"]
    assert sorted(index.match("acme", "customer.created.v2")) == ["all", "none", "other"]
    assert len(index) == 5


def test_P7_tenants_never_see_each_other() -> None:
    index = SubscriptionIndex()
    index.upsert("a", "acme", ["*"])
    index.upsert("b", "globex", ["invoice.paid"])
    assert index.match("acme", "invoice.paid") == ["a"]
    assert index.match("globex", "invoice.paid") == ["b"]
    assert index.match("initech", "invoice.paid") == []


def test_P7_a_subscription_matched_twice_is_listed_once() -> None:
    index = SubscriptionIndex()
    index.upsert("s", "acme", ["invoice.paid", "invoice.*", "*"])
    assert index.match("acme", "invoice.paid") == ["s"]


def test_P7_inactive_subscriptions_are_not_routed() -> None:
    index = SubscriptionIndex()
    index.upsert("s", "acme", ["*"])
    index.upsert("s", "acme", ["*"], active=False)
    assert index.match("acme", "invoice.paid") == []
    assert len(index) == 0
    assert "s" not in index


def test_P7_upsert_replaces_the_filters() -> None:
    index = SubscriptionIndex()
    index.upsert("s", "acme", ["invoice.*"])
    index.upsert("s", "acme", ["customer.created"])
    assert index.match("acme", "invoice.paid") == []
    assert index.match("acme", "customer.created") == ["s"]
    assert len(index) == 1


def test_S1_invalid_filter_leaves_the_index_unchanged() -> None:
    index = SubscriptionIndex()
    index.upsert("s", "acme", ["invoice.*"])
    with pytest.raises(ValueError, match="filter"):
        index.upsert("s", "acme", ["customer.created", "bad filter"])
    assert index.match("acme", "invoice.paid") == ["s"]
    assert index.match("acme", "customer.created") == []


def test_P7_removing_everything_leaves_nothing_behind() -> None:
    index = SubscriptionIndex()
    for n in range(50):
        index.upsert(f"s{n}", f"t{n % 3}", [f"type{n}", f"pre{n}.*", "*"][: n % 4 or 1])
    for n in range(50):
        index.remove(f"s{n}")
    index.remove("never-added")
    assert len(index) == 0
    assert index.match("t0", "type0") == []
    # the memory of removed subscriptions is released (P6)
    assert not (index._exact or index._wildcard or index._catch_all)


def test_P7_match_never_falls_back_to_testing_each_subscription(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The router's lookup uses the index structure, not the per-filter predicate (P7)."""
    index = SubscriptionIndex()
    for n in range(1000):
        index.upsert(f"s{n}", "acme", [f"type{n}.*"])

    def forbidden(*args: object) -> bool:
        raise AssertionError("match scanned subscriptions one by one")

    monkeypatch.setattr(filters_module, "matches", forbidden)
    monkeypatch.setattr(filters_module, "_matches_one", forbidden)
    assert index.match("acme", "type7.created") == ["s7"]


# --- the index against brute force ---------------------------------------------------------------

_SEGMENT = st.sampled_from(["a", "b", "c"])
_TYPES = st.lists(_SEGMENT, min_size=1, max_size=3).map(".".join)
_FILTERS = st.one_of(
    _TYPES,
    _TYPES.map(lambda t: t + ".*"),
    st.just("*"),
)
_TENANTS = st.sampled_from(["t1", "t2"])
_SUB_IDS = st.sampled_from([f"s{n}" for n in range(8)])
ALL_TYPES = sorted(
    {".".join(p) for p in [(x,) for x in "abc"]}
    | {f"{x}.{y}" for x in "abc" for y in "abc"}
    | {f"{x}.{y}.{z}" for x in "abc" for y in "abc" for z in "abc"}
)


class IndexMachine(RuleBasedStateMachine):
    """Random upserts and removes: the index always agrees with filtering every subscription."""

    def __init__(self) -> None:
        super().__init__()
        self.index = SubscriptionIndex()
        self.model: dict[str, tuple[str, list[str], bool]] = {}

    @rule(
        sub=_SUB_IDS,
        tenant=_TENANTS,
        filters=st.lists(_FILTERS, max_size=3),
        active=st.booleans(),
    )
    def upsert(self, sub: str, tenant: str, filters: list[str], active: bool) -> None:
        self.index.upsert(sub, tenant, filters, active)
        self.model[sub] = (tenant, filters, active)

    @rule(sub=_SUB_IDS)
    def remove(self, sub: str) -> None:
        self.index.remove(sub)
        self.model.pop(sub, None)

    @invariant()
    def agrees_with_brute_force(self) -> None:
        for tenant in ("t1", "t2"):
            for event_type in ALL_TYPES:
                found = self.index.match(tenant, event_type)
                expected = sorted(
                    sub
                    for sub, (sub_tenant, filters, active) in self.model.items()
                    if active and sub_tenant == tenant and matches(filters, event_type)
                )
                assert sorted(found) == expected
                assert len(found) == len(set(found))

    @invariant()
    def counts_active_subscriptions(self) -> None:
        assert len(self.index) == sum(1 for _, _, active in self.model.values() if active)


TestIndexAgreesWithBruteForce = IndexMachine.TestCase
TestIndexAgreesWithBruteForce.settings = settings(max_examples=60, stateful_step_count=30)


@given(
    subscriptions=st.dictionaries(
        _SUB_IDS, st.tuples(_TENANTS, st.lists(_FILTERS, max_size=3)), max_size=8
    ),
    tenant=_TENANTS,
    event_type=_TYPES,
)
def test_P7_index_equals_brute_force(
    subscriptions: dict[str, tuple[str, list[str]]], tenant: str, event_type: str
) -> None:
    index = SubscriptionIndex()
    for sub, (sub_tenant, filters) in subscriptions.items():
        index.upsert(sub, sub_tenant, filters)
    expected = sorted(
        sub
        for sub, (sub_tenant, filters) in subscriptions.items()
        if sub_tenant == tenant and matches(filters, event_type)
    )
    assert sorted(index.match(tenant, event_type)) == expected
