"""The recovery scenario of a cluster chaos run (SPEC H3, H5, R2): ``--recovery``.

One extra subscription, of its own tenant, matches every event and points at the farm's
``/down`` (503 until the run heals it) with its notification webhook at ``/notify``. It fails
from the start, like the farm's ``/gone`` and ``/missing`` subscriptions (410, 404) do; the run
suspends it, and only it, under the faults, then re-enables it while the faults go on:

1. **Arm.** The suspension policy is global and the retryable threshold counts every failure
   of an episode, permanent ones too (`streams.domain.health`), so the ``/gone`` and
   ``/missing`` subscriptions would reach any threshold ``/down`` reaches. ``/down`` matches
   every event of its tenant and they match a quarter, so it fails about four times as often.
   Once the farm has seen ``arm_factor`` x B + ``arm_margin`` of its deliveries fail for good
   (B: the most events generated so far for any ``/gone`` or ``/missing`` subscription, an
   upper bound of its failures), the run sets ``suspend.retryable`` to that count, age 0:
   ``/down`` is past it, the others are a factor below it. B counts events generated, while
   ``/down`` counts deliveries that used up their retries: with ``/down`` at four times the
   rate, a factor f arms only once the run has gone on 4/(4-f) times the lag from publish to
   exhausted (f=3: 4x; f=2: 2x). Under a 50k run's faults f=3 did not arm in 600 s (so the lag
   was over 150 s; chaos-cluster-20261202T0928), so f is 2.
2. **Suspend.** It waits until the subscription is suspended (H3), then puts the policy back
   (nothing suspends). If a ``/gone`` or ``/missing`` subscription could come within
   ``arm_margin`` of the threshold first, it puts the policy back and gives up (reported).
3. **Hold.** Events keep being archived while it is suspended: at least ``hold_s``, and until
   the faults before the rolling restarts are done, so the backfill runs across those.
4. **Re-enable.** ``/down`` is healed, and `streams.services.recovery.reenable` (what
   ``POST /v1/subscriptions/{id}/reenable`` calls) probes it and starts the paced backfill (R2).
5. **Backfill.** It waits until the backfill's progress says finished.

`timeline` records each step's time in seconds from the start of publishing (as the faults'
``at_s``); `chaos.recovery_check` audits the outcome once the run has drained.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from confluent_kafka import KafkaException

from chaos.cluster import NO_SUSPENSION, Cluster
from chaos.farm import ReceiverFarm
from chaos.load import EVENT_TYPES, EventSource
from streams.adapters.ssrf import guarded_transport
from streams.domain.filters import matches
from streams.domain.models import Subscription, SubscriptionStatus
from streams.errors import ConflictError, HookstreamError
from streams.services.config import set_policy
from streams.services.recovery import ReenableResult, backfill_progress, reenable
from streams.services.subscriptions import create_subscription, load_registry

TENANT = "recovery"
#: What a call to Kafka may raise while a broker is away or the group coordinator moves: asked
#: again. `backfill_progress` lets the client's own error through (a coordinator move during a
#: rolling restart: ``NOT_COORDINATOR``); `timeline` counts those.
KAFKA_BUSY = (HookstreamError, KafkaException)
FAILING = frozenset({"gone", "missing"})  # the farm's paths that fail every delivery


@dataclass(frozen=True)
class RecoveryPlan:
    hold_s: float = 20.0
    arm_factor: int = 2
    arm_margin: int = 20
    suspend_timeout_s: float = 600.0
    reenable_timeout_s: float = 300.0
    backfill_timeout_s: float = 900.0
    poll_s: float = 2.0


def subscribe_down(cluster: Cluster, farm: ReceiverFarm) -> Subscription:
    """The scenario's subscription: every event of its own tenant, to ``/down``."""
    data = {
        "tenant_id": TENANT,
        "url": farm.url(0, "down"),
        "filters": ["*"],
        "name": "down-recovery",
        "notify_url": farm.url(0, "notify"),
    }
    sub = create_subscription(cluster.settings, data)
    cluster.subscriptions.append(sub)
    return sub


def failing_bound(subs: list[Subscription], generated: Callable[[str, str], int]) -> int:
    """The most failures any ``/gone`` or ``/missing`` subscription can have had so far: the
    events generated for its tenant that its filters match."""
    bound = 0
    for sub in subs:
        if urlsplit(sub.url).path.strip("/") in FAILING:
            made = sum(generated(sub.tenant_id, t) for t in EVENT_TYPES if matches(sub.filters, t))
            bound = max(bound, made)
    return bound


def arm_threshold(exhausted: int, bound: int, plan: RecoveryPlan) -> int | None:
    """The retryable count to suspend at, once ``/down`` has failed enough; else None."""
    threshold = plan.arm_factor * bound + plan.arm_margin
    return threshold if exhausted >= threshold else None


class RecoveryScenario:
    """Runs the steps of the module docstring on a thread; see `timeline` and `error`."""

    def __init__(
        self,
        cluster: Cluster,
        farm: ReceiverFarm,
        source: EventSource,
        sub: Subscription,
        may_reenable: Callable[[], bool],
        say: Callable[[str], None],
        plan: RecoveryPlan | None = None,
    ) -> None:
        self.cluster = cluster
        self.farm = farm
        self.source = source
        self.sub = sub
        self.may_reenable = may_reenable
        self.say = say
        self.plan = plan or RecoveryPlan()
        self.attempts = len(cluster.config.retry_schedule.split(",")) + 1
        self.timeline: dict[str, Any] = {}
        self.error: str | None = None
        self.reenabled = threading.Event()
        self.began = 0.0
        self._thread = threading.Thread(target=self._run, name="chaos-recovery", daemon=True)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    @property
    def wants_load(self) -> bool:
        """Publishing goes on until the re-enable (or the scenario's end)."""
        return self._thread.is_alive() and not self.reenabled.is_set()

    def start(self, began: float) -> None:
        self.began = began
        self._thread.start()

    def _mark(self, step: str, **detail: Any) -> None:
        at = round(time.monotonic() - self.began, 1)
        self.timeline[step] = {"at_s": at, **detail} if detail else at
        self.say(f"recovery: {step} at {at}s {detail or ''}".rstrip())

    def _busy(self, what: str, exc: BaseException) -> None:
        errors = self.timeline.setdefault("kafka_errors", {})
        seen = errors.setdefault(what, {"count": 0, "first": f"{type(exc).__name__}: {exc}"})
        seen["count"] += 1

    def _bound(self) -> int:
        generated = self.source.generated
        return failing_bound(self.cluster.subscriptions, lambda t, e: generated.get((t, e), 0))

    def _run(self) -> None:
        try:
            threshold = self._arm()
            self._suspend(threshold)
            self._hold()
            result = self._reenable()
            self._backfill(result)
        except Exception as exc:  # reported; the run's verdict fails on it
            self.error = f"{type(exc).__name__}: {exc}"
            self.say(f"recovery scenario failed: {self.error}")
            try:
                self._policy(NO_SUSPENSION, "policy_restored_after_error")
            except KAFKA_BUSY as again:
                self.say(f"recovery: the policy could not be put back: {again}")

    def _policy(self, updates: dict[str, str], step: str, **detail: Any) -> None:
        for attempt in range(20):
            try:
                set_policy(self.cluster.settings, updates)
                self._mark(step, **updates, **detail)
                return
            except KAFKA_BUSY as exc:
                self._busy("set_policy", exc)
                if attempt == 19:
                    raise
                time.sleep(3)

    def _arm(self) -> int:
        deadline = time.monotonic() + self.plan.suspend_timeout_s
        bound = exhausted = 0
        while time.monotonic() < deadline:
            bound = self._bound()
            exhausted = self.farm.down_exhausted(self.attempts)
            threshold = arm_threshold(exhausted, bound, self.plan)
            if threshold is not None:
                self._policy(
                    {"suspend.retryable": f"{threshold},0s"},
                    "armed",
                    failing_bound=bound,
                    down_exhausted=exhausted,
                )
                return threshold
            time.sleep(1.0)
        # What the next look at a run that did not arm needs: how far it was from the
        # threshold, and whether /down's deliveries were asked fewer times than the retry
        # policy's attempts (deferred by a breaker, say, rather than failed).
        self._mark(
            "not_armed",
            failing_bound=bound,
            down_exhausted=exhausted,
            needed=self.plan.arm_factor * bound + self.plan.arm_margin,
            attempts=self.attempts,
            down_by_requests=self.farm.down_requests_histogram(),
        )
        raise TimeoutError("/down never failed often enough to arm the threshold")

    def _status(self) -> Subscription | None:
        try:
            return load_registry(self.cluster.settings).get(self.sub.id)
        except KAFKA_BUSY as exc:  # Kafka busy with a fault: ask again
            self._busy("registry", exc)
            return None

    def _suspend(self, threshold: int) -> None:
        deadline = time.monotonic() + self.plan.suspend_timeout_s
        while time.monotonic() < deadline:
            sub = self._status()
            if sub is not None and sub.status is SubscriptionStatus.SUSPENDED:
                self._mark("suspended", status_reason=sub.status_reason)
                self._policy(NO_SUSPENSION, "policy_restored")
                return
            bound = self._bound()
            if bound + self.plan.arm_margin >= threshold:
                raise RuntimeError(
                    f"a /gone or /missing subscription may reach {threshold} ({bound} events)"
                    " before /down was suspended"
                )
            time.sleep(self.plan.poll_s)
        raise TimeoutError("the /down subscription was never suspended")

    def _hold(self) -> None:
        until = time.monotonic() + self.plan.hold_s
        while time.monotonic() < until or not self.may_reenable():
            time.sleep(1.0)

    def _reenable(self) -> ReenableResult:
        self.farm.set_down(False)
        self._mark("healed")
        deadline = time.monotonic() + self.plan.reenable_timeout_s
        problems: list[str] = []
        while True:
            try:
                result = asyncio.run(self._call_reenable())
                if result.ok:
                    self.reenabled.set()
                    probe = result.probe
                    self._mark("reenabled", job_id=result.job_id, probe_status=probe.status)
                    self.timeline["reenable_problems"] = problems
                    return result
                problems.append(f"probe failed: {result.probe.reason}")
            except (ConflictError, *KAFKA_BUSY) as exc:  # a fault, or a claim still held
                problems.append(f"{type(exc).__name__}: {exc}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"re-enable never succeeded: {problems[-3:]}")
            time.sleep(5.0)

    async def _call_reenable(self) -> ReenableResult:
        settings = self.cluster.settings
        transport = guarded_transport(settings, body_cap=settings.response_body_cap)
        try:
            source = await asyncio.to_thread(load_registry, settings)
            return await reenable(settings, self.sub.id, transport, source=source)
        finally:
            await transport.aclose()

    def _backfill(self, result: ReenableResult) -> None:
        deadline = time.monotonic() + self.plan.backfill_timeout_s
        while time.monotonic() < deadline:
            try:
                progress = backfill_progress(self.cluster.settings, self.sub.id)
            except KAFKA_BUSY as exc:
                self._busy("backfill_progress", exc)
                progress = None
            if (
                progress is not None
                and progress.get("job_id") == result.job_id
                and progress.get("state") != "running"
            ):
                self._mark("backfill_ended", **progress)
                return
            time.sleep(self.plan.poll_s)
        raise TimeoutError(f"the backfill {result.job_id} did not finish")
