"""The ledger state this worker holds, and the answers it gives for it (S6).

`LocalLedger` owns the RocksDB store and its reader (`streams.lanes.ledger`), knows which
partitions this worker answers for (held by the Faust assignor, and restored), and reads them:
the answers this worker serves to itself and to the peers that forward to it
(``GET /internal/ledger``). `streams.agents.ledger` routes each read to the worker that holds it.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

from streams.adapters.kafka_admin import load_topology
from streams.adapters.kafka_clients import partition_of
from streams.adapters.ledger_store import LedgerStore, latest_attempt, open_store
from streams.agents.owners import Owners, moving
from streams.domain import ledger_keys as k
from streams.domain.ledger_keys import LetterPosition
from streams.lanes.ledger import Materialiser
from streams.services import ledger as views
from streams.settings import Settings

log = logging.getLogger(__name__)

_DAY_MS: Final = 86_400_000


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


class LocalLedger:
    """This worker's ledger state and health table, and its answers for the partitions it holds."""

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
        """Every partition this worker holds has its ledger read up (``/readyz``); always, with
        no reader (``ledger_reader`` off: its reads answer 503)."""
        return not self.settings.ledger_reader or self.owners.held() <= self.reader.ready()

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
            ids = [s for s in query.get("ids", "").split(",") if s]
            if "partitions" in query:
                parts = {int(p) for p in query["partitions"].split(",") if p.isdigit()}
                ids = self._held_subscriptions(parts)
            return {"records": self.local_health(ids)}
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

    def _held_subscriptions(self, partitions: set[int]) -> list[str]:
        """The registry's subscriptions whose partitions are among ``partitions``."""
        pipeline = getattr(self.app, "hookstream_pipeline", None) if self.app else None
        if pipeline is None:
            return []
        return [
            sub.id
            for sub in pipeline.registry.all()
            if partition_of(sub.id, self.partitions) in partitions
        ]
