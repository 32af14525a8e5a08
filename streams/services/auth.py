"""Who is calling the admin API (Q6): the operator, or one tenant.

``Authorization: Bearer <key>``. The operator key is ``HOOKSTREAM_ADMIN_TOKEN`` and sees
everything. A tenant key (``hookstream keys create --tenant T``) sees only tenant T: anything of
another tenant is answered as if it did not exist (404). Keys are compared in constant time.
With no admin token configured and no tenant keys created, every request is refused.

Workers ask each other for the state they hold (S6, O2) with a peer key of their own
(`peer_token`), derived from the key every worker of an installation already shares, so a
fleet needs no operator key for that. The peer key opens the peer views only.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from streams.adapters.registry import ApiKeyRegistry
from streams.domain.portal_tokens import derive_key
from streams.errors import UnauthorizedError
from streams.services.keys import parse_key
from streams.services.portal_links import master_secret
from streams.settings import Settings


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller. ``tenant_id`` is None for the operator."""

    tenant_id: str | None
    key_id: str | None = None

    @property
    def is_operator(self) -> bool:
        return self.tenant_id is None

    def sees(self, tenant_id: str | None) -> bool:
        return self.tenant_id is None or self.tenant_id == tenant_id


OPERATOR = Principal(tenant_id=None)


def authenticate(
    authorization: str | None, admin_token: str | None, keys: ApiKeyRegistry | None
) -> Principal:
    """The principal a request's Authorization header proves, or `UnauthorizedError`."""
    if not authorization:
        raise UnauthorizedError(
            "an API key is required: Authorization: Bearer <key>", invalid=False
        )
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise UnauthorizedError("use Authorization: Bearer <key>", invalid=False)
    if admin_token and hmac.compare_digest(token.encode(), admin_token.encode()):
        return OPERATOR
    key_id = parse_key(token)
    found = None if key_id is None or keys is None else keys.lookup(key_id, token)
    if found is None:
        raise UnauthorizedError("the API key is not valid", invalid=True)
    return Principal(tenant_id=found.tenant_id, key_id=found.key_id)


def peer_token(settings: Settings) -> str | None:
    """The key workers ask each other with: derived from ``HOOKSTREAM_SECRET_KEY`` (else the
    operator key), which every worker of one installation has; None when neither is set."""
    master = master_secret(settings)
    return None if master is None else "hspeer_" + derive_key(master, "peer").hex()


def is_peer(authorization: str | None, settings: Settings) -> bool:
    """Whether a request carries this installation's peer key (compared in constant time)."""
    expected = peer_token(settings)
    scheme, _, token = (authorization or "").partition(" ")
    if expected is None or scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(token.strip().encode(), expected.encode())
