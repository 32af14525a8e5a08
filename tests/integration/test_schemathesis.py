"""Property-based requests against the live admin API find no server error (SPEC S2, Q5).

schemathesis reads /openapi.json from a real worker and sends generated requests to every
operation with the operator key, a bounded number of examples each, checking that no answer is
a 5xx. Operations that send real HTTP or only answer 501 for now are left out.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_api import ADMIN, ApiWorker, api_worker

pytestmark = pytest.mark.integration
__all__ = ["api_worker"]

MAX_EXAMPLES = 15
NOT_FUZZED = (
    "test_subscription",
    "subscription_health",
    "health_summary",
    "reenable_subscription",
    "replay_subscription",
    "replay_delivery",
    "replay_dead_letters",
)


# One worker: with two, schemathesis generates from two threads, and CPython 3.11.7's
# ast.parse is not safe across threads ("AST constructor recursion depth mismatch",
# python/cpython#106905, fixed in later 3.11 releases). One worker takes about 110 s here.
@pytest.mark.timeout(330)
def test_no_server_errors(api_worker: ApiWorker, tmp_path: Path) -> None:
    """S2: every operation answers generated input with a 4xx or its documented status."""
    st = shutil.which("st", path=str(Path(sys.executable).parent)) or "st"
    command = [
        st, "run", f"{api_worker.base_url}/openapi.json",
        "--header", f"Authorization: Bearer {ADMIN}",
        "--checks", "not_a_server_error",
        "--max-examples", str(MAX_EXAMPLES),
        "--workers", "1",
        # real HTTP sends, covered in test_api; and the documented 501s of features to come
        *(f"--exclude-operation-id={op}" for op in NOT_FUZZED),
        "--request-timeout", "20",
    ]  # fmt: skip
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "", "NO_COLOR": "1"}
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path, check=False
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
