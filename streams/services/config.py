"""Runtime configuration changes (H2): validated, published, applied by every worker."""

from __future__ import annotations

import time
from collections.abc import Mapping

import orjson
from confluent_kafka import Producer

from streams.adapters import codec
from streams.adapters.kafka_clients import produce, write_flushed
from streams.adapters.runtime_config import load_policy, publish_policy
from streams.domain.models import ControlEvent
from streams.domain.policy import (
    SuspensionPolicy,
    is_policy_key,
    parse_policy_updates,
    policy_to_dict,
)
from streams.errors import ValidationError
from streams.settings import Settings

CONFIG_SUBJECT = "__config__"


def get_policy(settings: Settings) -> SuspensionPolicy:
    return load_policy(settings)


def set_policy(settings: Settings, updates: Mapping[str, str]) -> SuspensionPolicy:
    """Validate ``updates`` against the policy in force and publish the result.

    Raises ValidationError naming each bad key; the policy in force stays unchanged then.
    """
    unknown = {key: "unknown setting" for key in updates if not is_policy_key(key)}
    if unknown:
        raise ValidationError(unknown)
    current = load_policy(settings)
    policy = parse_policy_updates(current, updates)
    audit = ControlEvent(
        subscription_id=CONFIG_SUBJECT,
        kind="config_changed",
        at=int(time.time() * 1000),
        payload_json=orjson.dumps(
            {"before": policy_to_dict(current), "after": policy_to_dict(policy)}
        ).decode(),
    )

    def write(producer: Producer) -> None:
        publish_policy(producer, settings, policy)
        produce(producer, settings.topic("control"), CONFIG_SUBJECT, codec.encode(audit))

    write_flushed(settings, write, "publish the policy")
    return policy
