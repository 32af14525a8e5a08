"""The fleet's shared circuit breakers (H8), read from the ``breakers`` topic.

For the CLI and any reader outside a worker: the topic is folded into a `FleetView` with the
same compare-and-set rule the workers apply, so the answer is the workers' own view (S4).
"""

from __future__ import annotations

from streams.adapters import codec
from streams.adapters.topic_reader import scan
from streams.domain.fleet_breaker import BreakerRecord, FleetView
from streams.errors import DecodeError
from streams.settings import Settings


def breaker_view(settings: Settings) -> FleetView:
    """Every origin's shared breaker, as every worker holds it."""
    view = FleetView()
    for msg in scan(settings, settings.topic("breakers")):
        value = msg.value()
        if not value:
            continue
        try:
            view.apply(codec.decode(BreakerRecord, value))
        except DecodeError:
            continue
    return view
