"""The one Faust app factory of hookstream, and the worker that runs it.

`create_app` builds a Faust app from the `Settings` and lets each *component* register its agents,
tables, timers, services and web views on it. `DEFAULT_COMPONENTS` lists what `hookstream worker`
runs; a new agent module joins the product by adding its register function to that list.

What the factory decides, once, for every hookstream worker:

- Tables live in RocksDB through rocksdict, under ``settings.tables_dir``, with sized caches: the
  library defaults (2 GiB block cache per partition, 3 x 64 MiB write buffers, 90% of the process'
  file descriptors per partition) would put a worker far past its memory budget (SPEC P6).
- Faust creates no topic. Every topic hookstream's agents consume or produce is owned by
  topics.yaml (SPEC X1); the tables' changelogs are declared by `declare_changelogs` before the
  worker starts; the broker has ``auto.create.topics.enable=false`` as well.
- Faust's leader topic is off: hookstream does not use leader election.
- The agents' aiokafka consumer asks for ``agent_fetch_min_bytes`` per fetch and waits at most
  ``agent_fetch_wait`` for them, instead of a fetch per record (`streams.adapters.agent_fetch`).
- Faust reads nothing from the environment: `Settings` is the only configuration (SPEC X5).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import faust
import uvloop
from mode import Service

from streams.adapters import agent_fetch
from streams.adapters.broker_watch import BrokerWatch
from streams.adapters.gc_pauses import watch_gc_pauses
from streams.adapters.kafka_admin import TopicAdmin, load_topology
from streams.adapters.lag import lag_component
from streams.adapters.readiness import readiness
from streams.agents.analytics import analytics_component
from streams.agents.health import health_component
from streams.agents.ledger import ledger_component
from streams.agents.notifier import notifier_component
from streams.api import api_component
from streams.api.metrics_page import metrics_component
from streams.domain.topology import TopicSpec
from streams.lanes.backfill import backfill_component
from streams.lanes.pipeline import pipeline_component
from streams.logging import configure_logging
from streams.portal import portal_component
from streams.settings import Settings

#: Registers a part of the product on the app: agents, tables, tasks, services or web views.
Component = Callable[[faust.App, Settings], None]

#: What `hookstream worker` runs. Each agent module adds its register function here.
DEFAULT_COMPONENTS: list[Component] = [
    pipeline_component,
    backfill_component,
    api_component,
    portal_component,  # after api_component: the portal reads and acts through the API's views
    metrics_component,
    health_component,
    ledger_component,
    notifier_component,
    lag_component,
    analytics_component,
]

MIB: Final = 1024 * 1024

#: The worker's garbage collector thresholds, against Python's (700, 10, 10). Almost all of a
#: worker's garbage is freed by reference counting; the collector exists for cycles, and at
#: the default thresholds its generation-2 passes over every live object (tables, the
#: registry, Faust's and aiohttp's state) stalled the event loop often enough to set the tail
#: latency: p99 at 300 deliveries/s 66 against 140 ms, F7 small-tenant p99 ratio 4.5 against
#: 11.1, same CPU and RSS (docs/benchmarks.md, "GC thresholds").
GC_THRESHOLDS: Final = (50_000, 20, 100)

#: Table changelogs are faust's own topics; they are replicated as topics.yaml replicates this
#: topic (compacted state too): 1 on the development broker, 3 with min.insync.replicas 2 on a
#: cluster, so that losing one broker never takes a table's changelog offline.
CHANGELOG_REPLICATION_LIKE: Final = "subscriptions"


def changelog_replication(settings: Settings) -> tuple[int, dict[str, str]]:
    """(replication factor, min.insync.replicas config) of the tables' changelog topics."""
    spec = load_topology(settings).get(CHANGELOG_REPLICATION_LIKE)
    min_isr = spec.config.get("min.insync.replicas")
    return spec.replication_factor, {"min.insync.replicas": min_isr} if min_isr else {}


#: Write buffers per table partition: one filling while one flushes.
ROCKSDB_WRITE_BUFFERS: Final = 2
#: Open SST files per table partition; RocksDB keeps the rest closed.
ROCKSDB_MAX_OPEN_FILES: Final = 64


def rocksdb_options(settings: Settings) -> dict[str, Any]:
    """RocksDB options of every table partition, sized from the settings (SPEC §5, P6)."""
    return {
        "driver": "rocksdict",
        "block_cache_size": settings.rocksdb_block_cache_mb * MIB,
        "write_buffer_size": settings.rocksdb_write_buffer_mb * MIB,
        "max_write_buffer_number": ROCKSDB_WRITE_BUFFERS,
        "max_open_files": ROCKSDB_MAX_OPEN_FILES,
    }


def _sized_table_class(base: Any, defaults: Mapping[str, Any]) -> Any:
    """A subclass of faust's table class `base` whose stores open with `defaults`.

    faust has no app-wide RocksDB options, only a per-table ``options=`` mapping, so the app's
    table classes add the sized defaults to each table; a table's own options still win.
    Each table gets a fresh dict because faust's store pops keys out of the one it is given.
    """

    def _init(self: Any, app: Any, *, options: Mapping[str, Any] | None = None, **kw: Any) -> None:
        base.__init__(self, app, options={**defaults, **(options or {})}, **kw)

    return type(f"Sized{base.__name__}", (base,), {"__init__": _init, "__module__": __name__})


def _table_classes(settings: Settings) -> dict[str, Any]:
    defaults = rocksdb_options(settings)
    return {
        name: _sized_table_class(getattr(faust, name), defaults)
        for name in ("Table", "GlobalTable", "SetTable", "SetGlobalTable")
    }


def register_probes(app: faust.App, settings: Settings) -> None:
    """``/healthz`` (the process serves requests) and ``/readyz`` (see `readiness`), and the
    `BrokerWatch` that readiness consults."""
    watch = BrokerWatch(settings)
    app.hookstream_broker = watch  # type: ignore[attr-defined]  # hookstream's own attribute

    class BrokerWatchService(Service):
        _stop: asyncio.Event
        _task: asyncio.Task[None]

        async def on_start(self) -> None:
            self._stop = asyncio.Event()
            self._task = asyncio.create_task(watch.run(self._stop))

        async def on_stop(self) -> None:
            self._stop.set()
            self._task.cancel()

    app.service(BrokerWatchService)

    @app.page("/healthz")
    async def healthz(web: Any, request: Any) -> Any:
        return web.json({"status": "ok"})

    @app.page("/readyz")
    async def readyz(web: Any, request: Any) -> Any:
        state = readiness(app)
        status = "ready" if state["ready"] else "not_ready"
        return web.json({"status": status, **state}, status=200 if state["ready"] else 503)


def create_app(settings: Settings, components: Iterable[Component] = ()) -> faust.App:
    """Build hookstream's Faust app and register `components` on it, in order.

    The probes (`register_probes`) are always registered first.
    """
    tables_dir = settings.tables_dir.resolve()
    servers = [
        f"kafka://{server.strip()}" for server in settings.kafka_bootstrap.split(",") if server
    ]
    app = faust.App(
        settings.group_id,
        env={},  # faust must not read its own environment variables: Settings is the only source
        autodiscover=False,
        broker=servers,
        store="rocksdb://",
        datadir=tables_dir,
        tabledir=tables_dir,
        table_standby_replicas=settings.table_standby_replicas,
        topic_replication_factor=changelog_replication(settings)[0],
        # hookstream declares the changelogs itself before start (`declare_changelogs`), through
        # librdkafka, which finds the controller through any broker; Faust's own declaration
        # asks only the first broker of its metadata (`_get_controller_node`), so a worker
        # started while that broker was down exited with NodeNotReadyError
        topic_allow_declare=False,
        topic_disable_leader=True,
        consumer_auto_offset_reset="earliest",
        broker_commit_every=1000,
        # notice a dead worker within seconds, as the lanes' consumers do (session 10 s)
        broker_session_timeout=10.0,
        broker_heartbeat_interval=3.0,
        broker_commit_interval=1.0,
        stream_processing_timeout=60.0,
        web_enabled=True,
        web_transport="tcp://",
        web_bind=settings.web_host,
        web_host=settings.web_host,
        web_port=settings.web_port,
        # faust's debug pages would expose raw table contents (subscriptions hold secrets)
        web_router_enabled=False,
        web_tables_enabled=False,
        web_graph_enabled=False,
        web_stats_enabled=False,
        worker_redirect_stdouts=False,
        **_table_classes(settings),
    )
    agent_fetch.install(app, settings.agent_fetch_min_bytes, settings.agent_fetch_wait)
    for register in (register_probes, *components):
        register(app, settings)
    if not app.agents and not app.tables:
        # Nothing to consume: a consumer with no topics cannot join a group, so serve the web
        # views (probes, admin API) and produce only.
        app.producer_only = True
    return app


def declare_changelogs(app: faust.App, settings: Settings) -> None:
    """Create every table's changelog topic before the worker starts, with its partitions.

    Faust would create them itself, but a changelog created while the consumer group forms can
    be seen by Faust with 0 partitions, and every table write then fails. Creating them first
    (compacted, as Faust would) avoids that; existing ones are left alone.
    """
    replication, min_isr = changelog_replication(settings)
    specs = [
        TopicSpec(
            name=table.changelog_topic.get_topic_name(),
            full_name=table.changelog_topic.get_topic_name(),
            partitions=table.partitions or app.conf.topic_partitions,
            replication_factor=replication,
            config={"cleanup.policy": "compact", **min_isr},
            description=f"changelog of table {table.name}",
        )
        for table in app.tables.values()
    ]
    if not specs:
        return
    admin = TopicAdmin(settings)
    admin.create(specs)
    # Wait until the broker's metadata shows every changelog with its partitions: a worker
    # that starts before that can still see a new changelog with none.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        state = admin.describe(spec.full_name for spec in specs)
        if all(
            spec.full_name in state and state[spec.full_name].partitions == spec.partitions
            for spec in specs
        ):
            return
        time.sleep(0.2)


def run_worker(app: faust.App, settings: Settings) -> None:
    """Run `app` in the foreground until SIGTERM or SIGINT, then stop cleanly and return.

    Logs go out as JSON lines (`streams.logging`). faust's terminal spinner and banner are off,
    and faust never looks at the command line here. A worker that crashes exits the process with
    a non-zero status.
    """
    # uvloop: measured 0.90x CPU per delivery and a lower p50 (docs/benchmarks.md, "uvloop")
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    gc.set_threshold(*GC_THRESHOLDS)
    configure_logging(settings.log_level)
    settings.tables_dir.mkdir(parents=True, exist_ok=True)
    declare_changelogs(app, settings)
    worker = _Worker(
        app,
        deadline_s=settings.shutdown_deadline,
        loglevel=settings.log_level,
        quiet=True,
        redirect_stdouts=False,
        override_logging=False,  # keep the JSON handler configured above
    )
    worker.spinner = None
    watch_gc_pauses()
    # Everything built so far (modules, classes, the app, its agents and tables) lives as long as
    # the process. Frozen, it is left out of every later collection; faust's table stores force
    # a full collection per table on each rebalance, and over it each one took about 80 ms of
    # the event loop (docs/benchmarks.md, "gc.freeze at start").
    gc.freeze()
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:  # mode always exits; a clean stop is a normal return for callers
        if exc.code not in (0, None):
            raise


class _Worker(faust.Worker):
    """faust's worker with one stop deadline (STYLE 5).

    With the broker unreachable, aiokafka and the lanes wait on it for a minute and more while
    stopping. After ``deadline_s`` from the signal the process exits anyway, with status 0 (a
    stop was asked for); what it had not committed is redone by the next owner (D1).
    """

    def __init__(self, *args: Any, deadline_s: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline_s = deadline_s
        self._deadline: threading.Timer | None = None

    def _arm_deadline(self) -> None:
        if self._deadline is None:
            timer = threading.Timer(self._deadline_s, _exit_after_deadline, (self._deadline_s,))
            timer.daemon = True
            timer.start()
            self._deadline = timer

    # mode installs these as the loop's signal handlers; they only schedule the stop
    def _on_sigterm(self) -> None:
        self._arm_deadline()
        super()._on_sigterm()

    def _on_sigint(self) -> None:
        self._arm_deadline()
        super()._on_sigint()


def _exit_after_deadline(deadline_s: float) -> None:
    logging.getLogger(__name__).warning(
        "the worker did not stop within its deadline; exiting now (uncommitted work is redone)",
        extra={"shutdown_deadline_s": deadline_s},
    )
    logging.shutdown()
    os._exit(0)
