"""A whole installation for the portal's browser tests: topics, one real worker (every
component), real receivers, tenant keys, and headless Chromium driven by Selenium (SPEC U5).

Chromium and its driver are Debian's (``deploy/portal/install-browser.sh`` installs them).
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.wait import WebDriverWait

from streams.adapters.kafka_admin import TopicAdmin, apply_topics, delete_topics
from streams.domain.models import Subscription
from streams.settings import Settings, load_settings
from tests.conftest import REPO
from tests.integration.workers import WorkerProcess

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
#: Where the browser tests save their screenshots: docs/portal only when asked
#: (``PORTAL_SCREENSHOTS_DIR=docs/portal``, as docs/portal.md says), so a test run leaves the
#: working tree clean.
SCREENSHOTS = Path(
    os.environ.get("PORTAL_SCREENSHOTS_DIR", Path(tempfile.gettempdir()) / "hookstream-portal")
)
ADMIN = "op-" + uuid.uuid4().hex
SECRET_KEY = "k-" + uuid.uuid4().hex


def portal_settings(kafka_bootstrap: str, root: Path) -> Settings:
    prefix = f"t{uuid.uuid4().hex[:10]}."
    return load_settings(
        kafka_bootstrap=kafka_bootstrap,
        topic_prefix=prefix,
        group_id=prefix.rstrip("."),
        data_dir=root / "data",
        topics_file=REPO / "topics.yaml",
        admin_token=ADMIN,
        secret_key=SECRET_KEY,
        allow_private_destinations=True,
        retry_schedule="500ms",
        retry_window="20s",
        breaker_failures=100000,
        breaker_min_attempts=1000000,
        backfill_rate=50,
    )


def start_browser() -> webdriver.Chrome:
    options = Options()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1100,850", "--force-device-scale-factor=1"):  # fmt: skip
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(120)
    return driver


@dataclass
class PortalEnv:
    settings: Settings
    worker: WorkerProcess
    driver: webdriver.Chrome
    subs: dict[str, Subscription] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.worker.port}/portal"

    def open(self, path: str) -> str:
        self.driver.get(self.base + path)
        return self.driver.page_source

    def text(self) -> str:
        return str(self.driver.find_element(By.TAG_NAME, "body").text)

    def click(self, element_id: str) -> None:
        """Click a button or link that loads a new page, and wait for that page."""
        self.follow(self.driver.find_element(By.ID, element_id))

    def follow(self, element: WebElement) -> None:
        old = self.driver.find_element(By.TAG_NAME, "html")
        element.click()
        self.wait_new_page(old)

    def wait_new_page(self, old: WebElement) -> None:
        """Until the page that held ``old`` is replaced and the new one has loaded."""

        def replaced(_driver: object) -> bool:
            try:
                old.is_enabled()
            except WebDriverException:  # stale, or the node is gone mid-navigation
                return True
            return False

        WebDriverWait(self.driver, 120).until(replaced)
        WebDriverWait(self.driver, 120, ignored_exceptions=(WebDriverException,)).until(
            lambda d: d.execute_script("return document.readyState") == "complete"
        )

    def sign_in(self, key: str) -> None:
        self.driver.delete_all_cookies()
        self.open("/signin")
        self.driver.find_element(By.ID, "key").send_keys(key)
        self.click("signin")

    def shot(self, name: str) -> None:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        self.driver.save_screenshot(str(SCREENSHOTS / f"{name}.png"))

    def until(
        self, path: str, predicate: Callable[[str], bool], timeout_s: float, what: str
    ) -> str:
        """Reload ``path`` until its visible text satisfies ``predicate``."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.open(path)
            text = self.text()
            if predicate(text):
                return text
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {timeout_s}s\n{text[:2000]}\n"
                                     f"{self.worker.tail(20)}")  # fmt: skip
            time.sleep(1.0)

    def http(self) -> httpx.Client:
        """A plain HTTP client carrying the browser's cookies, to look at statuses and headers."""
        cookies = {c["name"]: c["value"] for c in self.driver.get_cookies()}
        return httpx.Client(base_url=self.base, cookies=cookies, timeout=60)


def wait_for_key(base_url: str, key: str) -> None:
    """Until the worker's admin API knows a new tenant key (it follows the apikeys topic)."""
    api = base_url.removesuffix("/portal")
    headers = {"Authorization": f"Bearer {key}"}
    wait(lambda: httpx.get(f"{api}/v1/subscriptions", headers=headers).status_code == 200,
         60, "the worker knows the tenant key")  # fmt: skip


def wait(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s}s")
        time.sleep(0.5)


def remove_topics(settings: Settings) -> None:
    admin = TopicAdmin(settings)
    delete_topics(settings, admin.names_with_prefix(settings.topic_prefix))
    delete_topics(settings, admin.names_with_prefix(settings.group_id))


def start_worker(settings: Settings, log_dir: Path) -> WorkerProcess:
    apply_topics(settings)
    worker = WorkerProcess(settings, "portal-worker", log_dir)
    worker.env["HOOKSTREAM_PORTAL_URL"] = f"http://127.0.0.1:{worker.port}/portal"
    worker.start()
    worker.wait_ready(180)
    return worker
