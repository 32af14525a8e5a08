"""Q1, D1: the CI-sized chaos run: kill -9 workers and restart the broker under load.

The run (`chaos.run.run_chaos`) starts a broker of its own on a free port pair, so restarting
it never disturbs the broker the other tests share, plus two real `hookstream worker`
processes and the receiver farm. It publishes 20,000 deliveries (event x matching
subscription) at 200/s while a worker is killed with ``kill -9`` three times (every 10-30 s,
seeded) and the broker is restarted once, waits for the pipeline to drain, and audits every
pair: nothing lost, and duplicates under Q1's 1% plus what one kill can cost at most
(`WORST_KILL`: a run this short cannot spread one unlucky kill). `make chaos` is the
full-size run, held to Q1's 1% itself; docs/reliability.md has its figures.

The broker's jars come from the default local broker's cache (`make kafka` resolves it), or
from ``HOOKSTREAM_CHAOS_JARS`` when set.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

from chaos.audit import Recorded, audit, expected_pairs
from chaos.cluster import default_jars_dir
from chaos.run import ChaosConfig, run_chaos
from streams.domain.models import DeadLetter, Delivery, Lane, Subscription
from streams.lanes.dispatcher import STALLED_CAP_PER_SLOT
from streams.settings import Settings
from tests.integration.pipeline_harness import make_event

pytestmark = pytest.mark.integration

DELIVERIES = 20_000
#: Q1's own bar, over a long run (`make chaos`: 100,000 deliveries, 12 kills).
DUPLICATE_CEILING = 0.01
_SLOTS = Settings.model_fields["dispatch_concurrency"].default
#: What one kill -9 can cost at most: the killed worker's attempts that a receiver answered
#: and it never recorded, all its slots when it dies at full concurrency, plus the records
#: still waiting for Kafka, a quarter slot each while Kafka is silent (`CommitGate`). A kill
#: as the broker comes back, when the workers start what they held at full concurrency, costs
#: that much (322 measured on 2026-12-04; 36-128 for kills elsewhere): more than this short
#: run's 1% (200) by itself, where the long run spreads it over five times as many deliveries.
#: So this run is allowed Q1's 1% plus one such kill (520, 2.6%). The regressions it exists
#: for cross it: a revoke that went on starting attempts (2,895 under load), a worker that
#: went on sending through a broker restart (1,020 for one kill).
WORST_KILL = _SLOTS + int(_SLOTS * STALLED_CAP_PER_SLOT)


def test_Q1_D1_the_audit_catches_a_lost_pair_and_counts_duplicates() -> None:
    """The audit itself, on a made-up run: it must be able to fail."""
    subs = [
        Subscription(
            id=f"sub_{n}", tenant_id="acme", name="", url="http://h/ok", filters=("*",), secrets=()
        )
        for n in range(3)
    ]
    events = [make_event("acme", "order.created", n, run="audit") for n in range(4)]
    pairs = expected_pairs(events, subs)
    ids = sorted(pairs)
    delivered, dead, lost = ids[:-2], ids[-2], ids[-1]
    letter = DeadLetter(
        reason="http_410",
        dead_at=1,
        delivery=Delivery(
            delivery_id=dead,
            subscription_id=pairs[dead][1],
            tenant_id="acme",
            event=events[0],
            attempt=1,
            lane=Lane.LIVE,
            routed_at=1,
        ),
    )
    recorded = Recorded(
        events_topic=frozenset(e.id for e in events),
        archived=frozenset(e.id for e in events),
        routed=Counter(ids),
        attempts=[],
        dead_letters=[letter],
    )
    ok = dict.fromkeys(delivered, 1) | {delivered[0]: 3}

    report = audit(pairs, [e.id for e in events], recorded, ok, {200: len(delivered) + 2})

    assert len(pairs) == 12
    assert (report.delivered, report.dead, report.lost) == (10, 1, 1)
    assert report.lost_sample == [lost]
    assert not report.passed
    assert report.duplicates == 2
    assert report.duplicate_rate == 2 / 12


@pytest.mark.timeout(1200)
def test_Q1_D1_nothing_lost_and_few_duplicates_across_kills_and_a_broker_restart(
    tmp_path: Path,
) -> None:
    jars = Path(os.environ.get("HOOKSTREAM_CHAOS_JARS") or default_jars_dir())
    config = ChaosConfig(
        deliveries=DELIVERIES,
        kills=3,
        broker_restart=True,
        seed=20240611,
        work_dir=tmp_path / "chaos",
        jars_dir=jars,
        rate=200.0,
        quiet_s=10.0,
        drain_timeout_s=600.0,
    )

    report = run_chaos(config)
    (tmp_path / "chaos-report.json").write_text(json.dumps(report, indent=2))
    found = report["audit"]
    summary = {
        k: found[k]
        for k in ("final_states", "lost_sample", "duplicate_causes", "duplicates_by_10s")
    }

    assert len(report["timeline"]["kills"]) == 3
    assert report["timeline"]["broker_restart"], "the broker restart did not complete"
    assert report["timeline"]["drained"], f"the pipeline did not drain: {report['timeline']}"
    assert found["expected_pairs"] >= DELIVERIES
    assert found["missing_from_events"] == 0
    assert found["unsigned_requests"] == 0
    # D1: every pair ended delivered, dead-lettered or parked.
    assert found["lost"] == 0, summary
    assert found["delivered"] + found["dead"] + found["parked"] == found["expected_pairs"]
    # The farm's 404/410 endpoints make dead letters; nothing else may.
    assert set(found["dead_reasons"]) <= {"http_404", "http_410"}, found["dead_reasons"]
    # Q1: duplicates under 1%, plus one kill's worst case (see WORST_KILL).
    ceiling = DUPLICATE_CEILING * found["expected_pairs"] + WORST_KILL
    rate = found["duplicate_rate"]
    print(f"Q1: {found['duplicates']} duplicates ({rate:.2%}), ceiling {ceiling:.0f}")
    assert found["duplicates"] < ceiling, summary
