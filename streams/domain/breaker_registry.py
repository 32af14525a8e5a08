"""The breakers of one worker: one `Breaker` per endpoint origin, with bounded memory (SPEC H8).

`breaker` holds one origin's state machine; this module keeps many of them, creates one closed
on first use, and forgets those that no longer matter (idle and settled, or past a hard cap), so
a worker that has seen a million origins does not hold a million breakers. Like the breaker it
reads no clock: times are integer milliseconds passed in by the caller.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable

from streams.domain.breaker import Breaker, BreakerConfig, BreakerState, TransitionListener

__all__ = ["BreakerRegistry", "RegistryListener"]

#: Called as ``listener(origin, old, new, now_ms)`` on every state change of any origin's breaker.
RegistryListener = Callable[[str, BreakerState, BreakerState, int], None]


class BreakerRegistry:
    """The breakers of one worker, one per origin, with bounded memory (H8).

    A breaker unused for ``idle_s`` is forgotten when it is `Breaker.settled` (closed, no
    failure in its window): the next request for that origin starts a fresh closed one. An
    idle breaker that is not settled is kept and checked again one idle period later.
    ``max_breakers`` is a hard cap: past it, the least recently used breaker is dropped
    whatever its state. Every `get` does O(1) amortised cleanup.
    """

    def __init__(
        self,
        config: BreakerConfig | None = None,
        *,
        idle_s: float = 900.0,
        max_breakers: int = 100_000,
        on_transition: RegistryListener | None = None,
    ) -> None:
        if not (math.isfinite(idle_s) and idle_s > 0) or max_breakers < 1:
            raise ValueError("idle_s must be > 0 and max_breakers at least 1")
        self.config = config or BreakerConfig()
        self._idle_ms = math.ceil(idle_s * 1000)
        self._max = max_breakers
        self._listener = on_transition
        self._breakers: OrderedDict[str, Breaker] = OrderedDict()

    def __len__(self) -> int:
        return len(self._breakers)

    def get(self, origin: str, now_ms: int) -> Breaker:
        """The breaker of ``origin``, created closed on first use."""
        breaker = self._breakers.get(origin)
        if breaker is None:
            breaker = Breaker(self.config, self._bind(origin))
            self._breakers[origin] = breaker
        else:
            self._breakers.move_to_end(origin)
        breaker.last_used_ms = max(breaker.last_used_ms, now_ms)
        self._sweep(now_ms, budget=2)
        return breaker

    def forget(self, origin: str) -> None:
        """Drop ``origin``'s breaker: the next request starts a fresh, closed one (R1)."""
        self._breakers.pop(origin, None)

    def peek(self, origin: str) -> Breaker | None:
        """The breaker of ``origin`` if one exists, without touching it."""
        return self._breakers.get(origin)

    def states(self) -> dict[str, BreakerState]:
        """Every known origin's state, for the health summary (S4)."""
        return {origin: breaker.state for origin, breaker in self._breakers.items()}

    def evict_idle(self, now_ms: int) -> int:
        """Forget every idle, settled breaker now; returns how many were dropped."""
        before = len(self._breakers)
        self._sweep(now_ms, budget=before)
        return before - len(self._breakers)

    def _bind(self, origin: str) -> TransitionListener | None:
        listener = self._listener
        if listener is None:
            return None

        def notify(old: BreakerState, new: BreakerState, now_ms: int) -> None:
            listener(origin, old, new, now_ms)

        return notify

    def _sweep(self, now_ms: int, budget: int) -> None:
        while len(self._breakers) > self._max:
            self._breakers.popitem(last=False)
        for _ in range(budget):
            if not self._breakers:
                return
            origin, breaker = next(iter(self._breakers.items()))
            if now_ms - breaker.last_used_ms < self._idle_ms:
                return
            if breaker.settled(now_ms):
                del self._breakers[origin]
            else:
                breaker.last_used_ms = now_ms
                self._breakers.move_to_end(origin)
