"""Which worker holds a partition of the per-subscription state, and asking it (O2, S6).

The one forwarding mechanism of every read of worker state: the analytics tables, the ledger
and dead letters, and the health records. A subscription's partition is the Kafka default
partitioner's murmur2 of its raw id, as every hookstream producer uses; the partitions of the
per-subscription topics and of the tables' changelogs have the same count and Faust's assignor
gives partition p of all of them to one worker.

A worker answers for a partition only while it holds it as an active assignment and no
rebalance or table recovery is under way (`held`); otherwise it asks the owner the Faust
assignor names, at the URL each worker announces (``advertise`` in
`streams.agents.analytics`), with the installation's peer key
(`streams.services.auth.peer_token`; the operator key is still accepted), and that owner checks
the same before it answers. A partition that is moving answers 503 with ``Retry-After`` on
both sides, so an old owner's stale copy is never served.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final

import httpx
from faust.web import View
from yarl import URL

from streams.errors import UnauthorizedError, UnavailableError
from streams.services.auth import authenticate, is_peer, peer_token
from streams.settings import Settings

PEER_TIMEOUT_S: Final = 10.0
#: Seconds a client should wait before asking again while partitions move.
RETRY_AFTER_S: Final = "1"


def ident(url: URL | str) -> tuple[str, int]:
    parsed = URL(str(url))
    return (parsed.host or "", int(parsed.port or 80))


def moving(what: str) -> UnavailableError:
    return UnavailableError(
        f"{what}: partitions are moving between workers; try again",
        {"Retry-After": RETRY_AFTER_S},
    )


class Owners:
    """The owners of one table's partitions (``table_name`` as registered on the app)."""

    def __init__(self, app: Any, settings: Settings, table: Any) -> None:
        self.app = app
        self.settings = settings
        self.table = table

    def _topic(self) -> str:
        return str(self.table.changelog_topic.get_topic_name())

    def serving(self) -> bool:
        return not self.app.rebalancing and not self.app.in_recovery

    def held(self) -> set[int]:
        """The partitions this worker holds and may answer for, now."""
        if not self.serving():
            return set()
        topic = self._topic()
        return {tp.partition for tp in self.app.assignor.assigned_actives() if tp.topic == topic}

    def _peers(self) -> dict[int, str]:
        topic = self._topic()
        by_partition: dict[int, str] = {}
        for url, assigned in self.app.router.table_metadata(self.table.name).items():
            for partition in assigned.get(topic, ()):
                by_partition[int(partition)] = str(url)
        return by_partition

    def by_owner(
        self, partitions: Iterable[int], held: set[int] | None = None
    ) -> dict[str | None, list[int]]:
        """``partitions`` by the web address of their owner; None is this worker. ``held``
        narrows what this worker answers for (a state that is still being restored)."""
        mine = self.held() if held is None else held
        peers = self._peers()
        me = ident(self.app.conf.canonical_url)
        grouped: dict[str | None, list[int]] = {}
        for partition in partitions:
            owner = None if partition in mine else peers.get(partition)
            if owner is not None and ident(owner) == me:
                raise moving("this worker is taking or giving up these subscriptions")
            if owner is None and partition not in mine:
                raise moving("no worker holds these subscriptions yet")
            grouped.setdefault(owner, []).append(partition)
        return grouped

    async def ask(self, owner: str, path: str, params: dict[str, str]) -> Any:
        """GET ``path`` on ``owner`` with the peer key; its JSON body."""
        tokens = [peer_token(self.settings)]
        if self.settings.admin_token is not None:  # a worker of an older release (upgrades)
            tokens.append(self.settings.admin_token.get_secret_value())
        if tokens[0] is None:
            raise UnavailableError(
                "this worker does not hold this state and cannot ask the one that does: "
                "set HOOKSTREAM_SECRET_KEY (or HOOKSTREAM_ADMIN_TOKEN) on every worker"
            )
        try:
            async with httpx.AsyncClient(timeout=PEER_TIMEOUT_S) as client:
                for token in tokens:
                    headers = {"Authorization": f"Bearer {token}"}
                    response = await client.get(f"{owner}{path}", params=params, headers=headers)
                    if response.status_code != 401:
                        break
        except httpx.HTTPError as exc:  # gone: its partitions move to the others shortly
            raise moving(f"the worker at {owner} did not answer ({exc})") from exc
        if response.status_code == 503:
            raise moving(f"the worker at {owner} does not hold them now")
        if response.status_code != 200:
            raise UnavailableError(f"the worker at {owner} answered {response.status_code}")
        try:
            return response.json()
        except ValueError as exc:
            raise UnavailableError(f"the worker at {owner} sent an unreadable answer") from exc


def peer_view(settings: Settings, answer: Callable[[dict[str, str]], Any]) -> type[View]:
    """A view that answers another worker (peer or operator key) with ``answer(query)``, which
    raises `UnavailableError` (503, ``Retry-After``) when this worker does not hold the state
    and `ValueError` (400) for a bad query."""

    class PeerState(View):
        async def get(self, request: Any) -> Any:
            token = settings.admin_token
            header = request.headers.get("Authorization")
            try:
                if not is_peer(header, settings):
                    admin = None if token is None else token.get_secret_value()
                    if not authenticate(header, admin, None).is_operator:
                        raise UnauthorizedError("a peer or operator key is required", invalid=True)
                body = answer(dict(request.query))
            except UnauthorizedError as exc:
                return self.json({"error": exc.code, "message": exc.message}, status=401)
            except UnavailableError as exc:
                payload = {"error": exc.code, "message": exc.message}
                return self.json(payload, status=503, headers=exc.headers)
            except ValueError as exc:
                return self.json({"error": "bad_request", "message": str(exc)}, status=400)
            return self.json(body)

    return PeerState
