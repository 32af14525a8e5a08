"""A worker-like child process for the crash test: the delivery lanes and the backfill runner.

Run as ``python -m tests.integration.recovery_child`` with the test's HOOKSTREAM_* environment;
it runs until killed. (Once the lead registers `backfill_component` in the worker, the crash
test can use `tests.integration.workers.WorkerProcess` instead.)
"""

from __future__ import annotations

import asyncio

from streams.agents.ledger import standalone
from streams.lanes.backfill import BackfillRunner
from streams.lanes.pipeline import Pipeline
from streams.settings import load_settings


async def main() -> None:
    settings = load_settings()
    pipeline = Pipeline(settings)
    await pipeline.start()
    await pipeline.wait_ready(60)
    print("ready", flush=True)
    ledger = standalone(settings, settings.data_dir / "ledger")
    letters = ledger
    await BackfillRunner(settings, pipeline.registry, letters).run(asyncio.Event())


if __name__ == "__main__":
    asyncio.run(main())
