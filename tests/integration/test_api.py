"""The admin API on a real worker process and the real broker (SPEC S1-S5, D3, Q6, §4 HTTP).

`api_worker` applies topics.yaml under a unique prefix and starts `hookstream`'s worker (the
pipeline and the admin API components) as a subprocess with a free web port, an operator key and
an at-rest encryption key. The other API test modules reuse it.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from streams.adapters.kafka_admin import apply_topics, delete_topics, load_topology
from streams.adapters.registry import SubscriptionRegistry
from streams.adapters.topic_reader import scan
from streams.errors import ConfigError
from streams.services import subscriptions as service
from streams.services.auth import peer_token
from streams.settings import Settings, load_settings
from tests.conftest import REPO
from tests.receivers import Receiver

pytestmark = pytest.mark.integration

ADMIN = "op-" + uuid.uuid4().hex
SECRET_KEY = "k-" + uuid.uuid4().hex
_WORKER = (
    "from streams.lanes.pipeline import pipeline_component\n"
    "from streams.api import api_component\n"
    "from streams.agents.health import health_component\n"
    "from streams.agents.ledger import ledger_component\n"
    "from streams.agents.analytics import analytics_component\n"
    "from streams.app import create_app, run_worker\n"
    "from streams.settings import load_settings\n"
    "s = load_settings()\n"
    "parts = [pipeline_component, api_component, health_component, ledger_component,\n"
    "         analytics_component]\n"
    "run_worker(create_app(s, parts), s)\n"
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class ApiWorker:
    settings: Settings
    base_url: str
    log_path: Path
    process: subprocess.Popen[bytes]

    def client(self, key: str | None = ADMIN) -> httpx.Client:
        headers = {} if key is None else {"Authorization": f"Bearer {key}"}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=30)

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")


def _env(settings: Settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKSTREAM_")}
    env.update(
        HOOKSTREAM_KAFKA_BOOTSTRAP=settings.kafka_bootstrap,
        HOOKSTREAM_TOPIC_PREFIX=settings.topic_prefix,
        HOOKSTREAM_GROUP_ID=settings.group_id,
        HOOKSTREAM_DATA_DIR=str(settings.data_dir),
        HOOKSTREAM_TOPICS_FILE=str(settings.topics_file),
        HOOKSTREAM_WEB_PORT=str(settings.web_port),
        HOOKSTREAM_ADMIN_TOKEN=ADMIN,
        HOOKSTREAM_SECRET_KEY=SECRET_KEY,
        HOOKSTREAM_ALLOW_PRIVATE_DESTINATIONS="true",
        HOOKSTREAM_LOG_LEVEL="DEBUG",
    )
    return env


def start_worker(settings: Settings, log_path: Path) -> ApiWorker:
    apply_topics(settings)
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-c", _WORKER], cwd=REPO, env=_env(settings), stdout=log, stderr=log
        )
    worker = ApiWorker(settings, f"http://127.0.0.1:{settings.web_port}", log_path, process)
    deadline = time.monotonic() + 60
    with worker.client() as client:
        while True:
            assert process.poll() is None, f"the worker exited:\n{worker.logs()[-3000:]}"
            try:
                # ready: its lanes and ledger hold their partitions (a read of the ledger before
                # then answers 503 "partitions are moving"), and the API answers
                if (
                    client.get("/readyz").status_code == 200
                    and client.get("/v1/subscriptions?limit=1").status_code == 200
                ):
                    return worker
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"worker not serving:\n{worker.logs()[-3000:]}"
            time.sleep(0.3)


def stop_worker(worker: ApiWorker) -> None:
    worker.process.terminate()
    try:
        worker.process.wait(30)
    except subprocess.TimeoutExpired:
        worker.process.kill()
    names = [spec.full_name for spec in load_topology(worker.settings).topics]
    delete_topics(worker.settings, names)


@pytest.fixture(scope="module")
def api_worker(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiWorker]:
    prefix = f"t{uuid.uuid4().hex[:10]}."
    root = tmp_path_factory.mktemp("api")
    settings = load_settings(
        kafka_bootstrap=kafka_bootstrap,
        topic_prefix=prefix,
        group_id=prefix.rstrip("."),
        data_dir=root / "data",
        topics_file=REPO / "topics.yaml",
        web_port=free_port(),
        admin_token=ADMIN,
        secret_key=SECRET_KEY,
        allow_private_destinations=True,
    )
    worker = start_worker(settings, root / "worker.log")
    yield worker
    stop_worker(worker)


@pytest.fixture
def receiver(receiver_factory: Any) -> Receiver:
    result: Receiver = receiver_factory()
    return result


def _create(client: httpx.Client, url: str, tenant: str = "acme", **extra: Any) -> dict[str, Any]:
    response = client.post("/v1/subscriptions", json={"tenant_id": tenant, "url": url, **extra})
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def _verifies(secret: str, request: Any) -> bool:
    try:
        Webhook(secret).verify(request.body, request.headers)
    except WebhookVerificationError:
        return False
    return True


def test_auth_is_required_and_openapi_is_public(api_worker: ApiWorker) -> None:
    """Q6, S2: no key or a bad key is 401 with a challenge; /openapi.json needs no key."""
    with api_worker.client(None) as anonymous:
        missing = anonymous.get("/v1/subscriptions")
        assert missing.status_code == 401
        assert missing.headers["WWW-Authenticate"].startswith("Bearer")
        assert anonymous.get("/openapi.json").json()["openapi"].startswith("3.1")
        assert anonymous.get("/healthz").status_code == 200
    with api_worker.client("hsk_000000000000_nope") as wrong:
        bad = wrong.get("/v1/subscriptions")
        assert bad.status_code == 401
        assert 'error="invalid_token"' in bad.headers["WWW-Authenticate"]


def test_crud_read_your_write_and_errors(api_worker: ApiWorker) -> None:
    """S1, S2, R5, R6: create shows the secret once; every write is visible at once."""
    with api_worker.client() as api:
        created = _create(api, "http://127.0.0.1:9/hook", filters=["invoice.*"])
        sub_id = created["id"]
        assert created["secret"].startswith("whsec_")
        shown = api.get(f"/v1/subscriptions/{sub_id}").json()
        assert "secret" not in shown and shown["filters"] == ["invoice.*"]

        patched = api.patch(f"/v1/subscriptions/{sub_id}", json={"timeout_s": 5, "name": "n"})
        assert patched.status_code == 200 and patched.json()["timeout_s"] == 5
        assert api.get(f"/v1/subscriptions/{sub_id}").json()["name"] == "n"

        bad = api.patch(
            f"/v1/subscriptions/{sub_id}", json={"timeout_s": 99, "tenant_id": "x", "nope": 1}
        )
        assert bad.status_code == 422
        assert set(bad.json()["fields"]) == {"timeout_s", "tenant_id", "nope"}
        invalid = api.post("/v1/subscriptions", json={"tenant_id": "acme", "url": "ftp://x"})
        assert invalid.status_code == 422 and "url" in invalid.json()["fields"]
        json_type = {"Content-Type": "application/json"}
        not_json = api.post("/v1/subscriptions", content=b"{nope", headers=json_type)
        assert not_json.status_code == 400
        as_text = api.post(
            "/v1/subscriptions",
            content=b'{"tenant_id": "acme", "url": "http://127.0.0.1:9/text"}',
            headers={"Content-Type": "text/plain"},
        )
        assert as_text.status_code == 415 and as_text.json()["error"] == "unsupported_media_type"

        disabled = api.post(f"/v1/subscriptions/{sub_id}/disable").json()
        assert (disabled["status"], disabled["status_reason"]) == ("disabled", "manual")
        assert api.post(f"/v1/subscriptions/{sub_id}/disable").status_code == 409
        listed = api.get("/v1/subscriptions", params={"status": "disabled"}).json()["items"]
        assert [s["id"] for s in listed] == [sub_id]
        assert api.post(f"/v1/subscriptions/{sub_id}/enable").json()["status"] == "active"
        assert api.post(f"/v1/subscriptions/{sub_id}/enable").status_code == 409

        assert api.delete(f"/v1/subscriptions/{sub_id}").json() == {"id": sub_id, "deleted": True}
        assert api.get(f"/v1/subscriptions/{sub_id}").status_code == 404


def test_list_pagination_and_filters(api_worker: ApiWorker) -> None:
    """S2: limit + opaque cursor walk every subscription of a tenant exactly once."""
    tenant = f"page{uuid.uuid4().hex[:6]}"
    with api_worker.client() as api:
        made = {_create(api, "http://127.0.0.1:9/p", tenant=tenant)["id"] for _ in range(5)}
        seen: list[str] = []
        cursor = None
        while True:
            params: dict[str, str | int] = {"tenant_id": tenant, "limit": 2}
            if cursor:
                params["cursor"] = cursor
            page = api.get("/v1/subscriptions", params=params).json()
            seen += [s["id"] for s in page["items"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert sorted(seen) == sorted(made)
        assert api.get("/v1/subscriptions", params={"cursor": "garbage"}).status_code == 422
        assert api.get("/v1/subscriptions", params={"limit": 0}).status_code == 422


def test_test_send_and_rotation_grace(api_worker: ApiWorker, receiver: Receiver) -> None:
    """S3, D3, S5: a signed webhook.test; during the grace both secrets verify, then only new."""
    with api_worker.client() as api:
        sub = _create(api, receiver.url("/hook"))
        result = api.post(f"/v1/subscriptions/{sub['id']}/test").json()
        assert (result["status"], result["outcome"]) == (200, "success")
        first = receiver.wait_for(1)[0]
        assert json.loads(first.body)["type"] == "webhook.test"
        assert _verifies(sub["secret"], first)

        rotated = api.post(f"/v1/subscriptions/{sub['id']}/rotate-secret", json={"grace_s": 3})
        new_secret = rotated.json()["secret"]
        assert new_secret != sub["secret"]
        api.post(f"/v1/subscriptions/{sub['id']}/test")
        during = receiver.wait_for(2)[1]
        assert _verifies(sub["secret"], during) and _verifies(new_secret, during)

        time.sleep(3.5)
        api.post(f"/v1/subscriptions/{sub['id']}/test")
        after = receiver.wait_for(3)[2]
        assert _verifies(new_secret, after) and not _verifies(sub["secret"], after)


def test_secrets_encrypted_at_rest_and_never_logged(api_worker: ApiWorker) -> None:
    """S5: the topic holds only ciphertext; a wrong key is a ConfigError; no log has a secret."""
    with api_worker.client() as api:
        sub = _create(api, "http://127.0.0.1:9/enc")
        rotated = api.post(f"/v1/subscriptions/{sub['id']}/rotate-secret").json()
    raw = b"".join(
        msg.value() or b""
        for msg in scan(api_worker.settings, api_worker.settings.topic("subscriptions"))
    )
    for secret in (sub["secret"], rotated["secret"]):
        assert secret.encode() not in raw
        assert base64.b64decode(secret.removeprefix("whsec_")) not in raw
        assert secret not in api_worker.logs()
    assert b"hsenc1:" in raw
    wrong = api_worker.settings.model_copy(update={"secret_key": None})
    with pytest.raises(ConfigError, match="HOOKSTREAM_SECRET_KEY"):
        SubscriptionRegistry(wrong).load()


def test_services_never_log_secrets(
    api_worker: ApiWorker, caplog: pytest.LogCaptureFixture
) -> None:
    """S5, O4: creating and rotating log nothing that holds the secret, even at DEBUG."""
    caplog.set_level("DEBUG")
    settings = api_worker.settings
    sub = service.create_subscription(settings, {"tenant_id": "logs", "url": "http://127.0.0.1:9/"})
    _, new = service.rotate_secret(settings, sub.id)
    service.remove_subscription(settings, sub.id)
    for secret in (sub.secrets[0].value, new):
        assert secret not in caplog.text


def test_s6_o2_workers_ask_each_other_with_the_installation_peer_key(
    api_worker: ApiWorker,
) -> None:
    """S6, O2: the peer views take the peer key derived from the secret key every worker
    shares (a fleet needs no operator key for it), or the operator key; nothing else."""
    settings = load_settings(secret_key=SECRET_KEY)
    peer, from_admin = (
        peer_token(settings),
        peer_token(load_settings(admin_token=ADMIN, secret_key=None)),
    )
    assert peer is not None and from_admin is not None and peer != from_admin
    query = {"op": "delivery", "id": "msg_nope"}
    deadline = time.monotonic() + 60
    for key in (peer, ADMIN):
        with api_worker.client(key) as api:
            while (answer := api.get("/internal/ledger", params=query)).status_code == 503:
                assert time.monotonic() < deadline, "the ledger never became ready"
                time.sleep(0.5)
            assert answer.status_code == 200 and answer.json() == {"delivery": None}
    for wrong in (None, from_admin, "hspeer_" + "0" * 64):
        with api_worker.client(wrong) as api:
            assert api.get("/internal/ledger", params=query).status_code == 401, wrong


def test_ledger_views_and_not_yet_available(api_worker: ApiWorker) -> None:
    """D7, D8 and S4 through the API; re-enabling an active subscription is refused."""
    with api_worker.client() as api:
        sub = _create(api, "http://127.0.0.1:9/l")
        path = f"/v1/subscriptions/{sub['id']}/deliveries?status=dead"
        deadline = time.monotonic() + 60
        while (deliveries := api.get(path)).status_code == 503:  # S6: the ledger is restoring
            assert deliveries.headers["Retry-After"] and time.monotonic() < deadline
            time.sleep(0.5)
        empty: dict[str, object] = {"items": [], "next_cursor": None}
        assert deliveries.status_code == 200 and deliveries.json() == empty
        assert api.get("/v1/deliveries/nope").status_code == 404
        bad = api.get(f"/v1/subscriptions/{sub['id']}/deliveries?cursor=nope")
        assert bad.status_code == 422 and "cursor" in bad.json()["fields"]
        assert api.get("/v1/dlq", params={"cursor": "nope"}).status_code == 422
        assert api.get("/v1/dlq", params={"reason": "http_404"}).json() == empty
        assert api.get("/v1/dlq", params={"since": "yesterday"}).status_code == 422
        summary = api.get("/v1/health")
        assert summary.status_code == 200 and summary.json()["active"] >= 1
        health = api.get(f"/v1/subscriptions/{sub['id']}/health").json()
        assert health["health"]["consecutive_failures"] == 0 and health["breaker"] == "closed"
        reenable = api.post(f"/v1/subscriptions/{sub['id']}/reenable")
        assert reenable.status_code == 409, "only a suspended subscription is re-enabled (R1)"
