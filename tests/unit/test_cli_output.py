"""The CLI prints ``-`` for a missing value, never Python's ``None`` (SPEC section 4)."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from streams.cli import ledger
from streams.cli.common import shown
from streams.services import worker_api


def test_shown_is_a_dash_for_nothing_and_the_value_otherwise() -> None:
    assert shown(None) == "-"
    assert shown(0) == "0"
    assert shown(503) == "503"


def test_deliveries_list_prints_no_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """A delivery with no HTTP status yet (a timeout) lists as ``status=-``."""
    page = {
        "items": [
            {
                "delivery_id": "msg_1",
                "state": "error",
                "attempts": 1,
                "last_http_status": None,
                "event_type": "invoice.paid",
                "last_attempt_at": None,
            }
        ],
        "next_cursor": None,
    }

    def answer(*_args: Any, **_kwargs: Any) -> dict[str, Any]:
        return page

    monkeypatch.setattr(worker_api, "call", answer)
    monkeypatch.setenv("HOOKSTREAM_ADMIN_TOKEN", "t")
    result = CliRunner().invoke(ledger.deliveries, ["list", "--subscription", "sub_1"])
    assert result.exit_code == 0, result.output
    assert "None" not in result.output
    assert "status=- invoice.paid last=-" in result.output
