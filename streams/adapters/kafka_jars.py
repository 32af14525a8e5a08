"""The local broker's jars and the JVM tools run on them (SPEC X2), shared by `LocalKafka` and
`LocalCluster`.

Maven resolves Apache Kafka's runtime jars, as deploy/kafka/pom.xml lists them, from Maven
Central once: into ``<jars>.partial``, renamed into place only when it holds jars and a marker
with the pom's SHA-256, so an interrupted download is never used and a changed pom resolves
again. `run_tool` runs Maven or one of Kafka's tools to its end and turns any failure (missing,
timed out, a non-zero exit) into a one-line `LocalKafkaError` quoting the tool's first error.

It is apart from `streams.adapters.local_kafka` because none of it needs a broker: what is on
disk and how a tool is run, versus a broker process's start, readiness and stop.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from streams.errors import LocalKafkaError

JARS_MARKER = ".hookstream-resolved"


def pom_digest(pom: Path) -> str:
    return hashlib.sha256(pom.read_bytes()).hexdigest()


def jars_complete(jars_dir: Path, pom: Path) -> bool:
    """True when ``jars_dir`` holds a finished resolution of exactly this pom."""
    marker = jars_dir / JARS_MARKER
    try:
        return marker.read_text().strip() == pom_digest(pom)
    except FileNotFoundError:
        return False


def default_pom_path() -> Path:
    """deploy/kafka/pom.xml of the source checkout hookstream is installed from (editable)."""
    return Path(__file__).resolve().parents[2] / "deploy" / "kafka" / "pom.xml"


def resolve_jars(pom_path: Path, jars_dir: Path, say: Callable[[str], None]) -> bool:
    """Copy the pom's jars from Maven into ``jars_dir`` unless done; True if it ran Maven."""
    if jars_complete(jars_dir, pom_path):
        return False
    mvn = require_tool("mvn")
    say(f"resolving Kafka's jars from Maven Central into {jars_dir} (once)")
    partial = jars_dir.with_name(jars_dir.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    command = [mvn, "-q", "-B", "-f", str(pom_path), "dependency:copy-dependencies"]
    command += [f"-DoutputDirectory={partial}", "-DincludeScope=runtime"]
    output = run_tool(command, "mvn dependency:copy-dependencies", timeout=900.0)
    if not any(partial.glob("*.jar")):
        raise LocalKafkaError(f"mvn copied no jars into {partial}: {_first_error(output)}")
    (partial / JARS_MARKER).write_text(pom_digest(pom_path) + "\n")
    shutil.rmtree(jars_dir, ignore_errors=True)
    partial.rename(jars_dir)
    return True


def require_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise LocalKafkaError(f"`{name}` is not on PATH; the local Kafka needs Java 17+ and Maven")
    return path


def run_tool(command: list[str], what: str, timeout: float) -> str:
    """Run ``command`` to its end and return its output; any failure is a `LocalKafkaError`."""
    try:
        done = subprocess.run(  # noqa: S603  (fixed argv, no shell)
            command, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise LocalKafkaError(f"{what} did not finish within {timeout:.0f}s") from exc
    except OSError as exc:
        raise LocalKafkaError(f"{what} could not run: {exc}") from exc
    output = done.stdout + done.stderr
    if done.returncode != 0:
        raise LocalKafkaError(f"{what} failed (exit {done.returncode}): {_first_error(output)}")
    return output


def _first_error(output: str) -> str:
    """The first Maven ``[ERROR]`` line of ``output``, else its last line: the one-line cause."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("[ERROR]")]
    if errors:
        return errors[0][:300]
    return lines[-1][:300] if lines else "(no output)"
