"""Recently delivered: the delivery ids a worker knows were answered 2xx lately (D1, Q1).

Delivery is at-least-once. A worker that takes over partitions after a crash or a rebalance
resumes from the last committed offsets, so the deliveries settled after that commit come to it
again; a router that crashed before committing puts a second copy of some deliveries on
`routed`. Each of them was delivered once already, and its success is in the attempt ledger.

`RecentSuccesses` holds the ids of successful deliveries: those the worker settled itself for
``window_s`` seconds, and those read back from the ledger when it was assigned partitions until
a time given with each (`keep`; `streams.lanes.recall` says how long). The dispatcher settles a
live delivery, a retry or a backfilled one whose id is here without sending it again (a
backfill's settle time after a re-enable overlaps the live path, R2). Replays, tests and probes
are always sent: a person asked for them, and so is what an offset reset rewinds (`RESET_MARK`).

It is a bound on duplicates, not a guarantee of exactly-once: a success whose ledger record did
not reach Kafka before a crash (kill -9 with records still in the producer's queue) is not
known to the next owner, so the endpoint can still see a delivery twice, and must deduplicate
on ``webhook-id`` as the Standard Webhooks spec says.
"""

from __future__ import annotations

from collections import deque
from typing import Final

#: Commit metadata of offsets moved back by `hookstream replay --reset-offsets` (R4). An
#: operator who rewinds a group asks for those deliveries again: a dispatcher assigned a
#: partition whose committed offset carries it does not read that partition's recent successes
#: back, so the rewound deliveries go out again. Its first commit there clears the mark.
RESET_MARK: Final = "hookstream:reset-offsets"


class _Timed:
    """Ids with a time each, forgotten in time order once their time is before a cutoff."""

    __slots__ = ("at", "order")

    def __init__(self) -> None:
        self.at: dict[str, float] = {}
        self.order: deque[tuple[float, str]] = deque()

    def put(self, delivery_id: str, time_s: float) -> None:
        """Give ``delivery_id`` ``time_s``, unless it already has a later one."""
        known = self.at.get(delivery_id)
        if known is None or time_s > known:
            self.at[delivery_id] = time_s
            self.order.append((time_s, delivery_id))

    def drop_before(self, cutoff_s: float) -> None:
        order = self.order
        while order and order[0][0] < cutoff_s:
            time_s, delivery_id = order.popleft()
            if self.at.get(delivery_id) == time_s:  # not given a later time since
                del self.at[delivery_id]


class RecentSuccesses:
    """Delivery ids that succeeded at most ``window_s`` seconds ago, in bounded memory."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._added = _Timed()  # settled here: the time of the success
        # read back at an assignment, each until a time of its own: apart, so that their
        # later expiry never holds back the expiry of what succeeds meanwhile
        self._kept = _Timed()

    def __len__(self) -> int:
        return len(self._added.at) + len(self._kept.at)

    def keep(self, delivery_id: str, until_s: float) -> None:
        """Count ``delivery_id`` as delivered until ``until_s`` (a success read back)."""
        if self.window_s > 0:
            self._kept.put(delivery_id, until_s)

    def add(self, delivery_id: str, at_s: float) -> None:
        if self.window_s > 0:
            self._added.put(delivery_id, at_s)

    def seen(self, delivery_id: str, now_s: float) -> bool:
        """Whether ``delivery_id`` succeeded within the window before ``now_s``."""
        self.expire(now_s)
        at_s = self._added.at.get(delivery_id)
        # additions come roughly in time order; one that arrived late may outlive its window
        # in memory for a while, never in the answer
        if at_s is not None and at_s >= now_s - self.window_s:
            return True
        until_s = self._kept.at.get(delivery_id)
        return until_s is not None and until_s >= now_s

    def expire(self, now_s: float) -> None:
        """Forget what succeeded before the window, and what was kept until before now."""
        self._added.drop_before(now_s - self.window_s)
        self._kept.drop_before(now_s)
