"""The README's curl examples run as written against a real worker (STYLE practice 12)."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.conftest import REPO
from tests.integration.test_api import ADMIN, ApiWorker, api_worker

pytestmark = pytest.mark.integration
__all__ = ["api_worker"]

_MARK = "<!-- tests/integration/test_readme_curl.py runs the next block against a real worker -->"
_BLOCK = re.compile(r"^```bash\n(.*?)^```", re.DOTALL | re.MULTILINE)


def examples() -> str:
    readme = (REPO / "README.md").read_text()
    assert _MARK in readme, "the README's API examples lost their marker"
    block = _BLOCK.search(readme, readme.index(_MARK))
    assert block is not None, "no ```bash block after the marker"
    return str(block.group(1))


def test_docs_curl_examples_run(api_worker: ApiWorker) -> None:
    """S2: every example succeeds (curl --fail-with-body, bash -e)."""
    env = {**os.environ, "HOOKSTREAM_URL": api_worker.base_url, "HOOKSTREAM_ADMIN_TOKEN": ADMIN}
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", examples()],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.count('"id"') >= 5
