"""The endpoint owner's portal: server-rendered pages under /portal on every worker (SPEC U)."""

from streams.portal.component import portal_component

__all__ = ["portal_component"]
