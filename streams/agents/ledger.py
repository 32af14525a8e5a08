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
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

from mode import Service

from streams.adapters import codec
from streams.adapters.kafka_clients import partition_of
from streams.agents.ledger_local import LocalLedger
from streams.agents.owners import peer_view
from streams.domain import ledger_keys as k
from streams.domain.models import DeadLetter
from streams.errors import DecodeError
from streams.settings import Settings

log = logging.getLogger(__name__)

PEER_PATH: Final = "/internal/ledger"
#: How often the reader is told which partitions this worker holds.
FOLLOW_INTERVAL_S: Final = 0.5
#: Bytes of ids, URL-encoded, that one request to a peer names. Peers answer on aiohttp, which
#: refuses a request line over 8,190 bytes with 400: 200 delivery ids (44 characters each, and an
#: encoded comma) made 9.4 KB, and a backfill or DLQ replay of more than about 170 deliveries
#: whose ledger another worker held failed on it (found by the 50k cluster run). The rest of the
#: line (path, op, subscription id) fits in what is left.
IDS_PER_ASK_BYTES: Final = 6_000
_COMMA: Final = quote(",", safe="")


def id_batches(ids: list[str], budget: int = IDS_PER_ASK_BYTES) -> Iterator[list[str]]:
    """``ids`` in order, in runs whose comma-joined, URL-encoded form is at most ``budget``
    bytes (an id longer than that goes alone)."""
    batch: list[str] = []
    used = 0
    for one in ids:
        cost = len(quote(one, safe="")) + len(_COMMA)
        if batch and used + cost > budget:
            yield batch
            batch, used = [], 0
        batch.append(one)
        used += cost
    if batch:
        yield batch


class LedgerState(LocalLedger):
    """The ledger state, dead letters and health records, read from any worker."""

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
        for ids in id_batches(delivery_ids):
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
            elif next(id_batches(ids), []) == ids:  # they fit in one request
                params = {"op": "health", "ids": ",".join(ids)}
                calls.append(self.owners.ask(owner, PEER_PATH, params))
            else:  # too long for a URL: the owner answers every subscription it holds
                params = {"op": "health", "partitions": ",".join(map(str, parts))}
                calls.append(self.owners.ask(owner, PEER_PATH, params))
        wanted = set(subscription_ids)
        for answer in await asyncio.gather(*calls):
            found.update({k: v for k, v in answer["records"].items() if k in wanted})
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
            if settings.ledger_reader:
                state.reader.start()
            else:
                log.warning("ledger_reader is off: ledger and dead-letter reads answer 503")

        async def on_stop(self) -> None:
            await asyncio.to_thread(state.reader.stop)
            state.store.close()

    app.service(LedgerReaderService)

    @app.timer(FOLLOW_INTERVAL_S)  # type: ignore[untyped-decorator]
    async def follow_assignment() -> None:
        state.follow()
