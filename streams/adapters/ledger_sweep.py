"""Expiry and deletion of the ledger state (S6): the sweeps of `LedgerStore`, run only by the
ledger's reader thread, the one writer."""

from __future__ import annotations

from collections.abc import Iterator

from rocksdict import Rdict, WriteBatch

from streams.adapters import codec
from streams.domain import ledger_keys as k
from streams.domain.ledger_keys import DeliveryMeta
from streams.domain.models import DeadLetter
from streams.errors import DecodeError


class Sweeps:
    """What `LedgerStore` deletes: entries past retention, and deleted subscriptions."""

    db: Rdict

    def _range(self, start: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]:
        """The entries with keys in ``[start, end)``, in key order."""
        it = self.db.iter()
        it.seek(start)
        while it.valid():
            key = it.key()
            if key >= end:
                return
            yield key, it.value()
            it.next()

    def expire(self, partition: int, attempts_before: int, letters_before: int, budget: int) -> int:
        """Delete deliveries whose latest attempt and dead letters whose time are before the
        cutoffs (their topic's retention); at most ``budget`` entries per call.

        Deliveries have no expiry index of their own (one entry fewer per new delivery): each
        of a subscription's by-state lists is walked from its oldest end while the first
        attempt is before the cutoff (`_expire_list`). One retried since stays, and expires
        with its latest."""
        batch = WriteBatch(raw_mode=True)
        done = 0
        head = k.prefix(partition, k.BY_STATE)
        for sub in sorted(self._subscriptions_of(partition, k.BY_STATE)):
            for code in k.STATE_CODES.values():
                if done >= budget:
                    break
                start = head + k.text(sub) + code
                done += self._expire_list(batch, partition, start, attempts_before, budget - done)
        start = k.prefix(partition, k.LETTER_EXPIRY)
        for key, value in self._range(start, start + k.be8(letters_before)):
            if done >= budget:
                break
            dead_at, offset = k.read_be8(key, 3), k.read_be8(key, 11)
            sub, at = k.read_text(value, 0)
            tenant, _ = k.read_text(value, at)
            self._drop_letter(batch, partition, sub, tenant, dead_at, offset)
            done += 1
        self.db.write(batch)
        return done

    def _expire_list(
        self, batch: WriteBatch, partition: int, start: bytes, before: int, budget: int
    ) -> int:
        """Expire up to ``budget`` deliveries of one by-state list (keys under ``start``), from
        its oldest end while their first attempt is before ``before``; how many.

        One retried or replayed since (its latest attempt after ``before``) stays, and the walk
        goes past it: at most ``budget`` of those per list and sweep, so in a list with more of
        them the entries after them wait until those expire themselves (within the topic's
        retention of their latest attempt)."""
        done = kept = 0
        it = self.db.iter()
        it.seek_for_prev(k.upper(start))
        while it.valid() and done < budget and kept < budget:
            key = it.key()
            if not key.startswith(start) or k.NEWEST - k.read_be8(key, len(start)) >= before:
                break
            delivery_id, _ = k.read_text(key, len(start) + 8)
            value = self.db.get(k.meta_key(partition, delivery_id))
            if value is None:
                batch.delete(key)
                done += 1
            elif (meta := k.decode_meta(value)[0]).last_at < before:
                self._drop_delivery(batch, partition, delivery_id, meta)
                batch.delete(key)
                done += 1
            else:
                kept += 1
            it.prev()
        return done

    def _drop_delivery(
        self, batch: WriteBatch, partition: int, delivery_id: str, meta: DeliveryMeta
    ) -> None:
        sub, first = meta.subscription_id, meta.first_at
        batch.delete(k.meta_key(partition, delivery_id))
        batch.delete(k.state_key(partition, sub, meta.state, first, delivery_id))

    def _drop_letter(
        self, batch: WriteBatch, partition: int, sub: str, tenant: str, dead_at: int, offset: int
    ) -> None:
        row = self.db.get(k.letter_key(partition, sub, dead_at, offset))
        if row is not None:
            _tenant, at = k.read_text(row, 0)
            _reason, at = k.read_text(row, at)
            try:
                letter = codec.decode(DeadLetter, row[at:])
            except DecodeError:
                letter = None
            if letter is not None and letter.delivery is not None:
                did = letter.delivery.delivery_id
                batch.delete(k.delivery_letter_key(partition, did, offset))
        batch.delete(k.letter_key(partition, sub, dead_at, offset))
        batch.delete(k.tenant_letter_key(partition, tenant, dead_at, offset))
        batch.delete(k.any_letter_key(partition, dead_at, offset))
        batch.delete(k.letter_expiry_key(partition, dead_at, offset))

    def subscriptions(self, partition: int) -> set[str]:
        """The subscriptions with deliveries or dead letters in ``partition`` (a skip scan)."""
        return self._subscriptions_of(partition, k.BY_STATE, k.LETTER)

    def _subscriptions_of(self, partition: int, *kinds: bytes) -> set[str]:
        found: set[str] = set()
        for kind in kinds:
            start = k.prefix(partition, kind)
            it = self.db.iter()
            it.seek(start)
            while it.valid() and it.key().startswith(start):
                sub, _ = k.read_text(it.key(), 3)
                found.add(sub)
                it.seek(k.upper(start + k.text(sub)))
        return found

    def drop_subscription(self, partition: int, sub_id: str) -> int:
        """Delete every delivery and dead letter of a deleted subscription."""
        batch = WriteBatch(raw_mode=True)
        done = 0
        start = k.prefix(partition, k.BY_STATE) + k.text(sub_id)
        sub_len = len(start) - 3 + 1  # and the state's code
        for key, _ in self._range(start, k.upper(start)):
            _first, delivery_id = k.delivery_of_index(key, sub_len)
            value = self.db.get(k.meta_key(partition, delivery_id))
            if value is not None:
                self._drop_delivery(batch, partition, delivery_id, k.decode_meta(value)[0])
            batch.delete(key)
            done += 1
        start = k.prefix(partition, k.LETTER) + k.text(sub_id)
        for key, value in self._range(start, k.upper(start)):
            newest, offset = k.read_be8(key, len(start)), k.read_be8(key, len(start) + 8)
            tenant, _ = k.read_text(value, 0)
            self._drop_letter(batch, partition, sub_id, tenant, k.NEWEST - newest, offset)
            done += 1
        self.db.write(batch)
        return done
