"""Runtime configuration that every worker applies within seconds, without a restart (H2).

Config records live in the compacted `subscriptions` topic under keys that start with
``__config__:`` (today only ``__config__:policy``, the suspension policy as JSON). Every worker
already follows that topic for its registry, so a change reaches every worker as fast as a
subscription update does, and compaction keeps the latest value forever. A record that fails
validation is logged and ignored: the policy in force stays.
"""

from __future__ import annotations

import logging

import orjson
from confluent_kafka import Producer

from streams.adapters.kafka_clients import produce
from streams.adapters.topic_reader import scan
from streams.domain.policy import SuspensionPolicy, policy_from_dict, policy_to_dict
from streams.errors import ValidationError
from streams.settings import Settings

log = logging.getLogger(__name__)

CONFIG_PREFIX = "__config__:"
POLICY_KEY = f"{CONFIG_PREFIX}policy"


class RuntimeConfig:
    """The live values of runtime configuration in one worker."""

    def __init__(self) -> None:
        self.policy = SuspensionPolicy()
        self.version = 0

    def apply(self, key: str, value: bytes | None) -> None:
        """Apply one config record from the topic (a tombstone restores the default)."""
        if key != POLICY_KEY:
            log.warning("unknown config record %s ignored", key)
            return
        if value is None:
            self.policy = SuspensionPolicy()
        else:
            try:
                self.policy = policy_from_dict(orjson.loads(value))
            except (orjson.JSONDecodeError, ValidationError, TypeError) as exc:
                log.error("invalid policy record ignored; the policy in force stays: %s", exc)
                return
        self.version += 1
        log.info("suspension policy applied", extra={"policy": policy_to_dict(self.policy)})


def publish_policy(producer: Producer, settings: Settings, policy: SuspensionPolicy) -> None:
    """Write the policy record (the caller flushes)."""
    value = orjson.dumps(policy_to_dict(policy))
    produce(producer, settings.topic("subscriptions"), POLICY_KEY, value)


def load_policy(settings: Settings) -> SuspensionPolicy:
    """The policy in force, read from the topic (CLI use; workers follow the topic instead)."""
    config = RuntimeConfig()
    for msg in scan(settings, settings.topic("subscriptions")):
        key = msg.key()
        if key is not None and key.decode() == POLICY_KEY:
            config.apply(POLICY_KEY, msg.value())
    return config.policy
