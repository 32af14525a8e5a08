"""A deliberately broken hookstream, to show that the cluster test can fail (D1, Q1).

Put on ``PYTHONPATH`` of a worker process, Python imports this at start-up, before the worker.
It makes the router commit an event's offset as soon as its batch is read, before Kafka has
acknowledged the `archive` and `routed` records produced for it: the commit ordering that D1
forbids. A worker killed while those records still wait (a partition without a leader) loses
them. `tests/integration/test_cluster.py` runs the CI-sized cluster scenario with it and
expects the audit to find lost pairs. Never on the path of a real worker.
"""

from __future__ import annotations

from typing import Any

from streams.adapters import kafka_clients


def _commit_before_ack(self: Any) -> tuple[dict[tuple[str, int], int], int]:
    positions: dict[tuple[str, int], int] = {}
    mark = 0
    while self._batches:  # every sealed batch, acknowledged or not
        head = self._batches.popleft()
        positions.update(head.positions)
        mark = max(mark, head.mark)
    return positions, mark


setattr(kafka_clients.BatchAcks, "committable_marked", _commit_before_ack)  # noqa: B010
