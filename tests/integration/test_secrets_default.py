"""Secrets are encrypted by default (SPEC S5).

A real worker started with neither ``HOOKSTREAM_SECRET_KEY`` nor
``HOOKSTREAM_ALLOW_PLAINTEXT_SECRETS`` refuses to create a subscription through the admin API,
and ``hookstream subs create`` refuses too; both name the two settings, and the subscriptions
topic stays empty. With the local-development setting the same worker stores it.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from streams.adapters.kafka_admin import apply_topics
from streams.adapters.topic_reader import scan
from streams.cli.subs import subs
from streams.settings import Settings
from tests.integration.test_api import _WORKER, free_port
from tests.integration.workers import settings_env

pytestmark = pytest.mark.integration

ADMIN = "op-" + uuid.uuid4().hex
BOTH = ("HOOKSTREAM_SECRET_KEY", "HOOKSTREAM_ALLOW_PLAINTEXT_SECRETS")


def _stored(settings: Settings) -> list[bytes]:
    return [m.value() or b"" for m in scan(settings, settings.topic("subscriptions"))]


@pytest.fixture
def keyless(make_settings: Callable[..., Settings]) -> Settings:
    settings = make_settings(secret_key=None, web_port=free_port(), admin_token=ADMIN)
    apply_topics(settings)
    return settings


@pytest.fixture
def worker(keyless: Settings, tmp_path: Path) -> Iterator[str]:
    """A pipeline + admin API worker with no secret key; yields its base URL."""
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-c", _WORKER], env=settings_env(keyless), stdout=log, stderr=log
        )
    base = f"http://127.0.0.1:{keyless.web_port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert process.poll() is None, log_path.read_text()[-3000:]
            try:
                ready = httpx.get(f"{base}/v1/subscriptions?limit=1", headers=_auth(), timeout=10)
                if ready.status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, log_path.read_text()[-3000:]
            time.sleep(0.5)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def _auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN}"}


def test_S5_a_keyless_worker_refuses_to_create_a_subscription(
    keyless: Settings, worker: str
) -> None:
    """S5: no key and no local-development setting: refused, naming both; nothing stored."""
    body = {"tenant_id": "acme", "url": "http://127.0.0.1:9/hook"}
    refused = httpx.post(f"{worker}/v1/subscriptions", json=body, headers=_auth(), timeout=30)
    assert refused.status_code == 503, refused.text
    answer = refused.json()
    assert answer["error"] == "unavailable"
    assert all(name in answer["message"] for name in BOTH), answer
    assert _stored(keyless) == []


def test_S5_the_cli_refuses_too_and_allows_with_the_local_setting(keyless: Settings) -> None:
    """S5: `hookstream subs create` without a key names both settings; with
    HOOKSTREAM_ALLOW_PLAINTEXT_SECRETS=true it stores the subscription."""
    args = ["create", "--tenant", "acme", "--url", "http://127.0.0.1:9/cli"]
    env = settings_env(keyless)
    refused = CliRunner().invoke(subs, args, env=env)
    assert refused.exit_code != 0
    assert all(name in str(refused.exception) + refused.output for name in BOTH)
    assert _stored(keyless) == []
    allowed = CliRunner().invoke(
        subs, args, env={**env, "HOOKSTREAM_ALLOW_PLAINTEXT_SECRETS": "true"}
    )
    assert allowed.exit_code == 0, allowed.output
    assert len(_stored(keyless)) == 1
