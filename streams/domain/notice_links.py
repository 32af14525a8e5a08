"""The portal link's lines in a notice email (SPEC H5, H6, R1, U1).

The link is signed and expiring (``streams.services.portal_links``); a notice carries it as
``portal_link``, and these lines put it on a line of its own so that mail clients keep it whole.
"""

from __future__ import annotations


def reenable_lines(link: str | None) -> list[str]:
    """The portal as a third way to re-enable, after the CLI and the API."""
    if link is None:
        return []
    return [
        "or in your browser, where the failing attempts are shown (the link expires):",
        f"    {link}",
    ]


def warning_lines(link: str | None) -> list[str]:
    """Where an early warning's failing attempts can be seen."""
    if link is None:
        return []
    return ["", "See the failing attempts in your browser (the link expires):", f"    {link}"]
