"""Delivery analytics: the analytics agent, its tables, and reading them from any worker (O2).

The agent reads `attempt-digests` in batches (`BATCH_MAX` records or `BATCH_WITHIN_S`, whichever
comes first). A digest holds what one dispatcher settled in one partition between two of its
commits, folded ahead per subscription into a `Tally` (`streams.lanes.outbox`): one Faust record
per partition and commit instead of one per attempt, and a few aggregates to merge instead of
every attempt to decode and fold on the event loop the deliveries share (docs/benchmarks.md,
"Attempt digests", "Tallies in digests"). Each subscription's tallies are folded with the pure
``streams.domain.analytics.fold``: a batch costs one read and one write per subscription and
window it touches. Digests an older worker left on the topic (the attempts themselves) are still
read, and folded into tallies here.

Two plain changelog tables, co-partitioned with `attempt-digests` and `attempts`
(``lane_partitions`` partitions):

- ``analytics-windows``: key ``<subscription id>|<window start ms>``, value one hourly
  `WindowAggregate`. One small value per window, so a write serialises one hour's sketches,
  never a week's.
- ``analytics-index``: key the subscription id, value the window starts it holds and its retry
  backlog. It drives expiry: when a subscription's newest window moves past the retention, the
  expired windows are deleted (tombstones on the changelog) in the same batch.

Every value remembers the last digest folded into it, so a digest read again after a restart
or a rebalance is never counted twice (see ``streams.domain.analytics``).

Faust writes a table value to the changelog partition of the *current event*. A batch mixes
partitions, so each partition's records are folded with the current event set to one of that
partition's events (`_fold_partition`): a subscription's values always live in its own partition,
the one its attempts and its owner's assignment are in.

Faust's windowed tables were not used: their keys are JSON-serialised ``(key, window)`` pairs,
which hash to other partitions than the raw subscription id the lanes use, and they expire only
the windows written since the process started (not those recovered from the changelog).

**Reading from any worker** (the equivalent of Faust's ``table_route``, for many keys at once).
A worker answers for a subscription only while it holds that subscription's partition as an
active assignment and no rebalance or table recovery is under way; otherwise it asks the owner
the Faust assignor names (``GET /internal/analytics`` with the operator key), and that owner
checks the same before it answers. A partition that is moving answers 503 (try again) on both
sides, so an old owner's stale copy is never served and no subscription is counted by two
workers. A subscription's partition is the Kafka default partitioner's murmur2 of its raw id,
as every hookstream producer uses. Peers are reached at the URL each worker announces to the
assignor (`advertise`).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

import orjson

from streams.adapters import codec
from streams.adapters.kafka_admin import load_topology
from streams.adapters.kafka_clients import partition_of
from streams.agents.owners import Owners, moving, peer_view
from streams.domain.analytics import SubscriptionData, Tally
from streams.domain.analytics_store import fold_into, read_stored
from streams.domain.analytics_window import Position, counts_as_delivery
from streams.domain.models import AnalyticsDigest, Attempt, AttemptDigest
from streams.errors import DecodeError, UnavailableError
from streams.settings import Settings

log = logging.getLogger(__name__)

WINDOWS_TABLE: Final = "analytics-windows"
INDEX_TABLE: Final = "analytics-index"
PEER_PATH: Final = "/internal/analytics"
#: A batch: this many digests, or what arrived within this many seconds. A batch is folded in
#: one go on the event loop the deliveries share, and a digest holds up to 200 ms of one
#: partition's attempts: an agent that is far behind (a rewind, a long outage) folds up to this
#: many at a time, so this bounds the pauses it causes then, and its memory.
BATCH_MAX: Final = 20
BATCH_WITHIN_S: Final = 1.0
RAW = {"key_type": bytes, "value_type": bytes, "key_serializer": "raw", "value_serializer": "raw"}
#: Bind addresses that are no address to reach a worker at.
_ANY_HOST: Final = frozenset({"", "0.0.0.0", "::"})  # noqa: S104  # compared with, never bound
#: Tables of bytes keys and values (faust then stores them as they are).
RAW_TABLE = {"key_type": bytes, "value_type": bytes}


class AnalyticsStore:
    """The analytics agent's tables, and reads of them from any worker."""

    def __init__(self, app: Any, settings: Settings) -> None:
        self.app = app
        self.settings = settings
        self.partitions = load_topology(settings).lane_partitions
        self.topic = app.topic(settings.topic("attempt-digests"), **RAW)
        self.windows = app.Table(
            WINDOWS_TABLE,
            default=None,
            partitions=self.partitions,
            help="hourly aggregates",
            **RAW_TABLE,
        )
        self.index = app.Table(
            INDEX_TABLE,
            default=None,
            partitions=self.partitions,
            help="windows, backlog",
            **RAW_TABLE,
        )
        self.owner_map = Owners(app, settings, self.index)

    # --- writing (inside the agent) -------------------------------------------------------------

    def apply_batch(self, events: Sequence[Any], focus: Callable[[Any], None]) -> None:
        """Fold a batch of `attempt-digests` events; ``focus(event)`` makes ``event`` the current
        one, so that table writes go to its partition."""
        by_partition: dict[int, list[Any]] = {}
        for event in events:
            by_partition.setdefault(event.message.partition, []).append(event)
        for partition, group in by_partition.items():
            focus(group[-1])
            self._fold_partition(partition, group)

    def _fold_partition(self, partition: int, events: list[Any]) -> None:
        records: dict[str, list[tuple[Position, Tally]]] = {}
        for event in events:
            at = (partition, event.message.offset)
            try:
                tallies = _tallies(event.value)
            except DecodeError as exc:  # never crash-loop on one record (Q2)
                log.error("attempt digest skipped by analytics: %s", exc, extra={"at": at})
                continue
            for sub_id, tally in tallies:
                records.setdefault(sub_id, []).append((at, tally))
        for sub_id, mine in records.items():
            if partition_of(sub_id, self.partitions) != partition:
                log.error(
                    "attempts of a subscription found outside its partition are not counted",
                    extra={"subscription_id": sub_id, "partition": partition},
                )
                continue
            try:
                self._fold_subscription(sub_id, mine)
            except Exception:  # one subscription's bad state must not stop the others
                log.exception("attempts not counted", extra={"subscription_id": sub_id})

    def _fold_subscription(self, sub_id: str, records: list[tuple[Position, Tally]]) -> None:
        for key in fold_into(self.index, self.windows, sub_id, records):
            log.error(
                "unreadable analytics record started afresh",
                extra={"subscription_id": sub_id, "key": key.decode(errors="replace")},
            )

    # --- reading --------------------------------------------------------------------------------

    def held(self) -> set[int]:
        """The partitions whose analytics this worker holds and may answer for, now."""
        return self.owner_map.held()

    def read_local(
        self, subscription_ids: Iterable[str], since: int
    ) -> dict[str, SubscriptionData]:
        """The windows starting at or after ``since`` of subscriptions this worker holds;
        `UnavailableError` if it does not hold one of them."""
        ids = list(subscription_ids)
        held = self.held()
        if any(partition_of(sub_id, self.partitions) not in held for sub_id in ids):
            raise moving("this worker does not hold these subscriptions now")
        found: dict[str, SubscriptionData] = {}
        for sub_id in ids:
            data = read_stored(self.index, self.windows, sub_id, since)
            if data is not None:
                found[sub_id] = data
        return found

    def owners(self, subscription_ids: Iterable[str]) -> dict[str | None, list[str]]:
        """Subscription ids by the web address of their owner; None is this worker."""
        ids = list(subscription_ids)
        partition = {sub_id: partition_of(sub_id, self.partitions) for sub_id in ids}
        owner_of: dict[int, str | None] = {}
        for owner, parts in self.owner_map.by_owner(set(partition.values())).items():
            owner_of.update(dict.fromkeys(parts, owner))
        grouped: dict[str | None, list[str]] = {}
        for sub_id in ids:
            grouped.setdefault(owner_of[partition[sub_id]], []).append(sub_id)
        return grouped

    async def fetch(self, subscription_ids: list[str], since: int) -> dict[str, SubscriptionData]:
        """Every asked subscription's data, from whichever worker owns it."""
        grouped = self.owners(subscription_ids)
        remote = [(owner, ids) for owner, ids in grouped.items() if owner is not None]
        answers = await asyncio.gather(*(self._ask_peer(o, ids, since) for o, ids in remote))
        found = self.read_local(grouped.get(None, []), since)
        for answer in answers:
            found.update(answer)
        return found

    async def _ask_peer(
        self, owner: str, ids: list[str], since: int
    ) -> dict[str, SubscriptionData]:
        params = {"ids": ",".join(ids), "since": str(since)}
        body = await self.owner_map.ask(owner, PEER_PATH, params)
        try:
            return {k: SubscriptionData.from_dict(v) for k, v in body["subscriptions"].items()}
        except (ValueError, KeyError, TypeError, AttributeError, DecodeError) as exc:
            raise UnavailableError(f"the worker at {owner} sent an unreadable answer") from exc

    def answer_peer(self, query: dict[str, str]) -> dict[str, Any]:
        """What this worker answers another one asking for its analytics."""
        ids = [i for i in query.get("ids", "").split(",") if i]
        try:
            since = int(query.get("since", "0"))
        except ValueError as exc:
            raise ValueError("bad since") from exc
        found = self.read_local(ids, since)
        return {"subscriptions": {k: v.to_dict() for k, v in found.items()}}


def _tallies(value: bytes) -> list[tuple[str, Tally]]:
    """A digest's tallies, by subscription. A digest an older worker wrote (`AttemptDigest`,
    the attempts as the ledger holds them) is folded into tallies here, so that it counts once
    at its own position like any other."""
    try:
        digest = codec.decode(AnalyticsDigest, value)
    except DecodeError as exc:
        if exc.reason != "unknown_schema":
            raise
        legacy = codec.decode(AttemptDigest, value)
        built: dict[str, Tally] = {}
        for ledger in legacy.attempts:
            try:
                att = codec.decode(Attempt, ledger)
            except DecodeError as bad:
                log.error("attempt in a digest skipped by analytics: %s", bad)
                continue
            if counts_as_delivery(att):
                built.setdefault(att.subscription_id, Tally()).add(att)
        return list(built.items())
    return [
        (sub_id, Tally.from_dict(_json(raw)))
        for sub_id, raw in zip(digest.subscription_ids, digest.tallies, strict=True)
    ]


def _json(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise DecodeError("invalid_tally", f"a tally is not JSON: {exc}") from exc


def advertise(app: Any, settings: Settings) -> None:
    """Make the worker's canonical URL, which the Faust assignor hands to its peers as the way
    to reach it, an address they can reach: a worker bound to every interface (``0.0.0.0``,
    as in the Helm chart and docker compose) advertises the address its host name resolves to
    (the pod's or container's own)."""
    if settings.web_host in _ANY_HOST:
        host = socket.gethostbyname(socket.gethostname())
        app.conf.canonical_url = f"http://{host}:{settings.web_port}"


def analytics_component(app: Any, settings: Settings) -> None:
    """Register the analytics agent, its tables and the peer view on the worker's app."""
    advertise(app, settings)
    store = AnalyticsStore(app, settings)
    app.hookstream_analytics = store
    app.page(PEER_PATH, name="hookstream-analytics-peer")(peer_view(settings, store.answer_peer))

    @app.agent(store.topic, name="hookstream-analytics", concurrency=1)  # type: ignore[untyped-decorator]
    async def analytics_agent(stream: Any) -> None:
        # Faust acknowledges a batch after the body, whatever happens inside it (Q2): failures
        # are handled per record and per subscription in `apply_batch`.
        async for events in stream.take_events(BATCH_MAX, BATCH_WITHIN_S):
            # faust has no public way to pick the partition of a table write in a batch
            store.apply_batch(events, stream._set_current_event)
