"""The portal's server-rendered charts (SPEC O2, U2) and the notices' portal link (H5, H6, U1)."""

from __future__ import annotations

import orjson

from streams.domain.models import OutcomeClass
from streams.domain.notice_email import render_email
from streams.domain.notices import (
    EarlyWarningNotice,
    SuspensionNotice,
    notice_from_payload,
    render_webhook,
    to_payload,
)
from streams.portal.charts import Series, line_chart

LINK = "https://hooks.example.com/portal/link?token=abc.def"


def test_u2_chart_is_svg_with_a_title_escaped_text_and_one_mark_per_point() -> None:
    svg = str(line_chart("c", "Latency <p99>", "desc & more", [0, 3_600_000, 7_200_000],
                         [Series("p50", [10.0, None, 30.0]), Series("p99", [50.0, 60.0, 70.0])],
                         unit=" ms"))  # fmt: skip
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert '<title id="c-t">Latency &lt;p99&gt;</title>' in svg
    assert "desc &amp; more" in svg and "<script" not in svg and "style=" not in svg
    assert svg.count("<circle") == 2  # p50: two points (one hour had none)
    assert svg.count("<rect") == 3  # p99: squares, not only another colour
    assert 'stroke-dasharray="6 4"' in svg
    assert "00:00" in svg and "02:00" in svg


def test_u2_chart_without_data_says_so() -> None:
    svg = str(line_chart("e", "t", "d", [], [Series("p50", [])]))
    assert "No data in this window" in svg


def _suspension(link: str | None) -> SuspensionNotice:
    return SuspensionNotice(
        subscription_id="sub_1", subscription_name="billing", tenant_id="acme",
        url="https://hooks.example.com/b", outcome_class=OutcomeClass.RETRYABLE,
        failure_count=3, first_failure_at=1_700_000_000_000, suspended_at=1_700_000_100_000,
        events_waiting=4, retention_s=604800.0, portal_link=link,
    )  # fmt: skip


def test_h5_u1_suspension_notice_carries_the_portal_link() -> None:
    notice = _suspension(LINK)
    mail = render_email(notice, sender="hookstream@example.com", recipients=["o@example.com"])
    assert LINK in mail.get_content()
    assert orjson.loads(render_webhook(notice))["data"]["portal_link"] == LINK
    assert notice_from_payload(notice.KIND.value, to_payload(notice)) == notice


def test_h5_no_link_no_portal_line() -> None:
    mail = render_email(_suspension(None), sender="h@example.com", recipients=["o@example.com"])
    assert "browser" not in mail.get_content()


def test_h6_u1_warning_notice_carries_the_portal_link() -> None:
    notice = EarlyWarningNotice(
        subscription_id="sub_1", subscription_name="billing", tenant_id="acme",
        url="https://hooks.example.com/b", outcome_class=OutcomeClass.PERMANENT,
        failure_count=2, first_failure_at=1_700_000_000_000, warned_at=1_700_000_050_000,
        portal_link=LINK,
    )  # fmt: skip
    mail = render_email(notice, sender="h@example.com", recipients=["o@example.com"])
    assert "See the failing attempts in your browser" in mail.get_content()
    assert LINK in mail.get_content()
