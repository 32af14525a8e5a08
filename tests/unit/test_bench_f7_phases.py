"""F7's alternating benchmark splits the small tenant's deliveries by phase (SPEC F7).

The measured side must hold every delivery published while the big tenant publishes, and the
baseline only those of the quiet phases after their settle time, so leftovers of the big
tenant's load count against hookstream and never for it.
"""

from __future__ import annotations

from bench.flow_f7 import Phases
from bench.traffic import Published

PHASES = Phases(seconds=10.0, warmup=3.0, count=4, big_first=False, settle=2.0)


def test_the_big_tenant_publishes_in_every_other_phase_and_in_the_warm_up() -> None:
    assert [PHASES.big_on(k) for k in range(4)] == [False, True, False, True]
    # the warm-up runs like the phase before the first: here a phase with the big tenant
    assert PHASES.active("big", 1.0)
    assert not PHASES.active("big", 3.0)
    assert PHASES.active("big", 13.0)
    assert PHASES.active("small", 5.0)
    big_first = Phases(10.0, 3.0, 4, big_first=True, settle=2.0)
    assert [big_first.big_on(k) for k in range(-1, 4)] == [False, True, False, True, False]


def test_split_counts_every_busy_phase_and_only_the_settled_part_of_quiet_ones() -> None:
    sent = Published(began=1000.0, warmup_s=3.0)
    times = {
        "warm": 1001.0,  # warm-up: neither side
        "quiet_early": 1004.0,  # phase 0, 1 s in: inside the settle time
        "quiet": 1006.0,  # phase 0, 3 s in
        "busy_first": 1013.0,  # phase 1 at its start: measured
        "busy": 1020.0,
        "after_busy": 1024.5,  # phase 2, 1.5 s after the big tenant stopped
        "quiet_late": 1030.0,
        "last_busy": 1042.9,
        "after_end": 1043.5,  # past the last phase
    }
    sent.sent["small"] = times
    sides, per_phase = PHASES.split(sent)
    assert set(sides["measured"]) == {"busy_first", "busy", "last_busy"}
    assert set(sides["baseline"]) == {"quiet", "quiet_late"}
    assert [set(p) for p in per_phase] == [
        {"quiet_early", "quiet"},
        {"busy_first", "busy"},
        {"after_busy", "quiet_late"},
        {"last_busy"},
    ]
