"""The ledger, dead letters and health records, read from any worker (S6).

The worker that holds a subscription's partition (`streams.agents.owners`, the one mechanism the
analytics reads use too) answers from its state: the ledger and dead letters its reader
materialised (`streams.lanes.ledger`) and the health agent's own table, the very record that
drives suspension (H1). Any other worker forwards to it (``GET /internal/ledger``). A partition
whose ledger is still being restored counts as not held: 503 with ``Retry-After``.

- A delivery by id: its partition is not known from the id (a hash), so every owner looks in
  the partitions it holds (one point read each) and the one that has it answers.
- A subscription's deliveries: one owner, one range scan of the subscription's index.
- Dead letters of a subscription: one owner. Of a tenant or of everybody: every owner returns
  its first page after the cursor in the one global order (newest first, then partition, then
  offset), and the pages are merged: the cursor is a position in that order, so it stays valid
  whatever moves between pages.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, Final

from mode import Service

from streams.adapters import codec
from streams.adapters.kafka_admin import load_topology
from streams.adapters.kafka_clients import partition_of
from streams.adapters.ledger_store import LedgerStore, latest_attempt, open_store
from streams.agents.owners import Owners, moving, peer_view
from streams.domain import ledger_keys as k
from streams.domain.ledger_keys import LetterPosition
from streams.domain.models import DeadLetter
from streams.errors import DecodeError
from streams.lanes.ledger import Materialiser
from streams.services import ledger as views
from streams.settings import Settings

log = logging.getLogger(__name__)

PEER_PATH: Final = "/internal/ledger"
#: How often the reader is told which partitions this worker holds.
FOLLOW_INTERVAL_S: Final = 0.5
_DAY_MS: Final = 86_400_000
#: Deliveries whose attempt counts one request asks a peer for.
COUNTS_PER_ASK: Final = 200


def _int(query: dict[str, str], name: str) -> int | None:
    text = query.get(name)
    if text is None or text == "":
        return None
    if not text.isdigit():
        raise ValueError(f"bad {name}")
    return int(text)


class AllLocal:
    """The owners of a standalone ledger: this process, for every partition."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions

    def held(self) -> set[int]:
        return set(range(self.partitions))

    def by_owner(
        self, partitions: Iterable[int], held: set[int] | None = None
    ) -> dict[str | None, list[int]]:
        wanted = sorted(partitions)
        if held is not None and not set(wanted) <= held:
            raise moving("the ledger is still being read")
        return {None: wanted}

    async def ask(self, owner: str, path: str, params: dict[str, str]) -> Any:
        raise AssertionError("a standalone ledger has no peers")


class LedgerState:
    """This worker's ledger state and health table, and reads of them from any worker."""

    def __init__(
        self, app: Any, settings: Settings, health_table: Any, path: Path | None = None
    ) -> None:
        """``app`` None: a standalone ledger of every partition, in one process with no peers
        (tests, benchmarks); ``health`` then answers nothing."""
        topology = load_topology(settings)
        self.app = app
        self.settings = settings
        self.partitions = topology.lane_partitions
        self.health_table = health_table
        self.owners: Owners | AllLocal = (
            AllLocal(self.partitions) if app is None else Owners(app, settings, health_table)
        )
        path = path or settings.tables_dir / "ledger"
        self.store = LedgerStore(
            open_store(path, settings.rocksdb_block_cache_mb, settings.rocksdb_write_buffer_mb),
            path,
        )
        retention = tuple(
            int(topology.get(name).config.get("retention.ms", str(7 * _DAY_MS)))
            for name in ("attempts", "dlq")
        )
        self.reader = Materialiser(
            settings, self.store, self.partitions, (retention[0], retention[1]), self._deleted
        )

    def close(self) -> None:
        self.reader.stop()
        self.store.close()

    async def wait_ready(self, timeout_s: float) -> None:
        """Wait until every partition this worker holds is restored (a standalone ledger)."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while self.reader.ready() != set(range(self.partitions)):
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError("the ledger was not restored in time")
            await asyncio.sleep(0.1)

    def _deleted(self, sub_id: str) -> bool:
        pipeline = getattr(self.app, "hookstream_pipeline", None) if self.app else None
        if pipeline is None or not pipeline.registry.ready.is_set():
            return False
        return pipeline.registry.get(sub_id) is None

    def follow(self) -> None:
        """Tell the reader which partitions this worker holds now (a rebalance keeps them)."""
        if self.app is None:
            self.reader.want(set(range(self.partitions)))
            return
        topic = self.health_table.changelog_topic.get_topic_name()
        assigned = {
            tp.partition for tp in self.app.assignor.assigned_actives() if tp.topic == topic
        }
        self.reader.want(assigned)

    def restored(self) -> bool:
        """Every partition this worker holds has its ledger read up (``/readyz``)."""
        return self.owners.held() <= self.reader.ready()

    def held(self) -> set[int]:
        """Partitions this worker answers for: held, and their ledger restored."""
        return self.owners.held() & self.reader.ready()

    # --- local reads (this worker holds the partitions) ------------------------------------------

    def _mine(self, partitions: set[int]) -> None:
        if not partitions <= self.held():
            raise moving("this worker does not hold these subscriptions now")

    def local_delivery(self, delivery_id: str) -> dict[str, Any] | None:
        found = self.store.delivery(self.held(), delivery_id)
        return None if found is None else views.delivery_view(found.attempts)

    def local_deliveries(
        self, sub_id: str, state: str | None, cursor: str | None, limit: int
    ) -> dict[str, Any]:
        partition = partition_of(sub_id, self.partitions)
        self._mine({partition})
        after = None
        if cursor:
            first_at, delivery_id = k.decode_cursor(cursor, (int, str))
            after = (int(first_at), str(delivery_id))
        found, last = self.store.deliveries(partition, sub_id, state, after, limit)
        items = [view["summary"] for d in found if (view := views.delivery_view(d.attempts))]
        next_cursor = None if last is None else k.encode_cursor([last[0], last[1]])
        return {"items": items, "next_cursor": next_cursor}

    def local_letters(self, query: dict[str, str], partitions: set[int]) -> dict[str, Any]:
        self._mine(partitions)
        cursor = query.get("cursor")
        after = None
        if cursor:
            values = k.decode_cursor(cursor, (int, int, int))
            after = LetterPosition(*(int(v) for v in values))
        found = self.store.letters(
            partitions,
            subscription_id=query.get("subscription_id"),
            tenant_id=query.get("tenant_id"),
            reason=query.get("reason"),
            since_ms=_int(query, "since"),
            until_ms=_int(query, "until"),
            after=after,
            limit=_int(query, "limit") or 100,
        )
        raw = query.get("raw") == "1"
        items = []
        for letter in found:
            pos = [letter.position.newest, letter.position.partition, letter.position.offset]
            if raw:
                items.append({"position": pos, "record": base64.b64encode(letter.record).decode()})
            elif (view := views.letter_view(letter.record)) is not None:
                items.append({"position": pos, **view})
        return {"items": items}

    def local_health(self, sub_ids: list[str]) -> dict[str, Any]:
        """The health agent's records (H1) of subscriptions whose partitions this worker holds
        (the table needs no ledger restore: Faust recovers it before the worker serves)."""
        if not {partition_of(s, self.partitions) for s in sub_ids} <= self.owners.held():
            raise moving("this worker does not hold these subscriptions now")
        if self.health_table is None:
            return {}
        return {s: stored for s in sub_ids if (stored := self.health_table.get(s)) is not None}

    def answer_peer(self, query: dict[str, str]) -> dict[str, Any]:
        op = query.get("op")
        if op == "delivery":
            return {"delivery": self.local_delivery(query.get("id", ""))}
        if op == "deliveries":
            limit = _int(query, "limit") or 100
            state = query.get("state") or None
            return self.local_deliveries(query.get("id", ""), state, query.get("cursor"), limit)
        if op == "letters":
            wanted = {int(p) for p in query.get("partitions", "").split(",") if p.isdigit()}
            return self.local_letters(query, wanted)
        if op == "letters_of":
            return {
                "items": self._letters_of(query.get("id", ""), query.get("subscription_id", ""))
            }
        if op == "counts":
            ids = [i for i in query.get("ids", "").split(",") if i]
            return {"counts": self._counts(query.get("subscription_id", ""), ids)}
        if op == "health":
            return {"records": self.local_health([s for s in query.get("ids", "").split(",") if s])}
        raise ValueError("unknown op")

    def _letters_of(self, delivery_id: str, sub_id: str) -> list[str]:
        partition = partition_of(sub_id, self.partitions)
        self._mine({partition})
        rows = self.store.letters_of_delivery(partition, delivery_id)
        return [base64.b64encode(raw).decode() for raw in rows]

    def _counted(self, sub_id: str, delivery_ids: list[str], _parts: set[int]) -> dict[str, Any]:
        return {"counts": self._counts(sub_id, delivery_ids)}

    def _counts(self, sub_id: str, delivery_ids: list[str]) -> dict[str, int]:
        partition = partition_of(sub_id, self.partitions)
        self._mine({partition})
        counts = {}
        for delivery_id in delivery_ids:
            found = self.store.delivery({partition}, delivery_id)
            if found is not None:
                counts[delivery_id] = latest_attempt(found.attempts)
        return counts

    # --- reads from any worker ------------------------------------------------------------------

    async def _route(
        self,
        partitions: set[int],
        local: Callable[[set[int]], Any],
        params: Callable[[list[int]], dict[str, str]],
    ) -> list[Any]:
        """``local`` here for the partitions this worker holds, and the owners' answers to
        ``params`` for the others."""
        grouped = self.owners.by_owner(sorted(partitions), self.held())
        calls: list[Awaitable[Any]] = [
            self.owners.ask(owner, PEER_PATH, params(parts))
            for owner, parts in grouped.items()
            if owner is not None
        ]
        answers = list(await asyncio.gather(*calls))
        if None in grouped:
            answers.append(local(set(grouped[None])))
        return answers

    async def delivery(self, delivery_id: str) -> dict[str, Any] | None:
        answers = await self._route(
            set(range(self.partitions)),
            lambda _parts: {"delivery": self.local_delivery(delivery_id)},
            lambda _parts: {"op": "delivery", "id": delivery_id},
        )
        for answer in answers:
            if answer.get("delivery") is not None:
                found: dict[str, Any] = answer["delivery"]
                return found
        return None

    async def deliveries(
        self, subscription_id: str, state: str | None, cursor: str | None, limit: int
    ) -> dict[str, Any]:
        partition = partition_of(subscription_id, self.partitions)
        params = {"op": "deliveries", "id": subscription_id, "limit": str(limit)}
        params.update({"state": state or "", "cursor": cursor or ""})
        (answer,) = await self._route(
            {partition},
            lambda _parts: self.local_deliveries(subscription_id, state, cursor, limit),
            lambda _parts: params,
        )
        return dict(answer)

    async def dead_letters(
        self,
        *,
        subscription_id: str | None,
        tenant_id: str | None,
        reason: str | None,
        since_ms: int | None,
        until_ms: int | None,
        cursor: str | None,
        limit: int,
        raw: bool = False,
    ) -> dict[str, Any]:
        if cursor:
            k.decode_cursor(cursor, (int, int, int))  # a bad cursor is a 422 here, not a peer's
        asked: dict[str, str | None] = {
            "op": "letters",
            "subscription_id": subscription_id,
            "tenant_id": tenant_id,
            "reason": reason,
            "since": None if since_ms is None else str(since_ms),
            "until": None if until_ms is None else str(until_ms),
            "cursor": cursor,
            "limit": str(limit + 1),  # one more than the page: whether there are more
            "raw": "1" if raw else None,
        }
        query = {name: value for name, value in asked.items() if value is not None}
        if subscription_id is not None:
            partitions = {partition_of(subscription_id, self.partitions)}
        else:
            partitions = set(range(self.partitions))
        answers = await self._route(
            partitions,
            lambda parts: self.local_letters(query, parts),
            lambda parts: {**query, "partitions": ",".join(map(str, parts))},
        )
        items = sorted((i for a in answers for i in a["items"]), key=lambda i: i["position"])
        page = items[:limit]
        more = len(items) > limit
        next_cursor = k.encode_cursor(page[-1]["position"]) if more and page else None
        for item in page:
            item.pop("position")
        return {"items": page, "next_cursor": next_cursor}

    async def letters_of(self, delivery_id: str, subscription_id: str) -> list[DeadLetter]:
        """Every dead letter of one delivery, oldest first."""
        sub_id = subscription_id
        (answer,) = await self._route(
            {partition_of(sub_id, self.partitions)},
            lambda _parts: {"items": self._letters_of(delivery_id, sub_id)},
            lambda _parts: {
                "op": "letters_of",
                "id": delivery_id,
                "subscription_id": subscription_id,
            },
        )
        return _letters(answer["items"])

    async def attempt_counts(self, subscription_id: str, delivery_ids: list[str]) -> dict[str, int]:
        """The lifetime attempt count (the highest attempt number) of each known delivery."""
        counts: dict[str, int] = {}
        partition = {partition_of(subscription_id, self.partitions)}
        for start in range(0, len(delivery_ids), COUNTS_PER_ASK):
            ids = delivery_ids[start : start + COUNTS_PER_ASK]
            params = {"op": "counts", "subscription_id": subscription_id, "ids": ",".join(ids)}
            (answer,) = await self._route(
                partition,
                functools.partial(self._counted, subscription_id, ids),
                lambda _parts, params=params: params,  # type: ignore[misc]
            )
            counts.update({key: int(value) for key, value in answer["counts"].items()})
        return counts

    async def health(self, subscription_ids: list[str]) -> dict[str, dict[str, Any]]:
        by_partition: dict[int, list[str]] = {}
        for sub_id in subscription_ids:
            by_partition.setdefault(partition_of(sub_id, self.partitions), []).append(sub_id)
        grouped = self.owners.by_owner(sorted(by_partition), self.owners.held())
        found: dict[str, dict[str, Any]] = {}
        calls = []
        for owner, parts in grouped.items():
            ids = [s for p in parts for s in by_partition[p]]
            if owner is None:
                found.update(self.local_health(ids))
            else:
                calls.append(
                    self.owners.ask(owner, PEER_PATH, {"op": "health", "ids": ",".join(ids)})
                )
        for answer in await asyncio.gather(*calls):
            found.update(answer["records"])
        return found


def _letters(encoded: list[str]) -> list[DeadLetter]:
    out = []
    for text in encoded:
        try:
            out.append(codec.decode(DeadLetter, base64.b64decode(text)))
        except (DecodeError, ValueError):
            log.error("unreadable dead letter in a peer's answer")
    return out


def standalone(settings: Settings, path: Path) -> LedgerState:
    """A started ledger of every partition in this process, with no peers and no health table:
    for tools and tests that run lanes without a worker's app. `close` it."""
    state = LedgerState(None, settings, None, path)
    state.follow()
    state.reader.start()
    return state


def ledger_component(app: Any, settings: Settings) -> None:
    """Register the ledger state, its reader and the peer view (after the health component,
    whose table anchors the ledger's partitions)."""
    health = getattr(app, "hookstream_health", None)
    if health is None:
        raise RuntimeError("the ledger component needs the health component registered first")
    state = LedgerState(app, settings, health.health)
    app.hookstream_ledger = state
    app.page(PEER_PATH, name="hookstream-ledger-peer")(peer_view(settings, state.answer_peer))

    class LedgerReaderService(Service):
        async def on_start(self) -> None:
            state.reader.start()

        async def on_stop(self) -> None:
            await asyncio.to_thread(state.reader.stop)
            state.store.close()

    app.service(LedgerReaderService)

    @app.timer(FOLLOW_INTERVAL_S)  # type: ignore[untyped-decorator]
    async def follow_assignment() -> None:
        state.follow()
