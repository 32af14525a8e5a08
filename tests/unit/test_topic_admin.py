"""X1 on a fresh cluster: a topic one node just created is unknown to another for a moment.

Reading the topics back after creating them (to wait until the broker shows topics.yaml's
state) must count such a topic as not there yet, and ask again, rather than fail start-up.
"""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from streams.adapters.kafka_admin import TopicAdmin
from streams.settings import load_settings


class FreshCluster:
    """An AdminClient of a cluster whose node answering configs has not seen ``lagging`` yet."""

    def __init__(self, lagging: str) -> None:
        self.lagging = lagging

    def list_topics(self, timeout: float) -> Any:
        partition = SimpleNamespace(replicas=[1, 2, 3])
        topic = SimpleNamespace(partitions={0: partition}, error=None)
        return SimpleNamespace(topics={"t.events": topic, "t.routed": topic})

    def describe_configs(self, resources: list[Any], request_timeout: float) -> dict[Any, Any]:
        out = {}
        for resource in resources:
            future: Future[Any] = Future()
            if resource.name == self.lagging:
                future.set_exception(KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)))
            else:
                entry = SimpleNamespace(value="3600000", source=1)  # DYNAMIC_TOPIC_CONFIG
                future.set_result({"retention.ms": entry})
            out[resource] = future
        return out


def test_x1_a_topic_not_yet_known_to_every_node_reads_as_not_there_yet() -> None:
    admin = TopicAdmin(load_settings(kafka_bootstrap="127.0.0.1:1"))
    admin._client = FreshCluster(lagging="t.events")  # type: ignore[assignment]
    states = admin.describe(["t.events", "t.routed"])
    assert list(states) == ["t.routed"]
    assert states["t.routed"].config == {"retention.ms": "3600000"}
    assert states["t.routed"].replication_factor == 3
