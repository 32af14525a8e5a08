"""R2: a backfill's progress that Kafka cannot give right now is an error the API and CLI
show as unknown, not a crash (a 500) while a broker restarts."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from streams.adapters import control_log
from streams.errors import HookstreamError
from streams.settings import load_settings


class CoordinatorMoving:
    """A consumer whose group coordinator is moving: committed() fails NOT_COORDINATOR."""

    closed = False

    def committed(self, parts: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        raise KafkaException(KafkaError(KafkaError.NOT_COORDINATOR))

    def close(self) -> None:
        CoordinatorMoving.closed = True


def test_r2_progress_unreadable_during_a_coordinator_move_is_a_hookstream_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(control_log, "make_consumer", lambda *_a, **_k: CoordinatorMoving())
    monkeypatch.setattr(control_log, "watermarks", lambda *_a: {0: (0, 5), 1: (0, 0)})
    settings = load_settings()
    with pytest.raises(HookstreamError, match="backfill progress cannot be read now"):
        control_log.stored_progress(settings)
    assert CoordinatorMoving.closed
