"""The portal's keys and the signed link a notice carries (SPEC U1, U4, H5, H6).

The keys derive from ``HOOKSTREAM_SECRET_KEY`` (else ``HOOKSTREAM_ADMIN_TOKEN``), so every
worker of one installation signs and checks the same links and sessions. The link is
``{portal_url}/link?token=...``: it opens one subscription until it expires
(``HOOKSTREAM_PORTAL_LINK_TTL``); the portal swaps it for a session cookie at once.
"""

from __future__ import annotations

from urllib.parse import quote

from streams.domain.portal_tokens import derive_key, sign_link
from streams.settings import Settings


def master_secret(settings: Settings) -> bytes | None:
    """The secret every portal key derives from, or None when neither key is configured."""
    for secret in (settings.secret_key, settings.admin_token):
        if secret is not None and secret.get_secret_value():
            return secret.get_secret_value().encode()
    return None


def link_key(settings: Settings) -> bytes | None:
    """The key that signs notice links, or None (no link can be made or checked)."""
    master = master_secret(settings)
    return None if master is None else derive_key(master, "link")


def subscription_link(settings: Settings, subscription_id: str, now_s: float) -> str | None:
    """The signed portal link to one subscription, or None when the portal has no public URL
    or no key is configured."""
    key = link_key(settings)
    if settings.portal_url is None or key is None:
        return None
    expires = int(now_s + settings.portal_link_ttl)
    token = sign_link(key, subscription_id, expires)
    return f"{settings.portal_url.rstrip('/')}/link?token={quote(token, safe='')}"
