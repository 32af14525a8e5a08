"""When a dispatcher may start another attempt: not while Kafka cannot record it (Q1, D1).

A delivery is *settled* when its outcome's records (the ledger's, a retry's, a dead letter) are
handed to the producer, and *confirmed* once Kafka has those records and the position past it
is committed. A worker killed between the two takes its unconfirmed successes with it: the
partition's next owner replays them from the last commit and, not finding them in the ledger,
sends them again. So the number of settled, unconfirmed deliveries is what one ``kill -9``
costs in duplicates, and `CommitGate` bounds it twice:

- always at ``cap`` (4 per dispatch slot: 1,024 at the defaults), above what a healthy worker
  settles between two confirmed commits at full speed (commits every 0.2 s);
- at ``stalled_cap`` (a quarter slot each: 64) once no commit has been confirmed for
  ``stall_s`` (1 s) while deliveries waited for one: Kafka is away, restarting, or electing a
  leader. Without this, a worker went on sending its in-memory retries and buffered deliveries
  up to ``cap`` during a broker restart, and a ``kill -9`` before the broker was back cost a
  chaos run 1,020 duplicates (5.1% of 20,000).

Trade-off: while Kafka confirms nothing, a worker sends at most ``stalled_cap`` more deliveries
and then waits, even though the endpoints are up; they get the rest once Kafka is back. A
worker on a machine so loaded that its commits take over a second to be confirmed is held to
``stalled_cap`` until they are, which slows it down rather than risking the duplicates.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CommitGate:
    cap: int
    stalled_cap: int
    stall_s: float = 1.0
    _mark: int = field(default=-1, init=False)
    _confirmed_at: float = field(default=0.0, init=False)

    def held(self, settled: int, confirmed: int, now: float) -> bool:
        """Whether no attempt may start now, given the dispatcher's ``settled`` count and the
        highest count ``confirmed`` by a commit Kafka took (monotonic clock ``now``)."""
        waiting = settled - confirmed
        if confirmed != self._mark or waiting <= 0:
            # a commit was confirmed, or nothing waits for one: the stall clock starts over
            self._mark, self._confirmed_at = confirmed, now
        if waiting >= self.cap:
            return True
        return waiting >= self.stalled_cap and now - self._confirmed_at >= self.stall_s
