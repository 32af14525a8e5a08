"""F1: the registry tells the dispatcher what changed, so a raised limit applies at once."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest

from streams.adapters import codec
from streams.adapters.registry import SubscriptionRegistry
from streams.domain.models import Secret, Subscription
from streams.settings import load_settings

SUB = Subscription("sub_1", "acme", "", "https://x.test/", ("*",), (Secret("whsec_dGVzdA=="),))


def _registry(tmp_path: Path) -> SubscriptionRegistry:
    return SubscriptionRegistry(load_settings(data_dir=tmp_path))


def test_f1_listeners_see_the_old_and_the_new_version(tmp_path: Path) -> None:
    registry = _registry(tmp_path)
    seen: list[tuple[float | None, float | None]] = []
    registry.on_change(
        lambda old, new: seen.append((old.rate_limit if old else None, new.rate_limit))
    )
    registry.apply(b"sub_1", codec.encode(dataclasses.replace(SUB, rate_limit=1.0)))
    registry.apply(b"sub_1", codec.encode(dataclasses.replace(SUB, rate_limit=50.0)))
    registry.apply(b"sub_1", None)  # a deletion is no upsert: no call
    assert seen == [(None, 1.0), (1.0, 50.0)]


def test_f1_a_failing_listener_does_not_stop_the_registry(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    registry = _registry(tmp_path)
    calls: list[str] = []

    def broken(old: Subscription | None, new: Subscription) -> None:
        raise RuntimeError("listener bug")

    registry.on_change(broken)
    registry.on_change(lambda old, new: calls.append(new.id))
    with caplog.at_level(logging.ERROR):
        registry.apply(b"sub_1", codec.encode(SUB))
    assert registry.get("sub_1") == SUB
    assert calls == ["sub_1"]
    assert "subscription listener failed" in caplog.text
