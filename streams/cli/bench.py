"""`hookstream bench`: run the end-to-end benchmarks of a hookstream checkout.

The benchmarks live in the repository's ``bench/`` directory, not in the installed package: they
need nginx, py-spy and a source tree whose commit they record. This command finds the checkout
(the current directory or the one an editable install points at) and runs
``python -m bench.e2e`` there with the same interpreter; options after ``--`` go through as
they are, for example ``hookstream bench throughput -- --events 100000 --profile``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click

SCENARIOS = ("throughput", "latency", "memory", "fanout", "smoke")


def find_checkout() -> Path | None:
    """The repository root that holds ``bench/e2e.py``, or None."""
    package_root = Path(__file__).resolve().parents[2]
    for base in (Path.cwd(), *Path.cwd().parents, package_root):
        if (base / "bench" / "e2e.py").is_file() and (base / "streams").is_dir():
            return base
    return None


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("scenario", type=click.Choice(SCENARIOS))
@click.option("--runs", type=click.IntRange(1, 50), default=3, show_default=True)
@click.option("--seconds", type=click.FloatRange(min=1), help="Measured seconds (latency/memory).")
@click.option(
    "--no-docs",
    is_flag=True,
    help="Do not record the figures in bench/results/summary.json and docs/benchmarks.md.",
)
@click.argument("extra", nargs=-1, type=click.UNPROCESSED)
def bench(
    scenario: str, runs: int, seconds: float | None, no_docs: bool, extra: tuple[str, ...]
) -> None:
    """Run one benchmark SCENARIO against the real broker, one worker and nginx.

    Results go to bench/results/<scenario>-<timestamp>.json and, unless --no-docs, into
    bench/results/summary.json and the figures of docs/benchmarks.md. Needs a source checkout
    of hookstream (the bench/ directory).
    """
    root = find_checkout()
    if root is None:
        raise click.ClickException(
            "bench/ not found: run `hookstream bench` from a hookstream source checkout"
        )
    argv = [sys.executable, "-m", "bench.e2e", "--scenario", scenario, "--runs", str(runs)]
    if seconds is not None:
        argv += ["--seconds", str(seconds)]
    if no_docs:
        argv.append("--no-docs")
    argv += list(extra)
    code = subprocess.run(argv, cwd=root, check=False).returncode  # noqa: S603 (fixed argv)
    if code:
        raise click.exceptions.Exit(code)
