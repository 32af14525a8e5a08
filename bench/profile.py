"""Sampling a running worker with py-spy, and summarising what it saw.

py-spy writes collapsed stacks (``--format raw --threads``): one line per distinct stack, the
thread first, then the frames from the outermost in, then the sample count. `summarise` splits
the samples by thread and, for the event loop thread where hookstream's Python runs, lists the
functions with the most *self* samples (the frame on top) and the most *total* samples
(anywhere on the stack). Line numbers are dropped so a function is counted once however many of
its lines were sampled. Samples of a thread blocked in C (a Kafka poll, a queue wait) can still
count as non-idle on a busy machine: read the event loop tables, not the thread totals.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

_LINE_NO = re.compile(r":\d+\)$")


def py_spy() -> str | None:
    beside_python = Path(sys.executable).with_name("py-spy")
    if beside_python.exists():
        return str(beside_python)
    return shutil.which("py-spy")


def start_recording(pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes] | None:
    """Start ``py-spy record`` on ``pid`` for ``seconds``; None when py-spy is not installed."""
    binary = py_spy()
    if binary is None:
        return None
    command = [binary, "record", "--pid", str(pid), "--duration", str(max(1, int(seconds)))]
    command += [
        "--rate",
        "100",
        "--nonblocking",
        "--threads",
        "--format",
        "raw",
        "--output",
        str(out),
    ]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _frame(frame: str) -> str:
    return _LINE_NO.sub(")", frame.strip())


def _thread_group(frame: str) -> str:
    """``thread (1234): asyncio_3`` -> ``asyncio_*``: executor threads are one group."""
    name = frame.partition(": ")[2] or frame
    return re.sub(r"\d+$", "*", name)


def _table(counts: Counter[str], samples: int, top: int) -> list[dict[str, Any]]:
    return [
        {"function": name, "samples": n, "percent": round(100.0 * n / max(samples, 1), 1)}
        for name, n in counts.most_common(top)
    ]


def summarise(collapsed: Path, top: int = 15) -> dict[str, Any]:
    """Samples per thread, and the event loop thread's top functions by self and total time.

    Percentages are of the event loop thread's non-idle samples. The total table leaves out
    the frames found on nearly every stack (the entry point and the loop itself).
    """
    threads: Counter[str] = Counter()
    self_counts: Counter[str] = Counter()
    total_counts: Counter[str] = Counter()
    main = 0
    for line in collapsed.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        thread, *frames = stack.split(";")
        group = _thread_group(thread)
        threads[group] += count
        if group != "MainThread" or not frames:
            continue
        main += count
        names = [_frame(f) for f in frames]
        self_counts[names[-1]] += count
        for name in set(names):
            total_counts[name] += count
    for name, n in list(total_counts.items()):
        if n >= 0.9 * main:
            del total_counts[name]
    everything = sum(threads.values())
    return {
        "samples": everything,
        "event_loop_samples": main,
        "threads": _table(threads, everything, top),
        "by_self": _table(self_counts, main, top),
        "by_total": _table(total_counts, main, top),
        "hookstream_by_total": _table(
            Counter({k: v for k, v in total_counts.items() if "(streams/" in k}), main, top
        ),
    }


def markdown(summary: dict[str, Any]) -> str:
    lines = [
        f"{summary['samples']} non-idle samples at 100 Hz, {summary['event_loop_samples']} of "
        "them on the event loop thread (MainThread).",
        "",
        "| % of all samples | thread |",
        "|---:|---|",
    ]
    lines += [f"| {row['percent']:.1f} | {row['function']} |" for row in summary["threads"]]
    lines.append("")
    tables = (
        ("by_self", "self"),
        ("by_total", "total"),
        ("hookstream_by_total", "total, hookstream code"),
    )
    for key, title in tables:
        lines += [f"| % {title} (event loop) | function |", "|---:|---|"]
        lines += [f"| {row['percent']:.1f} | `{row['function']}` |" for row in summary[key]]
        lines.append("")
    return "\n".join(lines)


# --- the worker's own count of its event loop's CPU by task (HOOKSTREAM_TASK_CPU) -------------

TASK_CPU_METRICS = ("hookstream_task_cpu_seconds_total", "hookstream_event_loop_cpu_seconds_total")
#: The loop thread's whole CPU time, and the part of it no task step ran (callbacks, timers,
#: tasks started before the lanes): keys beside the task names.
LOOP = "(event loop, all)"
UNTIMED = "(no task: callbacks, timers, earlier tasks)"


def task_cpu(samples: dict[str, float], before: dict[str, float] | None = None) -> dict[str, float]:
    """CPU seconds per task name and the loop's (`LOOP`) from scraped samples, less ``before``."""
    found: dict[str, float] = {}
    for key, value in samples.items():
        if key.startswith("hookstream_task_cpu_seconds_total{"):
            found[key.split('task="', 1)[1].rsplit('"', 1)[0]] = value
        elif key.startswith("hookstream_event_loop_cpu_seconds_total"):
            found[LOOP] = value
    before = before or {}
    return {name: seconds - before.get(name, 0.0) for name, seconds in found.items()}


def per_delivery(cpu: dict[str, float], delivered: int) -> dict[str, float]:
    """µs of the event loop's CPU per delivery by task, largest first, then `UNTIMED` and
    `LOOP`; empty without deliveries or without the worker's count."""
    if not delivered or LOOP not in cpu:
        return {}
    tasks = sorted(((n, s) for n, s in cpu.items() if n != LOOP), key=lambda item: -item[1])
    figures = {name: seconds * 1e6 / delivered for name, seconds in tasks}
    figures[UNTIMED] = (cpu[LOOP] - sum(s for _, s in tasks)) * 1e6 / delivered
    figures[LOOP] = cpu[LOOP] * 1e6 / delivered
    return figures


def task_markdown(by_task: dict[str, float], least_us: float = 0.5) -> str:
    """`per_delivery`'s figures of at least ``least_us`` as a table."""
    if not by_task:
        return "the worker did not count its event loop's CPU by task"
    lines = ["| µs of the event loop per delivery | task |", "|---:|---|"]
    lines += [f"| {us:.1f} | `{name}` |" for name, us in by_task.items() if us >= least_us]
    return "\n".join(lines)
