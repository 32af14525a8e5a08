"""O2 / issue #6: how a worker finds the owner of a subscription's analytics, without a broker."""

from __future__ import annotations

from pathlib import Path

from yarl import URL

from streams.adapters.kafka_clients import partition_of
from streams.agents.analytics import analytics_component
from streams.app import create_app
from streams.settings import load_settings


def test_o2_a_worker_bound_to_every_interface_advertises_an_address_peers_can_reach(
    tmp_path: Path,
) -> None:
    """The Helm chart and docker compose bind 0.0.0.0: peers must not be sent there."""
    settings = load_settings(data_dir=tmp_path, web_host="0.0.0.0", web_port=6123)
    app = create_app(settings, [analytics_component])
    url = URL(str(app.conf.canonical_url))
    assert url.host not in ("0.0.0.0", "::", "") and url.port == 6123


def test_o2_a_worker_bound_to_one_address_advertises_it(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path, web_host="10.0.0.7", web_port=6124)
    app = create_app(settings, [analytics_component])
    assert str(app.conf.canonical_url) == "http://10.0.0.7:6124"


def test_o2_subscriptions_spread_over_every_partition_and_stay_put() -> None:
    """The partition is a pure function of the id (Kafka's murmur2), the same on every worker."""
    ids = [f"sub_{n:04d}" for n in range(600)]
    spread = {partition_of(sub_id, 12) for sub_id in ids}
    assert spread == set(range(12))
    assert [partition_of(i, 12) for i in ids] == [partition_of(i, 12) for i in ids]
