"""hookstream's admin HTTP API (SPEC S2): thin views over ``streams.services``.

`api_component` registers it on a worker's Faust app; see ``docs/api.md``.
"""

from streams.api.component import api_component

__all__ = ["api_component"]
