"""When a dispatcher may start another attempt: not while Kafka cannot record it (Q1, D1).

A delivery is *settled* when its outcome's records (the ledger's, a retry's, a dead letter) are
handed to the producer, and *committed* once Kafka has acknowledged them and taken the position
past it. A worker killed in between takes with it the successes whose ledger records Kafka had
not acknowledged: the partition's next owner replays them from the last commit and, not finding
them in the ledger, sends them again. (Acknowledged ones it finds and skips.) `CommitGate`
bounds what a ``kill -9`` can cost that way:

- always at ``cap`` settled, uncommitted deliveries (4 per dispatch slot: 1,024 at the
  defaults), above what a healthy worker settles between two commits at full speed (commits
  every 0.2 s);
- at ``stalled_cap`` records waiting for Kafka's acknowledgement (a quarter slot each: 64)
  once Kafka has acknowledged none for ``stall_s`` (0.25 s; a healthy broker answers in
  milliseconds): the broker is away, restarting, or electing a leader.

Before the second bound, a worker went on sending its in-memory retries and buffered deliveries
up to ``cap`` during a broker restart, and a ``kill -9`` before the broker was back cost a CI
chaos run 1,020 duplicates (5.1% of 20,000); bounded by commits confirmed within 1 s instead of
by acknowledgements, 345.

Trade-off: while Kafka acknowledges nothing, a worker sends at most ``stalled_cap`` more
deliveries and then waits, even though the endpoints are up; they get the rest once Kafka is
back. On a machine so loaded that acknowledgements take over 0.25 s to be served, a worker
is held at ``stalled_cap`` until they are, which slows it rather than risking duplicates.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CommitGate:
    cap: int
    stalled_cap: int
    stall_s: float = 0.25

    def held(self, uncommitted: int, unacknowledged: int, unanswered_s: float) -> bool:
        """Whether no attempt may start now: ``uncommitted`` settled deliveries wait for a
        commit, ``unacknowledged`` records for Kafka, which has acknowledged none of them for
        ``unanswered_s`` seconds."""
        if uncommitted >= self.cap:
            return True
        return unacknowledged >= self.stalled_cap and unanswered_s >= self.stall_s
