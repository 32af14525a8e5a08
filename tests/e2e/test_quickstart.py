"""The README's quickstart runs as written, pasted into a fresh shell (STYLE practice 12, X2).

It starts its own broker: the block ends with `hookstream kafka stop`, so it must not share the
broker of the rest of the test session. The test gives it a data dir and ports of its own
through the environment, which is how a reader's shell would differ from another's.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from streams.settings import load_settings
from tests.conftest import REPO

pytestmark = pytest.mark.integration

_MARK = "<!-- tests/e2e/test_quickstart.py runs the next block in a fresh shell -->"
_BLOCK = re.compile(r"^```bash\n(.*?)^```", re.DOTALL | re.MULTILINE)


def quickstart() -> str:
    readme = (REPO / "README.md").read_text()
    assert _MARK in readme, "the README's quickstart lost its marker"
    block = _BLOCK.search(readme, readme.index(_MARK))
    assert block is not None, "no ```bash block after the marker"
    return str(block.group(1))


def _free_port_pair() -> int:
    """A port whose next port is free too (the local broker's controller listens there)."""
    for _ in range(50):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.timeout(420)
def test_readme_quickstart_runs_as_written(tmp_path: Path) -> None:
    """X2: the quickstart delivers one signed webhook to the local receiver and lists it."""
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", 9000)) != 0, "port 9000 is taken; the README uses it"
    env = {key: value for key, value in os.environ.items() if not key.startswith("HOOKSTREAM_")}
    env.update(
        HOOKSTREAM_DATA_DIR=str(tmp_path / "data"),
        HOOKSTREAM_KAFKA_BOOTSTRAP=f"127.0.0.1:{_free_port_pair()}",
        HOOKSTREAM_WEB_PORT=str(_free_port()),
        HOOKSTREAM_TOPIC_PREFIX=f"qs{tmp_path.name[-6:].lower()}.",
    )
    script = quickstart().replace("receiver.log", str(tmp_path / "receiver.log"))
    script = script.replace("worker.log", str(tmp_path / "worker.log"))
    script = script.replace("sub.json", str(tmp_path / "sub.json"))
    jars = load_settings().kafka_dir / "jars"  # the session's resolved jars: no second download
    if jars.is_dir():
        shutil.copytree(jars, tmp_path / "data" / "kafka" / "jars")
    cleanup = "trap 'kill $(jobs -p) 2>/dev/null || true; .venv/bin/hookstream kafka stop' EXIT"
    done = subprocess.run(
        ["bash", "-euxo", "pipefail", "-c", f"{cleanup}\n{script}"],
        cwd=REPO, capture_output=True, text=True, env=env, timeout=400, check=False,
    )  # fmt: skip
    log = (tmp_path / "worker.log").read_text() if (tmp_path / "worker.log").exists() else ""
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:] + log[-2000:]
    assert re.search(
        r"POST /hook webhook-id=\S+ type=invoice\.paid attempt=1 .*-> 200", done.stdout
    )
    assert "success" in done.stdout, done.stdout[-2000:]
