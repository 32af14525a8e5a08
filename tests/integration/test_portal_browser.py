"""The owner's portal in a real headless Chromium, against a real worker and the real Kafka
(SPEC U1-U5, with R1, R3, S3, S5, R5, H5 and Q6 through the portal).

One worker runs every component. Tenant ``acme`` has an endpoint that answers 503 (it gets
suspended: the failing subscription) and one that answers 410 (its deliveries are dead
letters); tenant ``other`` has a healthy one. The tests run in file order and share the
installation: sign in and read, re-enable behind a probe that fails then succeeds, replay a
dead letter, rotate a secret and the other actions, then the security checks. Screenshots of
the main pages go to docs/portal/.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.select import Select

from streams.adapters.kafka_admin import apply_topics
from streams.domain.models import SubscriptionStatus
from streams.domain.portal_tokens import sign_link
from streams.services import audit, keys
from streams.services.config import set_policy
from streams.services.events import publish_events
from streams.services.portal_links import link_key
from streams.services.subscriptions import create_subscription, get_subscription
from tests.integration.pipeline_harness import make_event
from tests.integration.portal_env import (
    ADMIN,
    PortalEnv,
    portal_settings,
    remove_topics,
    start_browser,
    start_worker,
    wait,
    wait_for_key,
)
from tests.integration.recovery_support import notifications
from tests.receivers import Receiver, Respond

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

DOWN = Respond(503, body=b"down for maintenance")


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    with Receiver() as started:
        yield started


@pytest.fixture(scope="module")
def env(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory, receiver: Receiver
) -> Iterator[PortalEnv]:
    root = tmp_path_factory.mktemp("portal")
    settings = portal_settings(kafka_bootstrap, root)
    worker = None
    driver = None
    try:
        apply_topics(settings)
        set_policy(settings, {"suspend.retryable": "3,0s", "suspend.permanent": "1000,0s",
                              "early_warning_at": "2"})  # fmt: skip
        worker = start_worker(settings, root)
        driver = start_browser()
        portal = PortalEnv(settings, worker, driver)
        populate(portal, receiver)
        yield portal
    finally:
        if driver is not None:
            driver.quit()
        if worker is not None:
            worker.stop(30)
        remove_topics(settings)


def populate(portal: PortalEnv, receiver: Receiver) -> None:
    s = portal.settings
    down = receiver.route("/a", DOWN)
    gone = receiver.route("/b", Respond(410, body=b"gone for good"))
    fine = receiver.route("/c", Respond(200))
    acme = {"tenant_id": "acme", "owner_emails": ["owner@example.com"]}
    portal.subs["failing"] = create_subscription(
        s, {**acme, "name": "orders hook", "url": down, "filters": ["order.*"]}
    )
    portal.subs["dead"] = create_subscription(
        s,
        {**acme, "name": "invoices hook", "url": gone, "filters": ["invoice.*"], "rate_limit": 50},
    )
    portal.subs["other"] = create_subscription(
        s, {"tenant_id": "other", "name": "other hook", "url": fine, "filters": ["*"]}
    )
    portal.keys["acme"] = keys.create_key(s, "acme")[1]
    portal.keys["other"] = keys.create_key(s, "other")[1]
    for key in portal.keys.values():
        wait_for_key(portal.base, key)
    publish_events(s, [make_event("acme", "order.created", n) for n in range(4)])
    publish_events(s, [make_event("acme", "invoice.paid", n) for n in range(2)])
    publish_events(s, [make_event("other", "user.created", 1)])
    failing = portal.subs["failing"]
    wait(lambda: get_subscription(s, failing.id).status is SubscriptionStatus.SUSPENDED,
         120, "the 503 endpoint suspended")  # fmt: skip
    dead = portal.subs["dead"].id
    wait(lambda: len(audit.list_dead_letters(s, dead)) >= 2, 60, "two dead letters")
    # published while suspended: the backfill delivers them after the re-enable (R2)
    publish_events(s, [make_event("acme", "order.updated", n) for n in range(3)])


def test_u1_u2_sign_in_and_see_the_failing_subscription_and_an_attempt(env: PortalEnv) -> None:
    """U1, U2: a tenant key signs in; the list shows status, health and the last error; a
    subscription shows health and analytics charts; a delivery shows each attempt."""
    env.driver.delete_all_cookies()
    env.open("/signin")
    assert env.driver.find_element(By.CSS_SELECTOR, "label[for=key]").text == "API key"
    # keyboard only: the key field has the focus, Enter sends the form
    assert env.driver.switch_to.active_element.get_attribute("id") == "key"
    old = env.driver.find_element(By.TAG_NAME, "html")
    ActionChains(env.driver).send_keys("hsk_000000000000_wrong" + Keys.ENTER).perform()
    env.wait_new_page(old)
    assert "That key is not valid" in env.text()
    env.open("/signin")
    env.shot("signin")
    env.sign_in(env.keys["acme"])
    text = env.text()
    assert "orders hook" in text and "invoices hook" in text and "other hook" not in text
    row = env.driver.find_element(By.XPATH, "//tr[.//a[text()='orders hook']]").text
    assert "suspended" in row and "failing" in row and "503" in row
    limits = env.driver.find_element(By.XPATH, "//tr[.//a[text()='invoices hook']]").text
    assert "invoice.*" in limits and "50" in limits and "/s" in limits  # filters, limits
    env.shot("subscriptions")

    failing = env.subs["failing"]
    env.follow(env.driver.find_element(By.LINK_TEXT, "orders hook"))
    text = env.text()
    assert "Consecutive failures" in text and "down for maintenance" in text
    assert env.driver.find_elements(By.CSS_SELECTOR, "svg.chart")
    assert "Re-enable" in text
    env.shot("subscription")

    env.follow(env.driver.find_element(By.LINK_TEXT, "Deliveries"))
    assert failing.id in env.driver.current_url
    env.open(f"/subscriptions/{failing.id}/deliveries?state=dead")
    env.open(f"/subscriptions/{failing.id}/deliveries")
    links = env.driver.find_elements(By.CSS_SELECTOR, "a.delivery")
    assert links, env.text()
    env.shot("deliveries")
    env.open(f"/subscriptions/{failing.id}/deliveries?size=2")
    first = [e.text for e in env.driver.find_elements(By.CSS_SELECTOR, "a.delivery")]
    env.click("older")
    second = [e.text for e in env.driver.find_elements(By.CSS_SELECTOR, "a.delivery")]
    assert len(first) == 2 and second and not set(first) & set(second)
    assert "cursor=" in env.driver.current_url and "size=2" in env.driver.current_url
    env.open(f"/subscriptions/{failing.id}/deliveries")
    links = env.driver.find_elements(By.CSS_SELECTOR, "a.delivery")
    env.follow(links[0])
    text = env.text()
    assert "down for maintenance" in text  # the response excerpt
    statuses = [e.text for e in env.driver.find_elements(By.CSS_SELECTOR, "td.http-status")]
    assert statuses and set(statuses) == {"503"}
    env.shot("delivery")


def test_u3_r1_reenable_behind_a_probe_that_fails_then_succeeds(
    env: PortalEnv, receiver: Receiver
) -> None:
    """U3, R1, R2: the probe fails (still suspended, told why), then passes; the backfill's
    progress shows on the subscription's page until it has delivered the missed events."""
    failing = env.subs["failing"]
    env.sign_in(env.keys["acme"])
    env.open(f"/subscriptions/{failing.id}")
    env.click("reenable")
    assert "The probe failed" in env.text() and "503" in env.text()
    assert get_subscription(env.settings, failing.id).status is SubscriptionStatus.SUSPENDED

    receiver.route("/a", Respond(200))
    env.open(f"/subscriptions/{failing.id}")
    env.click("reenable")
    assert "The probe succeeded" in env.text()
    env.shot("reenabled")
    text = env.until(f"/subscriptions/{failing.id}",
                     lambda t: bool(re.search(r"Backfill finished: (\d+) of \1", t)),
                     120, "backfill finished")  # fmt: skip
    assert "active" in text
    updated = {r.body for r in receiver.requests_to("/a") if b"order.updated" in r.body}
    assert len(updated) == 3  # the events published while it was suspended


def test_u3_r3_replay_a_dead_letter(env: PortalEnv, receiver: Receiver) -> None:
    """U3, R3: a dead letter is replayed from its page, with its own webhook-id."""
    dead = env.subs["dead"]
    receiver.route("/b", Respond(200))
    env.sign_in(env.keys["acme"])
    env.open(f"/subscriptions/{dead.id}/dead-letters")
    assert "http_410" in env.text()
    env.shot("dead-letters")
    buttons = env.driver.find_elements(By.CSS_SELECTOR, "button.replay-letter")
    assert len(buttons) == 2
    delivery_id = str(buttons[0].get_attribute("aria-label")).removeprefix("Replay ")
    clicked = time.time()
    env.follow(buttons[0])
    assert "Queued" in env.text() and delivery_id in env.text()
    wait(lambda: any(r.headers.get("webhook-id") == delivery_id and r.at >= clicked
                     for r in receiver.requests_to("/b")),
         60, "the replayed dead letter delivered")  # fmt: skip


def test_u3_s3_s5_r5_test_event_rotate_secret_disable_enable(env: PortalEnv) -> None:
    """U3: a test event's outcome; a new secret shown once; disable and enable."""
    failing = env.subs["failing"]
    env.sign_in(env.keys["acme"])
    env.open(f"/subscriptions/{failing.id}")
    env.click("send-test")
    assert "success: HTTP 200" in env.text()
    env.open(f"/subscriptions/{failing.id}")
    env.click("rotate")
    secret = env.driver.find_element(By.ID, "secret").get_attribute("value")
    assert secret is not None and secret.startswith("whsec_")
    env.shot("rotated")
    env.open(f"/subscriptions/{failing.id}")
    assert secret not in env.driver.page_source  # shown once, only on the answer to the POST
    assert "2 (values are never shown here)" in env.text()
    env.click("disable")
    assert "disabled" in env.driver.find_element(By.ID, "status").text
    env.click("enable")
    assert "active" in env.driver.find_element(By.ID, "status").text


def test_u3_r3_confirmations_filters_paging_and_sign_out(
    env: PortalEnv, receiver: Receiver
) -> None:
    """U2, U3, R3: a delivery that already succeeded asks for confirmation (409) before it is
    replayed; a time range and dead letters are counted before they are sent; deliveries
    filter by state; analytics switch windows; signing out ends the session."""
    failing, dead = env.subs["failing"], env.subs["dead"]
    env.sign_in(env.keys["acme"])
    env.open(f"/subscriptions/{failing.id}/deliveries")
    Select(env.driver.find_element(By.ID, "state")).select_by_value("success")
    env.click("filter")
    assert "state=success" in env.driver.current_url
    states = {e.text for e in env.driver.find_elements(By.CSS_SELECTOR, "td .badge")}
    assert states == {"\u2713 success"}, states
    env.follow(env.driver.find_elements(By.CSS_SELECTOR, "a.delivery")[0])
    env.click("replay-delivery")
    assert "Already delivered" in env.text() and "confirm_duplicate" in env.text()
    with env.http() as http:
        delivery = env.driver.current_url.rsplit("/", 2)[-2]
        assert http.get(f"/deliveries/{delivery}").status_code == 200
    env.click("confirm")
    assert "Delivery replayed" in env.text() and "Queued" in env.text()

    env.open(f"/subscriptions/{failing.id}")
    now = datetime.now(UTC)
    for field, moment in (("replay-since", now - timedelta(hours=1)),
                          ("replay-until", now + timedelta(minutes=5))):  # fmt: skip
        env.driver.execute_script(
            "arguments[0].value = arguments[1]",
            env.driver.find_element(By.ID, field),
            moment.strftime("%Y-%m-%dT%H:%M"),
        )
    before = len(receiver.requests_to("/a"))
    env.click("replay-range")
    assert "Replay time range?" in env.text()
    counted = int(env.driver.find_element(By.ID, "confirm-message").text.split()[0])
    assert counted == 7  # 4 published before the suspension, 3 while suspended
    env.click("confirm")
    assert "Time range replaying" in env.text()
    wait(lambda: len(receiver.requests_to("/a")) >= before + counted, 60, "the range replayed")

    env.open(f"/subscriptions/{dead.id}/dead-letters")
    env.click("replay-dead-letters")
    assert env.driver.find_element(By.ID, "confirm-message").text.startswith("2 to send")
    env.click("confirm")
    assert "Dead letters replaying" in env.text()

    live = len(receiver.requests_to("/a"))
    publish_events(env.settings, [make_event("acme", "order.paid", n) for n in range(6)])
    wait(lambda: len(receiver.requests_to("/a")) >= live + 6, 60, "live deliveries")
    text = env.until(f"/subscriptions/{failing.id}?window=1h",
                     lambda t: bool(re.search(r"Delivery latency p50 / p95 / p99\s+[\d,]+ ms", t)),
                     60, "the live deliveries' latency in the analytics")  # fmt: skip
    assert re.search(r"Response time p50 / p95 / p99\s+[\d,]+ ms", text)
    assert len(env.driver.find_elements(By.CSS_SELECTOR, "svg.chart")) == 3

    env.driver.execute_script("document.getElementById('stats').scrollIntoView()")
    assert env.driver.find_element(By.ID, "window").get_attribute("value") == "1h"
    assert len(env.driver.find_elements(By.CSS_SELECTOR, "#hours tbody tr th")) >= 1
    env.shot("analytics")
    env.click("signout")
    assert env.driver.find_element(By.ID, "key")
    env.open("/subscriptions")
    assert env.driver.current_url.endswith("/portal/signin")


def test_u4_isolation_csrf_headers_and_links(env: PortalEnv) -> None:
    """U4, Q6: another tenant's objects are 404; a form without its CSRF token is refused;
    cookies are HttpOnly and SameSite=Strict; a strict CSP; links are scoped and expire."""
    mine, theirs = env.subs["dead"], env.subs["other"]
    env.sign_in(env.keys["other"])
    env.open(f"/subscriptions/{mine.id}")
    assert "Not found" in env.text()
    cookie = env.driver.get_cookie("hookstream_portal")
    assert cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    with env.http() as http:
        assert http.get(f"/subscriptions/{mine.id}").status_code == 404
        assert http.get(f"/subscriptions/{mine.id}/deliveries").status_code == 404
        acme_delivery = next(
            a.delivery_id for a in audit.all_attempts(env.settings) if a.subscription_id == mine.id
        )
        assert http.get(f"/deliveries/{acme_delivery}").status_code == 404
        assert http.get(f"/subscriptions/{mine.id}/dead-letters").status_code == 404
        assert http.post(f"/subscriptions/{mine.id}/disable").status_code == 403  # no token
        page = http.get(f"/subscriptions/{theirs.id}")
        assert page.status_code == 200
        csp = page.headers["Content-Security-Policy"]
        assert "default-src 'self'" in csp and "script-src 'none'" in csp
        assert "<script" not in page.text
        token = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert token is not None
        refused = http.post(f"/subscriptions/{theirs.id}/disable", data={"csrf": "forged"})
        assert refused.status_code == 403
        other_token = http.post(f"/subscriptions/{mine.id}/disable",
                                data={"csrf": token.group(1)})  # fmt: skip
        assert other_token.status_code == 404  # a valid token does not open another tenant
    assert get_subscription(env.settings, theirs.id).status is SubscriptionStatus.ACTIVE
    assert get_subscription(env.settings, mine.id).status is SubscriptionStatus.ACTIVE
    env.open(f"/subscriptions/{theirs.id}")
    env.driver.execute_script("document.querySelectorAll('input[name=csrf]')"
                              ".forEach(e => e.remove())")  # fmt: skip
    env.click("disable")
    assert "Refused" in env.text() and "CSRF" in env.text()

    key = link_key(env.settings)
    assert key is not None
    env.driver.delete_all_cookies()
    expired = sign_link(key, mine.id, int(time.time()) - 1)
    env.open(f"/link?token={expired}")
    assert "This link has expired" in env.text()
    with env.http() as http:
        assert http.get("/link", params={"token": expired}).status_code == 403
        tampered = sign_link(key, mine.id, int(time.time()) + 600)[:-2] + "AA"
        assert http.get("/link", params={"token": tampered}).status_code == 403
    env.open(f"/link?token={sign_link(key, mine.id, int(time.time()) + 600)}")
    wait(lambda: mine.id in env.driver.current_url, 30, "the link opens its subscription")
    assert "invoices hook" in env.text()
    env.open(f"/subscriptions/{env.subs['failing'].id}")  # same tenant, outside the link
    assert "Not found" in env.text()


def test_h5_u1_the_suspension_notice_carries_a_working_link(env: PortalEnv) -> None:
    """H5, H6, R1, U1: the suspension, warning and failed-probe notices on the notifications
    topic link to the portal; the suspension notice's link opens the subscription's page."""
    failing = env.subs["failing"]
    notes = [n for n in notifications(env.settings) if n.subscription_id == failing.id]
    suspended = [n for n in notes if n.kind == "endpoint.suspended"]
    assert suspended, [n.kind for n in notes]
    found = re.search(r'"portal_link":"([^"]+)"', suspended[0].payload_json)
    assert found is not None and found.group(1).startswith(env.base + "/link?token=")
    for kind in ("endpoint.warning", "endpoint.probe_failed"):  # H6, R1
        also = [n for n in notes if n.kind == kind]
        assert also and f'"portal_link":"{env.base}/link?token=' in also[0].payload_json, kind
    env.driver.delete_all_cookies()
    env.driver.get(found.group(1))
    wait(lambda: failing.id in env.driver.current_url, 30, "the notice's link opens the page")
    assert "orders hook" in env.text()
    assert "Tenant acme" in env.text() and "link to one subscription" in env.text()


def test_u1_operator_sees_every_tenant(env: PortalEnv) -> None:
    """U1: the operator key sees every tenant's subscriptions."""
    env.sign_in(ADMIN)
    text = env.text()
    assert "Operator (all tenants)" in text
    assert "orders hook" in text and "other hook" in text
