"""Checks of hookstream's deployment files that no off-the-shelf linter makes (deploy/validate.sh).

    python deploy/checks.py compose docker-compose.yml
    python deploy/checks.py dockerfile Dockerfile
    python deploy/checks.py rendered production < rendered.yaml
    python deploy/checks.py settings < rendered.yaml    # needs hookstream installed
    python deploy/checks.py docs docs/capacity.md

Each prints what it checked and exits non-zero naming every problem it found.
"""

from __future__ import annotations

import fnmatch
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent

#: Directories the compose stack mounts that other work fills in (alert rules, dashboards). They
#: may not exist yet: Docker then creates them empty, and Prometheus/Grafana load nothing from
#: them. Reported, never an error; once they exist they are checked like every other mount.
PENDING_DIRS = {"deploy/prometheus/rules", "dashboards"}


class Problems:
    def __init__(self) -> None:
        self.items: list[str] = []

    def check(self, ok: bool, message: str) -> None:
        if not ok:
            self.items.append(message)

    def finish(self, what: str) -> int:
        for item in self.items:
            print(f"  FAIL {what}: {item}", file=sys.stderr)
        if not self.items:
            print(f"  ok   {what}")
        return 1 if self.items else 0


def _service_env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def _bind_sources(service: dict[str, Any]) -> Iterator[str]:
    for volume in service.get("volumes") or []:
        source = volume.get("source") if isinstance(volume, dict) else volume.split(":")[0]
        if isinstance(source, str) and source.startswith((".", "/")) and ":" in str(volume):
            yield source


def check_compose(path: Path) -> int:
    """Every file the stack references exists; the stack has the shape SPEC X2 asks for."""
    doc = yaml.safe_load(path.read_text())
    services: dict[str, Any] = doc["services"]
    p = Problems()
    for name, service in services.items():
        build = service.get("build")
        if build is not None:
            context = build if isinstance(build, str) else build.get("context", ".")
            dockerfile = "Dockerfile"
            if isinstance(build, dict):
                dockerfile = build.get("dockerfile", dockerfile)
            p.check((ROOT / context / dockerfile).is_file(), f"{name}: no {context}/{dockerfile}")
        for source in _bind_sources(service):
            rel = Path(source).resolve().relative_to(ROOT).as_posix()
            if rel in PENDING_DIRS and not (ROOT / rel).exists():
                print(f"  note compose: {name} mounts {rel}/, which does not exist yet")
                continue
            p.check((ROOT / rel).exists(), f"{name}: mounts {source}, which does not exist")
        image = service.get("image", "")
        p.check(":" in image and not image.endswith(":latest"), f"{name}: image not pinned")
        if "healthcheck" in service:
            p.check("test" in service["healthcheck"], f"{name}: healthcheck without a test")

    kafka = services["kafka"]
    p.check(
        re.fullmatch(r"apache/kafka:4\.1\.\d+", kafka["image"]) is not None,
        "kafka: image must be apache/kafka:4.1.x",
    )
    kenv = _service_env(kafka)
    p.check(kenv.get("KAFKA_AUTO_CREATE_TOPICS_ENABLE") == "false", "kafka: auto-create not off")
    p.check("controller" in kenv.get("KAFKA_PROCESS_ROLES", ""), "kafka: not a KRaft controller")
    p.check(
        "PLAINTEXT://kafka:9092" in kenv.get("KAFKA_ADVERTISED_LISTENERS", ""),
        "kafka: kafka:9092 not advertised to the compose network",
    )

    topics = services["topics"]
    p.check(topics.get("command") == ["topics", "apply"], "topics: must run `topics apply`")
    p.check(
        topics.get("depends_on", {}).get("kafka", {}).get("condition") == "service_healthy",
        "topics: must wait for a healthy kafka",
    )

    worker = services["worker"]
    p.check(worker.get("deploy", {}).get("replicas", 1) >= 2, "worker: fewer than 2 replicas")
    p.check(
        worker.get("depends_on", {}).get("topics", {}).get("condition")
        == "service_completed_successfully",
        "worker: must wait for topics to complete",
    )
    p.check(
        "/healthz" in " ".join(worker.get("healthcheck", {}).get("test", [])),
        "worker: healthcheck must probe /healthz",
    )
    for name in ("topics", "worker"):
        env = _service_env(services[name])
        p.check(env.get("HOOKSTREAM_KAFKA_BOOTSTRAP") == "kafka:9092", f"{name}: bootstrap")
        # containers must listen beyond their own loopback for probes and Prometheus
        p.check(env.get("HOOKSTREAM_WEB_HOST") == "0.0.0.0", f"{name}: web host")  # noqa: S104
        p.check(bool(env.get("HOOKSTREAM_DATA_DIR")), f"{name}: data dir")

    prom_cfg = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    mounts = " ".join(str(v) for v in services["prometheus"].get("volumes", []))
    rules_dir = "/etc/prometheus/rules"
    for rule_glob in prom_cfg.get("rule_files", []):
        p.check(
            rule_glob.startswith(f"{rules_dir}/") and rules_dir in mounts,
            f"prometheus.yml: rule_files {rule_glob} is outside the mounted rules dir",
        )
    jobs = {job["job_name"]: job for job in prom_cfg["scrape_configs"]}
    sd = jobs.get("hookstream", {}).get("dns_sd_configs", [{}])[0]
    p.check(
        sd.get("names") == ["worker"] and sd.get("port") == 6066,
        "prometheus.yml: the hookstream job must discover every worker replica on 6066",
    )
    return p.finish(f"compose {path.name}")


def _dockerignore_allows(source: str) -> bool:
    rules = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    allowed = True
    for rule in rules:
        if not rule or rule.startswith("#"):
            continue
        negate = rule.startswith("!")
        pattern = rule.lstrip("!").rstrip("/")
        if fnmatch.fnmatch(source.rstrip("/"), pattern):
            allowed = negate
    return allowed


def check_dockerfile(path: Path) -> int:
    """COPY sources exist and survive .dockerignore; the image runs as SPEC X2/X3 expect."""
    text = path.read_text()
    p = Problems()
    for line in re.findall(r"^COPY\s+(.+)$", text, flags=re.MULTILINE):
        parts = [part for part in line.split() if not part.startswith("--")]
        for source in parts[:-1]:
            p.check((ROOT / source).exists(), f"COPY {source}: not in the repo")
            p.check(_dockerignore_allows(source), f"COPY {source}: excluded by .dockerignore")
    p.check(
        re.search(r"^FROM python:3\.11\.\d+-slim", text, re.MULTILINE) is not None,
        "base image must be a pinned python:3.11.x-slim",
    )
    p.check(
        re.search(r"^USER [1-9]\d*:\d+$", text, re.MULTILINE) is not None,
        "must run as a numeric non-root user",
    )
    p.check(
        'ENTRYPOINT ["hookstream"]' in text and 'CMD ["worker"]' in text,
        "entrypoint hookstream, default command worker",
    )
    copies_topics = "COPY pyproject.toml README.md topics.yaml" in text
    p.check(
        "HOOKSTREAM_TOPICS_FILE=" in text and copies_topics,
        "topics.yaml must be in the image and HOOKSTREAM_TOPICS_FILE set",
    )
    p.check("/healthz" in text and "HEALTHCHECK" in text, "HEALTHCHECK on /healthz")
    p.check("[dev]" not in text, "the image installs no dev extras")
    return p.finish(f"dockerfile {path.name}")


def _probe_path(container: dict[str, Any], probe: str) -> str | None:
    path = container.get(probe, {}).get("httpGet", {}).get("path")
    return str(path) if path is not None else None


def _mebibytes(quantity: str) -> float:
    units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024}
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi)", quantity)
    if match is None:
        raise ValueError(f"unexpected memory quantity {quantity}")
    return float(match.group(1)) * units[match.group(2)]


def check_rendered(profile: str, text: str) -> int:
    """The rendered chart holds what SPEC X3 lists, for the `default` or `production` values."""
    docs = [doc for doc in yaml.safe_load_all(text) if doc]
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for doc in docs:
        by_kind.setdefault(doc["kind"], []).append(doc)
    p = Problems()
    for kind in (
        "StatefulSet",
        "ConfigMap",
        "Secret",
        "Service",
        "ServiceMonitor",
        "PodDisruptionBudget",
        "Job",
    ):
        if profile == "production" and kind == "Secret":
            p.check(kind not in by_kind, "production uses existingSecret: no chart Secret")
            continue
        p.check(kind in by_kind, f"no {kind} rendered")
    (sts,) = by_kind["StatefulSet"]
    spec = sts["spec"]
    (container,) = spec["template"]["spec"]["containers"]
    p.check(_probe_path(container, "livenessProbe") == "/healthz", "liveness must be /healthz")
    p.check(_probe_path(container, "readinessProbe") == "/readyz", "readiness must be /readyz")
    p.check(bool(spec.get("volumeClaimTemplates")), "workers need a volumeClaimTemplate")
    limit = _mebibytes(container["resources"]["limits"]["memory"])
    p.check(limit >= 400, f"memory limit {limit} MiB is under the 400 MiB RSS target (SPEC P6)")
    env = {item["name"]: item for item in container["env"]}
    for name in (
        "HOOKSTREAM_KAFKA_BOOTSTRAP",
        "HOOKSTREAM_DATA_DIR",
        "HOOKSTREAM_TOPICS_FILE",
        "HOOKSTREAM_ADMIN_TOKEN",
        "HOOKSTREAM_SECRET_KEY",
        "HOOKSTREAM_SMTP_URL",
    ):
        p.check(name in env, f"worker env lacks {name}")
    for name in ("HOOKSTREAM_ADMIN_TOKEN", "HOOKSTREAM_SECRET_KEY", "HOOKSTREAM_SMTP_URL"):
        source = env.get(name, {}).get("valueFrom", {})
        p.check("secretKeyRef" in source, f"{name} not from a Secret")
    services = {svc["metadata"]["name"]: svc["spec"] for svc in by_kind["Service"]}
    p.check(
        services.get(spec["serviceName"], {}).get("clusterIP") == "None",
        "serviceName must be a headless Service",
    )
    jobs = by_kind.get("Job", [])
    p.check(
        any(
            job["spec"]["template"]["spec"]["containers"][0]["args"] == ["topics", "apply"]
            and "pre-install" in job["metadata"]["annotations"]["helm.sh/hook"]
            and "pre-upgrade" in job["metadata"]["annotations"]["helm.sh/hook"]
            for job in jobs
        ),
        "topics apply must run as a pre-install/pre-upgrade hook Job",
    )
    topics_docs = [cm["data"].get("topics.yaml") for cm in by_kind["ConfigMap"]]
    topics_docs = [doc for doc in topics_docs if doc]
    p.check(
        len(topics_docs) == 2 and topics_docs[0] == topics_docs[1],
        "the workers' and the hook's topics.yaml must be the same",
    )
    topics = yaml.safe_load(topics_docs[0]) if topics_docs else {}
    if profile == "production":
        p.check(spec.get("replicas") is None, "autoscaled workers must leave replicas to KEDA")
        p.check("ScaledObject" in by_kind, "production scales on consumer lag with KEDA")
        p.check(topics["defaults"]["replication_factor"] == 3, "production replication factor 3")
        p.check(topics["defaults"]["config"]["min.insync.replicas"] == 2, "production min ISR 2")
        (scaled,) = by_kind.get("ScaledObject", [{}])
        trigger = scaled.get("spec", {}).get("triggers", [{}])[0]
        p.check(trigger.get("type") == "kafka", "the ScaledObject trigger must be kafka lag")
        p.check(
            scaled["spec"]["maxReplicaCount"] <= topics["defaults"]["partitions"],
            "maxReplicaCount above the partition count would only add idle workers",
        )
    else:
        p.check(spec.get("replicas") == 2, "default: 2 workers")
        p.check(
            "ScaledObject" not in by_kind and "HorizontalPodAutoscaler" not in by_kind,
            "default: no autoscaler",
        )
        repo_topics = yaml.safe_load((ROOT / "topics.yaml").read_text())
        p.check(topics == repo_topics, "default values must ship topics.yaml unchanged")
    return p.finish(f"rendered chart ({profile})")


def check_settings(text: str) -> int:
    """The worker's rendered environment and topics.yaml load in hookstream itself (SPEC X1, X5).

    Runs the real `load_settings` and `load_topology` on exactly what the StatefulSet's container
    would see, so a setting or topics override that hookstream rejects fails here, not at
    start-up in a cluster.
    """
    import tempfile

    from streams.adapters.kafka_admin import load_topology
    from streams.errors import HookstreamError
    from streams.settings import Settings, load_settings

    docs = [doc for doc in yaml.safe_load_all(text) if doc]
    maps = {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "ConfigMap"}
    (sts,) = [d for d in docs if d["kind"] == "StatefulSet"]
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    p = Problems()
    with tempfile.TemporaryDirectory() as tmp:
        env: dict[str, str] = {}
        for item in container["env"]:
            ref = item.get("valueFrom", {}).get("configMapKeyRef")
            if ref is not None:
                env[item["name"]] = maps[ref["name"]][ref["key"]]
            elif "value" in item:
                env[item["name"]] = item["value"]
        topics = Path(tmp) / "topics.yaml"
        topics.write_text(maps[sts["metadata"]["name"]]["topics.yaml"])
        env["HOOKSTREAM_TOPICS_FILE"] = str(topics)
        env["HOOKSTREAM_DATA_DIR"] = tmp
        fields: dict[str, Any] = {
            name.removeprefix("HOOKSTREAM_").lower(): value for name, value in env.items()
        }
        for name in fields:  # Settings ignores unknown names: catch typos here
            p.check(name in Settings.model_fields, f"HOOKSTREAM_{name.upper()} is no setting")
        try:
            settings = load_settings(**fields)
            topology = load_topology(settings)
        except (HookstreamError, ValueError) as exc:
            p.check(False, f"hookstream refuses the rendered settings: {exc}")
        else:
            count = len(topology.topics)
            print(f"  ok   {count} topics, prefix {settings.topic_prefix!r}")
    return p.finish("rendered settings and topics.yaml load in hookstream")


def check_docs(path: Path) -> int:
    """The capacity plan's partition table lists every topic of topics.yaml with its count."""
    text = path.read_text()
    doc = yaml.safe_load((ROOT / "topics.yaml").read_text())
    default = doc["defaults"]["partitions"]
    p = Problems()
    for name, topic in doc["topics"].items():
        partitions = topic.get("partitions", default)
        if name == "retry":  # a template: one row names every tier
            tiers = re.search(rf"\| `retry\.[^|]*\| {partitions}\b[^|]*each \|", text)
            p.check(tiers is not None, f"retry tiers with {partitions} partitions")
            continue
        row = re.search(rf"\| `{re.escape(name)}` \| {partitions}\b", text)
        p.check(row is not None, f"no row `{name}` | {partitions}")
    return p.finish(f"docs {path.name} partition table")


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "compose":
        return check_compose(Path(argv[1]))
    if len(argv) >= 2 and argv[0] == "dockerfile":
        return check_dockerfile(Path(argv[1]))
    if len(argv) >= 2 and argv[0] == "docs":
        return check_docs(Path(argv[1]))
    if argv[:1] == ["settings"]:
        return check_settings(sys.stdin.read())
    if len(argv) >= 2 and argv[0] == "rendered":
        return check_rendered(argv[1], sys.stdin.read())
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
