"""X5: one typed settings object, validated, errors that name the setting, docs kept true."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from streams.adapters.kafka_clients import producer_config
from streams.cli.settings_doc import settings_reference
from streams.errors import ConfigError
from streams.lanes.pipeline import Pipeline
from streams.settings import load_settings

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests read the process environment: start each from none of our variables."""
    for name in list(os.environ):
        if name.startswith("HOOKSTREAM_"):
            monkeypatch.delenv(name)


def test_x5_defaults_follow_the_spec() -> None:
    settings = load_settings()
    assert settings.kafka_bootstrap == "127.0.0.1:9092"
    assert settings.topic_prefix == "hookstream."
    assert settings.retry_schedule == (60.0, 300.0, 1800.0, 7200.0)
    assert settings.retry_window == 86400.0
    assert settings.topic("routed") == "hookstream.routed"


def test_x5_environment_is_read_with_the_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOOKSTREAM_RETRY_SCHEDULE", "1s, 2s,4s")
    monkeypatch.setenv("HOOKSTREAM_WEB_PORT", "7000")
    settings = load_settings()
    assert settings.retry_schedule == (1.0, 2.0, 4.0)
    assert settings.web_port == 7000


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("HOOKSTREAM_WEB_PORT", "nope"),
        ("HOOKSTREAM_WEB_PORT", "70000"),
        ("HOOKSTREAM_RETRY_SCHEDULE", "5m,1m"),
        ("HOOKSTREAM_RETRY_SCHEDULE", "1m,soon"),
        ("HOOKSTREAM_TOPIC_PREFIX", "bad prefix"),
        ("HOOKSTREAM_LOG_LEVEL", "LOUD"),
        ("HOOKSTREAM_AGENT_FETCH_WAIT", "0s"),
        ("HOOKSTREAM_AGENT_FETCH_MIN_BYTES", "0"),
        ("HOOKSTREAM_HTTP_CLIENT", "curl"),
        ("HOOKSTREAM_PRODUCER_LINGER", "1h"),
        ("HOOKSTREAM_OUTBOX_LINGER", "0"),
    ],
)
def test_x5_bad_values_name_the_setting(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert caught.value.setting == variable


def test_x5_settings_are_frozen() -> None:
    settings = load_settings()
    with pytest.raises(Exception, match="frozen"):
        settings.web_port = 1  # type: ignore[misc]


def test_x5_secrets_are_masked() -> None:
    settings = load_settings(admin_token="very-secret-token")
    assert "very-secret-token" not in repr(settings)
    assert "very-secret-token" not in str(settings.model_dump())


def test_x5_configuration_doc_is_generated_from_the_fields() -> None:
    assert DOC.read_text() == settings_reference(), "run: hookstream config settings --markdown"


def test_p2_producers_linger_as_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    """P2: every delivery waits for one producer linger (its routed record)."""
    assert producer_config(load_settings())["linger.ms"] == 1.0  # the default: 1 ms
    monkeypatch.setenv("HOOKSTREAM_PRODUCER_LINGER", "20ms")
    assert producer_config(load_settings())["linger.ms"] == 20.0


def test_p2_the_dispatchers_records_get_a_producer_of_their_own_only_when_asked() -> None:
    """P2: ``outbox_linger`` moves the records no delivery waits for to a producer lingering
    longer; routed records keep ``producer_linger``. Unset, one producer serves both lanes."""
    shared = Pipeline(load_settings())
    assert shared.outbox_producer is shared.producer
    split = Pipeline(load_settings(outbox_linger="20ms"))
    assert split.settings.outbox_linger == 0.02
    assert split.outbox_producer is not split.producer


def _documented_defaults() -> dict[str, str]:
    """docs/configuration.md's default column: variable -> the value as shown."""
    found: dict[str, str] = {}
    for line in DOC.read_text().splitlines():
        cells = [cell.strip() for cell in line.split("|")[1:3]] if line.startswith("| `") else []
        if len(cells) == 2 and cells[1] != "`(unset)`":
            found[cells[0].strip("`")] = cells[1].strip("`")
    return found


def test_x5_every_documented_default_can_be_written_into_its_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A user who copies a default from docs/configuration.md gets that default, not a refusal.
    (The duration settings were shown in seconds, ``0.1``, which their variables refuse: a bare
    number could mean seconds or milliseconds.)"""
    documented = _documented_defaults()
    assert len(documented) > 40, documented
    defaults = load_settings()
    for variable, shown in documented.items():
        monkeypatch.setenv(variable, shown)
    loaded = load_settings()
    for variable in documented:
        name = variable.removeprefix("HOOKSTREAM_").lower()
        assert getattr(loaded, name) == getattr(defaults, name), variable


@pytest.mark.parametrize("variable", ["HOOKSTREAM_LEDGER_FETCH_WAIT", "HOOKSTREAM_PRODUCER_LINGER"])
def test_x5_a_duration_needs_its_unit(monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    monkeypatch.setenv(variable, "0.1")
    with pytest.raises(ConfigError, match="not a duration") as caught:
        load_settings()
    assert caught.value.setting == variable
    monkeypatch.setenv(variable, "100ms")
    assert getattr(load_settings(), variable.removeprefix("HOOKSTREAM_").lower()) == 0.1
