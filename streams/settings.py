"""The one typed settings object (SPEC X5).

Every setting is read from the environment with the ``HOOKSTREAM_`` prefix, validated once at
startup, and frozen. Nothing else in hookstream reads ``os.environ``. Each field's description is
its documentation: ``hookstream config settings`` and docs/configuration.md print them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Final

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic import ValidationError as PydanticValidationError
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from streams.domain.durations import parse_duration
from streams.errors import ConfigError

Durations = Annotated[tuple[float, ...], NoDecode]


def _durations(value: Any) -> Any:
    if isinstance(value, str):
        return tuple(parse_duration(part) for part in value.split(",") if part.strip())
    return value


#: Settings given as one duration (``30s``, ``5m``); ``retry_schedule`` is a list of them.
DURATION_FIELDS: Final = (
    "retry_window",
    "dedup_window",
    "default_timeout",
    "archive_retention",
    "reenable_settle",
    "breaker_window",
    "breaker_cooldown",
    "breaker_max_cooldown",
    "recovery_step",
    "recovery_probe_bound",
    "agent_fetch_wait",
    "ledger_fetch_wait",
    "ledger_sweep_interval",
    "producer_linger",
    "outbox_linger",
    "portal_link_ttl",
    "shutdown_deadline",
)


def _duration(value: Any) -> Any:
    if isinstance(value, str):
        return parse_duration(value)
    return value


class Settings(BaseSettings):
    """hookstream settings. Environment variable: ``HOOKSTREAM_`` + the field name in capitals."""

    model_config = SettingsConfigDict(
        env_prefix="HOOKSTREAM_", frozen=True, extra="ignore", validate_default=True
    )

    # --- Kafka -------------------------------------------------------------------------------
    kafka_bootstrap: str = Field(
        "127.0.0.1:9092", description="Kafka bootstrap servers, comma separated."
    )
    topic_prefix: str = Field(
        "hookstream.",
        pattern=r"^[A-Za-z0-9._-]*$",
        description="Prefix of every topic name; two pipelines with different prefixes and "
        "group ids share one broker without seeing each other.",
    )
    group_id: str = Field(
        "hookstream",
        pattern=r"^[A-Za-z0-9._-]+$",
        description="Consumer group id and Faust app id; lanes append a suffix to it.",
    )
    topics_file: Path = Field(
        Path("topics.yaml"), description="The topics.yaml that declares every topic (X1)."
    )

    # --- Worker -----------------------------------------------------------------------------
    data_dir: Path = Field(
        Path(".hookstream"),
        description="Local state: RocksDB tables, the local broker's data and its jar cache. "
        "Delete it when the broker is wiped.",
    )
    web_host: str = Field("127.0.0.1", description="Address the worker's web server binds.")
    web_port: int = Field(6066, ge=1, le=65535, description="Port of the admin API and /metrics.")
    table_standby_replicas: int = Field(
        0, ge=0, le=3, description="Standby replicas of each table; 0 on a single node."
    )
    rocksdb_block_cache_mb: int = Field(
        8, ge=1, le=4096, description="RocksDB block cache per table partition, in MiB."
    )
    rocksdb_write_buffer_mb: int = Field(
        4, ge=1, le=1024, description="RocksDB write buffer per table partition, in MiB."
    )
    dispatch_batch_size: int = Field(
        500,
        ge=1,
        le=10000,
        description="Records taken from Kafka per dispatch batch (at most one partition's "
        "share of the intake buffer: 4 x the dispatch concurrency).",
    )
    dispatch_concurrency: int = Field(
        256, ge=1, le=10000, description="HTTP attempts in flight per worker, all lanes together."
    )
    origin_max_in_flight: int = Field(
        64,
        ge=1,
        le=10000,
        description="HTTP attempts in flight per endpoint origin per worker: a slow host cannot "
        "take more of the worker's capacity (F3).",
    )
    agent_fetch_min_bytes: int = Field(
        65536,
        ge=1,
        le=52428800,
        description="Bytes the Faust agents' consumer (health, control, notifications, "
        "analytics) asks the broker for before a fetch returns; 1 answers every record at once.",
    )
    agent_fetch_wait: float = Field(
        0.1,
        gt=0,
        le=30,
        description="Longest a fetch of the Faust agents' consumer waits for "
        "agent_fetch_min_bytes: the most it adds to the agents' reaction time.",
    )
    ledger_fetch_wait: float = Field(
        0.1,
        gt=0,
        le=5,
        description="Longest the ledger's reader waits to fill a fetch of `attempts` and `dlq`: "
        "the most it adds to how soon a new attempt or dead letter can be looked up (S6).",
    )
    ledger_reader: bool = Field(
        True,
        description="Materialise the ledger and dead letters on this worker (S6). Off, the "
        "worker reads neither topic and answers every ledger and dead-letter read with 503: "
        "only for measuring what the ledger costs a worker (`bench.ab --before-env`).",
    )
    ledger_sweep_interval: float = Field(
        60.0,
        gt=0,
        le=86400,
        description="Time between sweeps of the ledger state for entries past their topic's "
        "retention and subscriptions deleted since (S6).",
    )
    producer_linger: float = Field(
        0.001,
        gt=0,
        le=5,
        description="How long hookstream's Kafka producers wait to batch records before "
        "sending (linger.ms): every delivery waits this long once, for its routed record.",
    )
    outbox_linger: float | None = Field(
        None,
        gt=0,
        le=5,
        description="With a value, the dispatcher writes the records no delivery waits for "
        "(its attempts, digests, health outcomes, retries and dead letters) through a producer "
        "of its own lingering this long, and routed records alone wait producer_linger. "
        "Fewer, fuller produce requests; a worker killed with kill -9 loses up to this much "
        "more of its ledger, so its successor sends those deliveries again (at least once).",
    )
    stage_clock: Path | None = Field(
        None,
        description="A file to write, for the benchmark, when each delivery reached each stage "
        "of this worker, to the microsecond (`streams.adapters.stage_clock`); off when unset.",
    )
    task_cpu: bool = Field(
        False,
        description="Count the event loop's CPU time per kind of task into "
        "hookstream_task_cpu_seconds_total, for profiling: about 7 µs more CPU per delivery "
        "(`streams.adapters.task_cpu`).",
    )
    adaptive_concurrency: bool = Field(
        True,
        description="Lower an endpoint origin's in-flight limit (AIMD, from "
        "origin_max_in_flight down to 1) when it answers 429, 5xx or timeouts or slows down, "
        "and raise it again as attempts succeed; false keeps the fixed limit.",
    )
    http_client: str = Field(
        "h1",
        pattern=r"^(h1|aiohttp)$",
        description="The delivery HTTP client: h1 (hookstream's keep-alive HTTP/1.1 client on "
        "llhttp, about a third of aiohttp's CPU per request) or aiohttp. Both keep one "
        "contract; see docs/benchmarks.md.",
    )
    shutdown_deadline: Annotated[float, NoDecode] = Field(
        8.0,
        gt=0,
        le=300,
        description="How long a worker may take to stop after SIGTERM/SIGINT before it exits "
        "anyway (e.g. with the broker unreachable, nothing can be committed). Work it had not "
        "committed is done again by the next owner of its partitions (at-least-once, D1).",
    )
    log_level: str = Field(
        "INFO", pattern=r"^(DEBUG|INFO|WARNING|ERROR)$", description="Log level."
    )

    # --- Secrets and access -------------------------------------------------------------------
    admin_token: SecretStr | None = Field(
        None, description="Operator API key for the admin API (bearer token)."
    )
    secret_key: SecretStr | None = Field(
        None,
        description="Key that encrypts endpoint secrets at rest in Kafka (at least 16 "
        "characters; 32 random bytes advised). Without it, creating a subscription or "
        "rotating a secret is refused unless allow_plaintext_secrets is set.",
    )
    secret_key_previous: SecretStr | None = Field(
        None,
        description="During a key rotation, the key being retired: secrets it sealed still "
        "open, and new ones are sealed under secret_key (see `hookstream secrets rekey`).",
    )
    allow_plaintext_secrets: bool = Field(
        False,
        description="Local development only: with no secret_key, store endpoint secrets in "
        "Kafka unencrypted (a warning is logged) instead of refusing to.",
    )
    allow_private_destinations: bool = Field(
        False,
        description="Allow deliveries to private, loopback and link-local addresses (SSRF "
        "guard off). Only for local development and tests.",
    )
    destination_allowlist: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        description="CIDR networks the SSRF guard allows although they are private, comma "
        "separated (e.g. an internal relay).",
    )
    smtp_url: str | None = Field(
        None, description="SMTP server for owner notifications, e.g. smtp://127.0.0.1:1025."
    )
    portal_url: str | None = Field(
        None,
        pattern=r"^https?://[^\s?#]+$",
        description="Public base URL of the owner's portal, e.g. https://hooks.example.com/portal "
        "(a worker serves it at /portal). Suspension and warning notices link to it with a "
        "signed link; unset, they carry none. Links and portal sessions are signed with a key "
        "derived from HOOKSTREAM_SECRET_KEY (or else HOOKSTREAM_ADMIN_TOKEN).",
    )
    portal_link_ttl: Annotated[float, NoDecode] = Field(
        7 * 86400.0,
        description="How long the signed portal link of a notice stays valid (default 7d, the "
        "retention window of a backfill).",
    )

    # --- Delivery -----------------------------------------------------------------------------
    retry_schedule: Durations = Field(
        (60.0, 300.0, 1800.0, 7200.0),
        description="Retry delays, comma separated (default 1m,5m,30m,2h): one Kafka topic "
        "per delay tier. Attempts = tiers + 1.",
    )
    retry_jitter: float = Field(0.1, ge=0.0, le=0.5, description="Jitter on each retry delay.")
    retry_window: Annotated[float, NoDecode] = Field(
        86400.0, description="Cap on the whole retry span of one delivery (default 24h)."
    )
    dedup_window: Annotated[float, NoDecode] = Field(
        120.0,
        description="How long a worker remembers successful deliveries, to settle copies that "
        "come back after a crash or rebalance without sending them again (default 2m). Read "
        "back from the attempt ledger when partitions are assigned.",
    )
    default_timeout: Annotated[float, NoDecode] = Field(
        10.0, description="Default HTTP timeout of a subscription (at most 30s)."
    )
    response_body_cap: int = Field(
        65536, ge=1024, description="Bytes of a response body read at most (D5)."
    )
    max_payload_bytes: int = Field(
        262144, ge=1024, description="Largest event payload accepted at ingest (F6)."
    )
    backfill_rate: float = Field(
        5.0,
        gt=0,
        le=10000,
        description="Default pace of backfills and replays, deliveries/s per subscription "
        "(R2); never above the subscription's own rate_limit.",
    )
    ingest_rate: float = Field(
        300.0,
        gt=0,
        description="Events per second one producer key may POST to /v1/events (3x a 100/s "
        "baseline, F5); beyond it the answer is 429 with Retry-After.",
    )
    ingest_burst: float = Field(
        300.0, ge=1, description="Events a producer key may send at once before pacing (F5)."
    )
    archive_retention: Annotated[float, NoDecode] = Field(
        7 * 86400.0, description="How far back backfills and replays reach (default 7d)."
    )
    reenable_settle: Annotated[float, NoDecode] = Field(
        10.0,
        description="How far past a re-enable its backfill reaches (R2), for every worker to "
        "see the active version: events a lagging router skipped and retries a lagging "
        "dispatcher parked meanwhile are backfilled; the backfill starts after it (0 to 5m).",
    )

    # --- Circuit breaker (H7), per endpoint origin in each worker -----------------------------
    breaker_failures: int = Field(
        5, ge=1, le=100000, description="Consecutive failed attempts that open a breaker."
    )
    breaker_failure_rate: float = Field(
        0.5, gt=0, le=1, description="Failed share of the window's attempts that opens it."
    )
    breaker_min_attempts: int = Field(
        20, ge=1, le=1000000, description="Attempts in the window before the rate counts."
    )
    breaker_window: Annotated[float, NoDecode] = Field(
        30.0, description="Sliding window of the failure rate (default 30s)."
    )
    breaker_cooldown: Annotated[float, NoDecode] = Field(
        30.0, description="How long an open breaker defers deliveries at first (default 30s)."
    )
    breaker_max_cooldown: Annotated[float, NoDecode] = Field(
        600.0, description="Cap of the cooldown, which doubles on each failed probe (10m)."
    )

    # --- Recovery after an outage (F4): shared by the fleet, like the breaker (H8) ------------
    recovery_ramp: bool = Field(
        True,
        description="Slow start: when an origin's breaker closes after an outage, or a "
        "subscription is re-enabled, the fleet's sending rate to it starts at "
        "HOOKSTREAM_RECOVERY_START_RATE and grows HOOKSTREAM_RECOVERY_GROWTH-fold every "
        "HOOKSTREAM_RECOVERY_STEP while answers stay healthy; a 429, 5xx, timeout or slowdown "
        "halves it (F4).",
    )
    recovery_start_rate: float = Field(
        5.0,
        gt=0,
        le=100000,
        description="Requests per second the fleet sends a recovered origin at first.",
    )
    recovery_step: Annotated[float, NoDecode] = Field(
        1.0, description="How long the ramp holds each rate before growing it (default 1s)."
    )
    recovery_growth: float = Field(
        3.0,
        gt=1,
        le=16,
        description="The ramp's rate is multiplied by this each step: 3 takes 5/s to 1,215/s "
        "in 5 steps, 2 (TCP's doubling) in 8.",
    )
    recovery_max_rate: float = Field(
        10000.0,
        gt=0,
        le=1000000,
        description="The ramp ends at this fleet rate (requests per second); past it only the "
        "subscription's own limits and the per-origin in-flight cap apply.",
    )
    recovery_probe_bound: Annotated[float, NoDecode] = Field(
        60.0,
        description="While deliveries wait for an open origin, the cooldown between half-open "
        "probes stops doubling at this (default 60s); with nothing waiting it grows to "
        "HOOKSTREAM_BREAKER_MAX_COOLDOWN.",
    )

    @field_validator("destination_allowlist", mode="before")
    @classmethod
    def _split_cidrs(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    _durations_check = field_validator("retry_schedule", mode="before")(_durations)
    _duration_check = field_validator(*DURATION_FIELDS, mode="before")(_duration)

    @field_validator("retry_schedule")
    @classmethod
    def _schedule_sane(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        if not value:
            raise ValueError("needs at least one delay")
        if list(value) != sorted(value):
            raise ValueError("delays must not decrease")
        if len(set(value)) != len(value):
            raise ValueError("each delay must be distinct (one topic per delay)")
        return value

    @model_validator(mode="after")
    def _bounds(self) -> Settings:
        if not 0 < self.default_timeout <= 30:
            raise ValueError("default_timeout must be within (0, 30s]")
        if self.retry_window < self.retry_schedule[0]:
            raise ValueError("retry_window must be at least the first retry delay")
        if not 60 <= self.portal_link_ttl <= 30 * 86400:
            raise ValueError("portal_link_ttl must be within [1m, 30d]")
        if self.breaker_max_cooldown < self.breaker_cooldown:
            raise ValueError("breaker_max_cooldown must be at least breaker_cooldown")
        if self.recovery_max_rate < self.recovery_start_rate:
            raise ValueError("recovery_max_rate must be at least recovery_start_rate")
        if not 0 <= self.reenable_settle <= 300:
            raise ValueError("reenable_settle must be within [0, 5m]")
        if self.recovery_step <= 0 or self.recovery_probe_bound <= 0:
            raise ValueError("recovery_step and recovery_probe_bound must be above zero")
        return self

    # --- Derived names ------------------------------------------------------------------------
    def topic(self, name: str) -> str:
        """The full topic name for a logical topic such as ``routed`` or ``retry.1m``."""
        return f"{self.topic_prefix}{name}"

    @property
    def kafka_dir(self) -> Path:
        return self.data_dir / "kafka"

    @property
    def tables_dir(self) -> Path:
        return self.data_dir / "tables"


def load_settings(**overrides: Any) -> Settings:
    """Build the settings once, at an entry point. Raises ConfigError naming the bad setting."""
    try:
        return Settings(**overrides)
    except PydanticValidationError as exc:
        first = exc.errors()[0]
        name = ".".join(str(part) for part in first["loc"]) or "settings"
        raise ConfigError(f"HOOKSTREAM_{name.upper()}", first["msg"]) from exc
