"""The subscription registry: the compacted `subscriptions` topic, materialised in memory.

Every worker reads the whole topic (all partitions, from the beginning) and keeps following it,
so the router can find matching subscriptions by tenant and event type through an index (P7)
and the dispatcher can look up a subscription's URL, secrets and timeout. A tombstone deletes.
Signing secrets are encrypted in the topic and decrypted as records are applied (S5, see
``streams.adapters.secretbox``); in memory they are plaintext, and never logged.

`ApiKeyRegistry` follows the compacted `apikeys` topic the same way: the admin API's tenant
keys, stored as hashes (Q6).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import hmac
import logging
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from streams.adapters import codec
from streams.adapters.kafka_clients import (
    FOLLOW_FETCH_WAIT_MS,
    make_consumer,
    produce,
    take,
    watermarks,
)
from streams.adapters.runtime_config import CONFIG_PREFIX, RuntimeConfig
from streams.adapters.secretbox import SecretBox
from streams.domain.filters import SubscriptionIndex
from streams.domain.models import Secret, Subscription, SubscriptionStatus
from streams.errors import ConfigError, DecodeError, HookstreamError
from streams.settings import Settings

log = logging.getLogger(__name__)


class CompactedTopicView(ABC):
    """Reads a compacted topic from the beginning and keeps following it; `apply` each record."""

    def __init__(self, settings: Settings, topic: str) -> None:
        self._settings = settings
        self._topic = settings.topic(topic)
        self._consumer: Consumer | None = None
        self._targets: dict[int, int] = {}
        self.ready = asyncio.Event()

    @abstractmethod
    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """Apply one record of the topic (an upsert, or a tombstone that deletes)."""

    # --- following the topic --------------------------------------------------------------
    def _open(self) -> Consumer:
        consumer = make_consumer(
            self._settings,
            f"registry-{uuid.uuid4().hex[:8]}",
            **{"enable.partition.eof": False, "fetch.wait.max.ms": FOLLOW_FETCH_WAIT_MS},
        )
        try:
            marks = watermarks(consumer, self._topic)
        except HookstreamError:
            consumer.close()
            raise
        parts = sorted(marks)
        self._targets = {part: high for part, (_low, high) in marks.items() if high > 0}
        consumer.assign([TopicPartition(self._topic, p, OFFSET_BEGINNING) for p in parts])
        return consumer

    def _poll(self, consumer: Consumer, timeout_s: float) -> None:
        for msg in take(consumer, 1000, timeout_s):
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    log.warning("registry consumer error: %s", err)
                continue
            self.apply(msg.key(), msg.value())
            part = msg.partition()
            if part in self._targets and (msg.offset() or 0) + 1 >= self._targets[part]:
                del self._targets[part]

    def load(self, timeout_s: float = 30.0) -> None:
        """Read the topic up to its current end, synchronously (CLI use)."""
        consumer = self._open()
        try:
            deadline = time.monotonic() + timeout_s
            while self._targets and time.monotonic() < deadline:
                self._poll(consumer, 0.2)
            if self._targets:
                raise HookstreamError(f"timed out reading {self._topic}")
            self._on_caught_up()
        finally:
            consumer.close()

    def _on_caught_up(self) -> None:  # noqa: B027  # a hook; most views need nothing here
        """Called once the view has read the topic up to where it ended when it started."""

    async def run(self, stop: asyncio.Event) -> None:
        """Follow the topic until ``stop`` is set; `ready` is set once caught up."""
        loop = asyncio.get_running_loop()
        consumer = await loop.run_in_executor(None, self._open)
        self._consumer = consumer
        try:
            while not stop.is_set():
                await loop.run_in_executor(None, self._poll, consumer, 0.2)
                if not self._targets and not self.ready.is_set():
                    self._on_caught_up()
                    log.info("%s caught up", self._topic)
                    self.ready.set()
        finally:
            await loop.run_in_executor(None, consumer.close)


class SubscriptionRegistry(CompactedTopicView):
    """An in-memory view of every subscription, kept current from the topic."""

    def __init__(self, settings: Settings, config: RuntimeConfig | None = None) -> None:
        super().__init__(settings, "subscriptions")
        self.config = config or RuntimeConfig()
        self._subs: dict[str, Subscription] = {}
        self._index = SubscriptionIndex()
        self._box = SecretBox.from_settings(settings)
        # Records this key cannot open, by subscription, while catching up: a later record of
        # the same subscription (a key rotation's rewrite) supersedes them (S5).
        self._unopened: dict[str, ConfigError] = {}
        self._caught_up = False
        self._listeners: list[Callable[[Subscription | None, Subscription], None]] = []

    def on_change(self, listener: Callable[[Subscription | None, Subscription], None]) -> None:
        """Call ``listener(old, new)`` after every upsert, on the registry's reading thread."""
        self._listeners.append(listener)

    # --- reading --------------------------------------------------------------------------
    def get(self, subscription_id: str) -> Subscription | None:
        return self._subs.get(subscription_id)

    def match(self, tenant_id: str, event_type: str) -> list[Subscription]:
        """Active subscriptions of ``tenant_id`` whose filters match ``event_type``."""
        subs = self._subs
        return [subs[sid] for sid in self._index.match(tenant_id, event_type) if sid in subs]

    def all(self) -> list[Subscription]:
        return list(self._subs.values())

    def __len__(self) -> int:
        return len(self._subs)

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """Apply one record of the topic: an upsert, or a tombstone that deletes."""
        if key is None:
            return
        sub_id = key.decode()
        if sub_id.startswith(CONFIG_PREFIX):
            self.config.apply(sub_id, value)  # runtime config shares the compacted topic (H2)
            return
        if value is None:
            self._subs.pop(sub_id, None)
            self._unopened.pop(sub_id, None)
            self._index.remove(sub_id)
            return
        try:
            sub = codec.decode(Subscription, value)
        except DecodeError as exc:
            log.error(
                "undecodable subscription record skipped",
                extra={"subscription_id": sub_id, "error": str(exc)},
            )
            return
        try:
            sub = open_secrets(self._box, sub)  # a wrong key raises ConfigError: never garbage
        except ConfigError as exc:
            if self._caught_up:
                raise
            self._unopened[sub_id] = exc
            return
        self._unopened.pop(sub_id, None)
        old = self._subs.get(sub.id)
        self._subs[sub.id] = sub
        self._index.upsert(
            sub.id, sub.tenant_id, sub.filters, active=sub.status is SubscriptionStatus.ACTIVE
        )
        for listener in self._listeners:
            try:
                listener(old, sub)
            except Exception:  # one listener's bug must not stop the registry's reading
                log.exception("subscription listener failed", extra={"subscription_id": sub.id})

    def _on_caught_up(self) -> None:
        self._caught_up = True
        for error in self._unopened.values():
            raise error  # the latest record of a subscription: this key cannot open it


def seal_secrets(box: SecretBox, sub: Subscription) -> Subscription:
    """``sub`` with its secrets as they are stored (encrypted when a key is configured)."""
    sealed = tuple(Secret(box.seal(s.value, sub.id), s.not_after) for s in sub.secrets)
    return dataclasses.replace(sub, secrets=sealed)


def open_secrets(box: SecretBox, sub: Subscription) -> Subscription:
    """``sub`` with its stored secrets decrypted."""
    opened = tuple(Secret(box.open(s.value, sub.id), s.not_after) for s in sub.secrets)
    return dataclasses.replace(sub, secrets=opened)


def publish_subscription(producer: Producer, settings: Settings, sub: Subscription) -> None:
    """Write a subscription to the registry topic, secrets sealed (the caller flushes)."""
    stored = seal_secrets(SecretBox.from_settings(settings), sub)
    produce(producer, settings.topic("subscriptions"), sub.id, codec.encode(stored))


def delete_subscription(producer: Producer, settings: Settings, subscription_id: str) -> None:
    """Write a tombstone: the subscription is deleted (an explicit act, never a suspension)."""
    producer.produce(settings.topic("subscriptions"), key=subscription_id.encode(), value=None)


# --- tenant API keys (Q6) -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class ApiKey:
    """A tenant's admin API key, as stored: only the SHA-256 of the key, never the key."""

    key_id: str
    tenant_id: str
    key_hash: str  # hex SHA-256 of the whole key text
    name: str
    created_at: int


def key_hash(token: str) -> str:
    """The stored form of a key. Keys are 256-bit random values, so a plain hash suffices."""
    return hashlib.sha256(token.encode()).hexdigest()


class ApiKeyRegistry(CompactedTopicView):
    """Every live tenant API key, kept current from the `apikeys` topic; a tombstone revokes."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings, "apikeys")
        self._keys: dict[str, ApiKey] = {}

    def all(self) -> list[ApiKey]:
        return list(self._keys.values())

    def get(self, key_id: str) -> ApiKey | None:
        return self._keys.get(key_id)

    def lookup(self, key_id: str, token: str) -> ApiKey | None:
        """The key whose id is ``key_id`` if ``token`` is that key (constant-time compare)."""
        found = self._keys.get(key_id)
        if found is None or not hmac.compare_digest(found.key_hash, key_hash(token)):
            return None
        return found

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        key_id = key.decode()
        if value is None:
            self._keys.pop(key_id, None)
            return
        try:
            record = orjson.loads(value)
            self._keys[key_id] = ApiKey(
                key_id=key_id,
                tenant_id=str(record["tenant_id"]),
                key_hash=str(record["key_hash"]),
                name=str(record.get("name", "")),
                created_at=int(record["created_at"]),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            log.error("undecodable api key record skipped", extra={"key_id": key_id})


def publish_api_key(producer: Producer, settings: Settings, key: ApiKey) -> None:
    """Write a key record (hash only) to the `apikeys` topic (the caller flushes)."""
    record = {
        "v": 1,
        "tenant_id": key.tenant_id,
        "key_hash": key.key_hash,
        "name": key.name,
        "created_at": key.created_at,
    }
    produce(producer, settings.topic("apikeys"), key.key_id, orjson.dumps(record))


def revoke_api_key(producer: Producer, settings: Settings, key_id: str) -> None:
    """Write a tombstone: the key stops working on every worker within moments."""
    producer.produce(settings.topic("apikeys"), key=key_id.encode(), value=None)
