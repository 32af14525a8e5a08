"""The ledger and dead-letter state of one worker, in RocksDB through rocksdict (S6, D7, D8).

One database per worker holds the partitions it materialises; every key starts with its
partition (`streams.domain.ledger_keys`), so a read never leaves one partition's key range and a
partition's state is restored, swept or dropped on its own. `apply` writes one batch of
`attempts` and `dlq` records of one partition and the partition's next offsets in one atomic
`WriteBatch`: the state and the position it reflects never disagree, after a crash too.

Only the materialiser thread writes; readers (the admin API, on any thread) read point keys and
short ranges. RocksDB serves both at once.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final, cast

import rocksdict
from rocksdict import Rdict, WriteBatch

from streams.adapters import codec
from streams.adapters.ledger_codec import IndexFields, attempt_fields, index_fields
from streams.adapters.ledger_sweep import Sweeps
from streams.domain import ledger_keys as k
from streams.domain.ledger_keys import DeliveryMeta, LetterPosition
from streams.domain.models import DeadLetter
from streams.errors import DecodeError

log = logging.getLogger(__name__)

MIB: Final = 1024 * 1024
#: A page of dead letters filtered by reason examines at most this many entries per partition;
#: the page may then be short, and its cursor goes on from there.
SCAN_BUDGET: Final = 5_000


@dataclass(frozen=True, slots=True)
class StoredDelivery:
    partition: int
    meta: DeliveryMeta
    attempts: list[bytes]  # `Attempt` records as the topic holds them, in arrival order


@dataclass(frozen=True, slots=True)
class StoredLetter:
    position: LetterPosition
    subscription_id: str
    tenant_id: str
    reason: str
    record: bytes  # the `DeadLetter` as the topic holds it


def open_store(path: Path, block_cache_mb: int, write_buffer_mb: int) -> Rdict:
    """The store at ``path``; a store written in another format (`k.FORMAT`) is emptied first,
    so that the reader rebuilds it from the topics like a new worker's."""
    path.mkdir(parents=True, exist_ok=True)
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    options.set_max_open_files(64)
    options.set_write_buffer_size(write_buffer_mb * MIB)
    options.set_max_write_buffer_number(2)
    table = rocksdict.BlockBasedOptions()
    table.set_bloom_filter(10, False)
    table.set_block_cache(rocksdict.Cache(block_cache_mb * MIB))
    options.set_block_based_table_factory(table)
    db = Rdict(str(path), options)
    found = db.get(k.FORMAT_KEY)
    if found != k.FORMAT:
        it = db.iter()
        it.seek_to_first()
        if it.valid():
            log.warning(
                "ledger state at %s has format %r, not %r: rebuilding it from the topics",
                path,
                found,
                k.FORMAT,
            )
            del it
            db.close()
            Rdict.destroy(str(path), options)
            db = Rdict(str(path), options)
        db.put(k.FORMAT_KEY, k.FORMAT)
    return db


class LedgerStore(Sweeps):
    def __init__(self, db: Rdict, path: Path) -> None:
        self.db = db
        self.path = path

    def close(self) -> None:
        self.db.close()

    def disk_bytes(self) -> int:
        return sum(f.stat().st_size for f in self.path.rglob("*") if f.is_file())

    def compaction(self) -> tuple[int, int]:
        """RocksDB's estimate of the bytes still to compact, and the compactions running."""
        pending = self.db.property_int_value("rocksdb.estimate-pending-compaction-bytes")
        running = self.db.property_int_value("rocksdb.num-running-compactions")
        return pending or 0, running or 0

    # --- positions ----------------------------------------------------------------------------

    def next_offset(self, partition: int, topic: bytes) -> int | None:
        value = self.db.get(k.offset_key(partition, topic))
        return None if value is None else k.read_be8(value, 0)

    # --- writing (the materialiser thread only) -----------------------------------------------

    def apply(
        self,
        partition: int,
        attempts: list[tuple[int, bytes]],
        letters: list[tuple[int, bytes]],
        expired_before: tuple[int, int] = (0, 0),
    ) -> int:
        """Index one partition's records (offset, value) of `attempts` and `dlq`, and move its
        next offsets past them, in one write. Records older than ``expired_before`` (attempts,
        dead letters: their topic's retention) are passed over, as a sweep would delete them.
        Returns how many records were skipped as unreadable (each is logged: one bad record
        never stops the others, Q2)."""
        batch = WriteBatch(raw_mode=True)
        skipped = self._add_attempts(batch, partition, attempts, expired_before[0])
        skipped += self._add_letters(batch, partition, letters, expired_before[1])
        if attempts:
            batch.put(k.offset_key(partition, k.ATTEMPTS_TOPIC), k.be8(attempts[-1][0] + 1))
        if letters:
            batch.put(k.offset_key(partition, k.DLQ_TOPIC), k.be8(letters[-1][0] + 1))
        self.db.write(batch)
        return skipped

    def _add_attempts(
        self, batch: WriteBatch, partition: int, records: list[tuple[int, bytes]], before: int
    ) -> int:
        """A new delivery costs its share of one multi-get and two puts: its record and its
        place in its subscription's list of its state. The list of every state is the merge of
        the by-state lists (`deliveries`), and expiry walks them from their oldest end
        (`Sweeps.expire`): neither has an index of its own."""
        parsed, skipped = _parse(k.prefix(partition, k.META), records, before)
        list_prefix = k.prefix(partition, k.BY_STATE)
        codes = k.STATE_CODES
        if not parsed:
            return skipped
        keys: list[str | int | float | bytes | bool] = list(dict.fromkeys(k for k, _, _ in parsed))
        values = cast(list[bytes | None], self.db.get(keys))  # one multi-get per batch
        stored = dict(zip(keys, values, strict=True))
        changed: dict[bytes, tuple[DeliveryMeta, list[bytes], int]] = {}
        for key, f, raw in parsed:
            known = changed.get(key)
            if known is None and (value := stored[key]) is not None:
                meta, atts = k.decode_meta(value)
                known = (meta, atts, latest_attempt(atts))
            if known is None:  # a new delivery
                at = f.started_at
                meta = DeliveryMeta(f.subscription_id, f.tenant_id, f.state, at, at)
                changed[key] = (meta, [raw], f.attempt)
                where = f.subscription_key + codes[f.state] + k.newest(at) + f.delivery_key
                batch.put(list_prefix + where, b"")
                continue
            meta, atts, latest = known
            atts.append(raw)
            meta.last_at = max(meta.last_at, f.started_at)
            if f.attempt >= latest and f.state != meta.state:
                head = list_prefix + k.text(meta.subscription_id)
                place = k.newest(meta.first_at) + f.delivery_key
                batch.delete(head + codes[meta.state] + place)
                batch.put(head + codes[f.state] + place, b"")
                meta.state = f.state
            changed[key] = (meta, atts, max(latest, f.attempt))
        for key, (meta, atts, _) in changed.items():
            batch.put(key, k.encode_meta(meta, atts))
        return skipped

    def _add_letters(
        self, batch: WriteBatch, partition: int, records: list[tuple[int, bytes]], before: int
    ) -> int:
        skipped = 0
        for offset, raw in records:
            try:
                letter = codec.decode(DeadLetter, raw)
            except DecodeError as exc:
                log.error("dead letter skipped by the ledger: %s", exc, extra={"offset": offset})
                skipped += 1
                continue
            if letter.dead_at < before:
                continue
            sub = letter.subscription_id or ""
            tenant = letter.tenant_id or ""
            at = letter.dead_at
            value = k.text(tenant) + k.text(letter.reason) + raw
            batch.put(k.letter_key(partition, sub, at, offset), value)
            batch.put(k.tenant_letter_key(partition, tenant, at, offset), k.text(sub))
            batch.put(k.any_letter_key(partition, at, offset), k.text(sub))
            batch.put(k.letter_expiry_key(partition, at, offset), k.text(sub) + k.text(tenant))
            if letter.delivery is not None:
                where = k.delivery_letter_key(partition, letter.delivery.delivery_id, offset)
                batch.put(where, k.text(sub) + k.be8(at))
        return skipped

    # --- deliveries ---------------------------------------------------------------------------

    def delivery(self, partitions: set[int], delivery_id: str) -> StoredDelivery | None:
        for partition in sorted(partitions):
            value = self.db.get(k.meta_key(partition, delivery_id))
            if value is not None:
                meta, attempts = k.decode_meta(value)
                return StoredDelivery(partition, meta, attempts)
        return None

    def deliveries(
        self,
        partition: int,
        sub_id: str,
        state: str | None,
        after: tuple[int, str] | None,
        limit: int,
    ) -> tuple[list[StoredDelivery], tuple[int, str] | None]:
        """A subscription's deliveries newest first (by first attempt), from after ``after``
        (first attempt ms, delivery id); and the position of the last one when there are more."""
        head = k.prefix(partition, k.BY_STATE) + k.text(sub_id)
        codes = list(k.STATE_CODES.values()) if state is None else [k.STATE_CODES[state]]
        after_key = b"" if after is None else k.newest(after[0]) + k.text(after[1]) + b"\x00"
        # each state's list is in (newest first, delivery id) order after ``head + code``; the
        # list of every state merges them in that order
        scans = [self._suffixes(head + code, after_key) for code in codes]
        merged = scans[0] if len(scans) == 1 else heapq.merge(*scans)
        found: list[StoredDelivery] = []
        last: tuple[int, str] | None = None
        for suffix in merged:
            if len(found) == limit:
                return found, last
            first_at = k.NEWEST - k.read_be8(suffix, 0)
            delivery_id, _ = k.read_text(suffix, 8)
            value = self.db.get(k.meta_key(partition, delivery_id))
            if value is None:
                continue
            meta, attempts = k.decode_meta(value)
            found.append(StoredDelivery(partition, meta, attempts))
            last = (first_at, delivery_id)
        return found, None

    def _suffixes(self, start: bytes, after: bytes) -> Iterator[bytes]:
        """The keys under ``start`` from ``start + after`` on, without ``start``."""
        cut = len(start)
        for key, _ in self._range(start + after, k.upper(start)):
            yield key[cut:]

    # --- dead letters -------------------------------------------------------------------------

    def letters(
        self,
        partitions: set[int],
        *,
        subscription_id: str | None,
        tenant_id: str | None,
        reason: str | None,
        since_ms: int | None,
        until_ms: int | None,
        after: LetterPosition | None,
        limit: int,
    ) -> list[StoredLetter]:
        """Up to ``limit`` dead letters after ``after`` in the order of `LetterPosition`
        (newest first), merged over ``partitions``.

        A lazy k-way merge: each partition's scan is already in that order, so a page reads
        ``limit`` letters plus one per partition, not ``limit`` from every partition (which
        made a page of everybody's letters 3x slower at 2M attempts than at 100k)."""
        scans = [
            self._partition_letters(
                partition, subscription_id, tenant_id, reason, since_ms, until_ms, after, limit
            )
            for partition in sorted(partitions)
        ]
        merged = heapq.merge(*scans, key=lambda s: s.position)
        return list(itertools.islice(merged, limit))

    def _partition_letters(
        self,
        partition: int,
        sub_id: str | None,
        tenant_id: str | None,
        reason: str | None,
        since_ms: int | None,
        until_ms: int | None,
        after: LetterPosition | None,
        limit: int,
    ) -> Iterator[StoredLetter]:
        if sub_id is not None:
            start = k.prefix(partition, k.LETTER) + k.text(sub_id)
        elif tenant_id is not None:
            start = k.prefix(partition, k.TENANT_LETTER) + k.text(tenant_id)
        else:
            start = k.prefix(partition, k.ANY_LETTER)
        newest_from, offset_from = _resume_at(partition, until_ms, after)
        stop_newest = None if since_ms is None else k.NEWEST - since_ms
        returned = examined = 0
        for key, value in self._range(
            start + k.be8(newest_from) + k.be8(offset_from), k.upper(start)
        ):
            newest = k.read_be8(key, len(start))
            if stop_newest is not None and newest > stop_newest:
                return
            examined += 1
            offset = k.read_be8(key, len(start) + 8)
            sub = sub_id or ""
            if sub_id is None:
                sub, _ = k.read_text(value, 0)
                row = self.db.get(k.letter_key(partition, sub, k.NEWEST - newest, offset))
                if row is None:
                    continue
                value = row
            tenant, at = k.read_text(value, 0)
            why, at = k.read_text(value, at)
            if reason is None or why.startswith(reason):
                yield StoredLetter(
                    LetterPosition(newest, partition, offset), sub, tenant, why, value[at:]
                )
                returned += 1
                if returned >= limit:
                    return
            if examined >= SCAN_BUDGET and returned:
                return

    def letters_of_delivery(self, partition: int, delivery_id: str) -> list[bytes]:
        """Every dead letter of one delivery, oldest first."""
        start = k.prefix(partition, k.DELIVERY_LETTER) + k.text(delivery_id)
        out: list[bytes] = []
        for key, value in self._range(start, k.upper(start)):
            offset = k.read_be8(key, len(start))
            sub, at = k.read_text(value, 0)
            dead_at = k.read_be8(value, at)
            row = self.db.get(k.letter_key(partition, sub, dead_at, offset))
            if row is not None:
                _tenant, at = k.read_text(row, 0)
                _reason, at = k.read_text(row, at)
                out.append(row[at:])
        return out


def _parse(
    meta_prefix: bytes, records: list[tuple[int, bytes]], before: int
) -> tuple[list[tuple[bytes, IndexFields, bytes]], int]:
    """(record key, index fields, record) of each readable attempt from ``before`` on, and how
    many were unreadable (each logged)."""
    parsed: list[tuple[bytes, IndexFields, bytes]] = []
    skipped = 0
    for offset, raw in records:
        try:
            f = index_fields(raw)
            if f.state not in k.STATE_CODES:
                raise DecodeError("invalid_avro", f"an unknown state {f.state!r}")
        except DecodeError as exc:
            log.error("attempt skipped by the ledger: %s", exc, extra={"offset": offset})
            skipped += 1
            continue
        if f.started_at >= before:
            parsed.append((meta_prefix + f.delivery_key, f, raw))
    return parsed, skipped


def _resume_at(
    partition: int, until_ms: int | None, after: LetterPosition | None
) -> tuple[int, int]:
    """(newest, offset) of the first letter key of ``partition`` a page may return."""
    start = (0, 0) if until_ms is None else (k.NEWEST - (until_ms - 1), 0)
    return start if after is None else max(start, after.start_in(partition))


def latest_attempt(attempts: list[bytes]) -> int:
    latest = 0
    for raw in attempts:
        try:
            latest = max(latest, attempt_fields(raw).attempt)
        except DecodeError:
            continue
    return latest
