"""Shared fixtures.

Integration tests talk to the real local Apache Kafka that `make kafka` (and `.ci/run`) starts.
When it is absent they fail with a message saying so; they never skip.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings as hypothesis_settings

from streams.adapters.kafka_admin import TopicAdmin, delete_topics
from streams.settings import Settings, load_settings

# Property tests judge correctness, not speed: on a loaded 2-core machine a single example can
# take longer than Hypothesis' default 200 ms deadline, which would fail correct code.
hypothesis_settings.register_profile("hookstream", deadline=None)
hypothesis_settings.load_profile("hookstream")

pytest_plugins = ["tests.receivers", "tests.smtp_server"]  # real local HTTP and SMTP servers

BOOTSTRAP = os.environ.get("HOOKSTREAM_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
REPO = Path(__file__).resolve().parent.parent
#: The key that encrypts endpoint secrets in integration tests (S5); `settings_env` passes it on.
TEST_SECRET_KEY = "hookstream-tests-" + uuid.uuid4().hex


#: Test files that run a cluster or a chaos schedule on brokers of their own: the heaviest of
#: the suite (minutes each, up to three JVMs at a time). Under `make test`'s two pytest-xdist
#: workers they share one worker, one after the other, so they never compete with each other
#: for the box's two cores (side by side they took 2.2x as long, near their drain deadlines).
OWN_BROKER_FILES = frozenset({"test_cluster.py", "test_chaos.py"})


def xdist_scope(nodeid: str) -> str:
    """The unit of work `make test` hands one pytest-xdist worker: a test file (module-scoped
    fixtures and receivers are shared by a file's tests, in order), and one for all of
    `OWN_BROKER_FILES`."""
    path = nodeid.split("::", 1)[0]
    return "own-brokers" if Path(path).name in OWN_BROKER_FILES else path


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files of `OWN_BROKER_FILES` first, the rest in their order: under `make test` the
    longest unit of work starts at once on one worker while the other takes the rest, so it
    does not end the run alone (with ``--no-loadscope-reorder``: xdist's default sends the
    units with the most tests first, which put these four tests last)."""
    items.sort(key=lambda item: item.path.name not in OWN_BROKER_FILES)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` with `xdist_scope`'s units. pytest-xdist's own way to group files,
    ``--dist loadgroup`` with ``xdist_group`` marks, has no effect under pytest 9.2: xdist 3.8.0
    writes the group into ``item._nodeid``, which pytest 9 no longer reads. Other modes are
    xdist's own."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FileOrOwnBrokers(LoadFileScheduling):  # type: ignore[misc]  # xdist ships no types
        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid)

    return FileOrOwnBrokers(config, log)


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    """The real broker's address; fails the test (never skips) when no broker answers."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": BOOTSTRAP, "socket.timeout.ms": 5000})
    try:
        metadata = admin.list_topics(timeout=10)
    except Exception as exc:  # the broker is a hard requirement of integration tests
        pytest.fail(f"no Kafka broker at {BOOTSTRAP} ({exc}); run `make kafka` first")
    if not metadata.brokers:
        pytest.fail(f"Kafka at {BOOTSTRAP} reports no brokers; run `make kafka` first")
    return BOOTSTRAP


@pytest.fixture
def unique_prefix() -> str:
    """A topic prefix and group id of this test's own, so tests never see each other."""
    return f"t{uuid.uuid4().hex[:10]}."


@pytest.fixture
def make_settings(
    kafka_bootstrap: str, unique_prefix: str, tmp_path: Path
) -> Iterator[Callable[..., Settings]]:
    """Factory of Settings bound to the real broker, a unique prefix/group and a temp data dir."""

    def factory(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "kafka_bootstrap": kafka_bootstrap,
            "topic_prefix": unique_prefix,
            "group_id": unique_prefix.rstrip("."),
            "data_dir": tmp_path / "data",
            "topics_file": REPO / "topics.yaml",
            "allow_private_destinations": True,
            # S5: secrets are encrypted by default; tests use a key of their own
            "secret_key": TEST_SECRET_KEY,
            # R2: one worker on one broker takes a new subscription version in milliseconds;
            # test_recovery_settle holds a router back and sets its own settle time
            "reenable_settle": "2s",
        }
        values.update(overrides)
        return load_settings(**values)

    yield factory
    # A test's topics: topics.yaml's under its prefix (the group id and a dot) and Faust's
    # changelogs (the group id and a dash). Left behind, every integration test would add a
    # dozen topics to the shared broker for the rest of the run.
    settings = factory()
    delete_topics(settings, TopicAdmin(settings).names_with_prefix(settings.group_id))


@pytest.fixture
def make_topic(kafka_bootstrap: str) -> Iterator[Callable[[str, int], str]]:
    """Factory of topics on the real broker (name, partitions) -> name; deleted afterwards."""
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    made: list[str] = []

    def factory(name: str, partitions: int) -> str:
        admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
        made.append(name)
        return name

    yield factory
    for name in made:
        admin.delete_topics([name])[name].result(30)
