"""Tenant fairness for dispatch capacity (F7), pure.

When more attempts are ready than there are free dispatch slots, `FairOrder` decides which
tenant's attempt goes next: deficit round robin over the tenants that are waiting, each tenant
earning ``weight`` credits per round (default 1). A tenant publishing a hundred times more than
another still gets one turn per round, so its flood cannot starve the other's trickle; with
weights, shares are proportional to the weights.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Mapping


class FairOrder:
    """Which waiting tenant gets the next free slot."""

    def __init__(self, weights: Mapping[str, float] | None = None) -> None:
        self._weights = dict(weights or {})
        self._waiting: OrderedDict[str, deque[int]] = OrderedDict()  # tenant -> waiter ids
        self._credit: dict[str, float] = {}

    def __len__(self) -> int:
        return sum(len(q) for q in self._waiting.values())

    def push(self, tenant: str, waiter: int) -> None:
        queue = self._waiting.get(tenant)
        if queue is None:
            queue = self._waiting[tenant] = deque()
            self._credit.setdefault(tenant, 0.0)
        queue.append(waiter)

    def discard(self, tenant: str, waiter: int) -> None:
        queue = self._waiting.get(tenant)
        if queue is not None and waiter in queue:
            queue.remove(waiter)
            if not queue:
                del self._waiting[tenant]

    def pop(self) -> tuple[str, int] | None:
        """The next (tenant, waiter), or None when nobody waits."""
        while self._waiting:
            tenant, queue = next(iter(self._waiting.items()))
            if self._credit.get(tenant, 0.0) >= 1.0:
                self._credit[tenant] -= 1.0
                waiter = queue.popleft()
                if not queue:
                    del self._waiting[tenant]
                    self._credit[tenant] = 0.0  # an idle tenant does not bank credit
                return tenant, waiter
            self._credit[tenant] = self._credit.get(tenant, 0.0) + self._weights.get(tenant, 1.0)
            self._waiting.move_to_end(tenant)
        return None
