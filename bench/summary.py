"""The current figure of every measured requirement: ``bench/results/summary.json``.

One entry per requirement id (P1, P2, F7, Q1, ...), each with its value and unit, the target,
whether it is met, the result file it comes from, the commit it was measured on and when.
This module is the one writer of that file: the benchmark tools call `record` when a run
produces a requirement's figure (`bench.figures` turns a result into an entry), and the
current-figures table of docs/benchmarks.md is generated from it.

    python -m bench.summary --show                  # the entries, as JSON
    python -m bench.summary --docs                  # regenerate the table in docs/benchmarks.md
    python -m bench.summary --from-results FILE...  # record the figures of existing result files
    python -m bench.summary --uncited               # result files nothing cites (to git rm)
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

REPO: Final = Path(__file__).resolve().parent.parent
SUMMARY: Final = REPO / "bench" / "results" / "summary.json"
DOCS: Final = REPO / "docs" / "benchmarks.md"
#: Where result files may live: what the summary cites stays in git, raw/ is ignored.
RESULT_ROOTS: Final = ("bench/results", "chaos/results")
BEGIN: Final = (
    "<!-- summary:begin: generated from bench/results/summary.json"
    " by python -m bench.summary --docs; do not edit -->"
)
END: Final = "<!-- summary:end -->"
#: A SPEC requirement id (P1, F7, Q1), optionally qualified (Q1-cluster).
ID_PATTERN: Final = re.compile(r"^[A-Z][0-9]{1,2}(-[a-z][a-z0-9]*)?$")
REQUIRED: Final = ("id", "value", "unit", "target", "met", "results_file", "commit", "date")
OPTIONAL: Final = ("note", "extra")
DATE_FORMAT: Final = "%Y-%m-%dT%H:%M:%SZ"


class SummaryError(ValueError):
    """An entry or a summary file that does not have the documented shape."""


def git_output(*args: str) -> str:
    try:
        done = subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10, check=False
        )
    except OSError:
        return ""
    return done.stdout.strip()


def current_commit() -> str:
    """HEAD's short hash, ``+dirty`` when tracked files have local changes; ``unknown``
    outside a git checkout."""
    commit = git_output("rev-parse", "--short=12", "HEAD")
    if not commit:
        return "unknown"
    dirty = bool(git_output("status", "--porcelain", "--untracked-files=no"))
    return commit + ("+dirty" if dirty else "")


def now() -> str:
    return time.strftime(DATE_FORMAT, time.gmtime())


def repo_relative(path: Path | str) -> str:
    """``path`` as the summary cites it: relative to the repository, under a results root.
    A relative ``path`` is taken from the working directory when it exists there, else from
    the repository. Raises SummaryError for a file outside the repository's result folders."""
    given = Path(path)
    if not given.is_absolute():
        given = Path.cwd() / given if (Path.cwd() / given).exists() else REPO / given
    try:
        text = given.resolve().relative_to(REPO).as_posix()
    except ValueError:
        raise SummaryError(f"results_file {path} is outside the repository") from None
    _check_results_file(text)
    return text


def _check_results_file(text: str) -> None:
    parts = Path(text).parts
    if Path(text).is_absolute() or ".." in parts:
        raise SummaryError(f"results_file must be relative to the repository: {text!r}")
    if not text.startswith(tuple(f"{root}/" for root in RESULT_ROOTS)):
        raise SummaryError(f"results_file must be under {' or '.join(RESULT_ROOTS)}: {text!r}")
    if "raw" in parts:
        raise SummaryError(f"results_file must not be in an ignored raw/ directory: {text!r}")


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check_shape(entry: Mapping[str, Any]) -> None:
    missing = [name for name in REQUIRED if name not in entry]
    if missing:
        raise SummaryError(f"missing field(s): {', '.join(missing)}")
    unknown = sorted(set(entry) - set(REQUIRED) - set(OPTIONAL))
    if unknown:
        raise SummaryError(f"unknown field(s): {', '.join(unknown)}")
    if not isinstance(entry["id"], str) or not ID_PATTERN.match(entry["id"]):
        raise SummaryError(f"id: not a requirement id like P1 or Q1-cluster: {entry['id']!r}")
    if not _is_number(entry["value"]):
        raise SummaryError(f"value: a finite number is required, got {entry['value']!r}")
    if not isinstance(entry["met"], bool):
        raise SummaryError(f"met: true or false is required, got {entry['met']!r}")
    for name in ("unit", "target", "results_file", "commit", "date"):
        if not isinstance(entry[name], str) or not entry[name].strip():
            raise SummaryError(f"{name}: a non-empty string is required, got {entry[name]!r}")


def _check_optional(entry: Mapping[str, Any]) -> None:
    if "note" in entry and not isinstance(entry["note"], str):
        raise SummaryError("note: a string is required")
    extra = entry.get("extra", {})
    if not isinstance(extra, dict) or not all(isinstance(key, str) for key in extra):
        raise SummaryError("extra: an object of named figures is required")
    for key, value in extra.items():
        if value is not None and not isinstance(value, str | list) and not _is_number(value):
            raise SummaryError(f"extra.{key}: a number, string, list or null is required")


def validate(entry: Mapping[str, Any]) -> dict[str, Any]:
    """``entry`` checked against the documented shape; a SummaryError names the field."""
    _check_shape(entry)
    _check_results_file(entry["results_file"])
    try:
        time.strptime(entry["date"], DATE_FORMAT)
    except ValueError:
        raise SummaryError(f"date: {DATE_FORMAT} (UTC) is required: {entry['date']!r}") from None
    _check_optional(entry)
    try:
        json.dumps(dict(entry), allow_nan=False)
    except (TypeError, ValueError) as err:
        raise SummaryError(f"not JSON: {err}") from None
    return dict(entry)


def load(path: Path = SUMMARY) -> list[dict[str, Any]]:
    """Every entry of ``path``, sorted by id; an empty list when it does not exist yet."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    if not isinstance(data, list):
        raise SummaryError(f"{path}: a JSON list of entries is expected")
    entries = [validate(entry) for entry in data]
    ids = [entry["id"] for entry in entries]
    if len(set(ids)) != len(ids):
        raise SummaryError(f"{path}: an id appears twice")
    return sorted(entries, key=lambda entry: entry["id"])


def _write(entries: list[dict[str, Any]], path: Path) -> None:
    """Replace ``path`` in one step (a temporary file beside it, then a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(entries, indent=2, allow_nan=False) + "\n"
    handle, tmp = tempfile.mkstemp(prefix=".summary-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w") as out:
            out.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One writer at a time: two tools recording at once must not lose either entry."""
    lock_dir = path.parent / "raw"  # ignored by git, like everything else in raw/
    lock_dir.mkdir(parents=True, exist_ok=True)
    with (lock_dir / f".{path.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def record(
    entry_id: str,
    *,
    value: float,
    unit: str,
    target: str,
    met: bool,
    results_file: Path | str,
    extra: Mapping[str, Any] | None = None,
    note: str | None = None,
    commit: str | None = None,
    date: str | None = None,
    path: Path = SUMMARY,
) -> dict[str, Any]:
    """Set ``entry_id``'s entry in ``path`` (replacing the previous one) and return it.

    ``commit`` and ``date`` default to HEAD (``+dirty`` with local changes) and now (UTC).
    Nothing is written when the entry is invalid."""
    entry: dict[str, Any] = {
        "id": entry_id,
        "value": value,
        "unit": unit,
        "target": target,
        "met": met,
        "results_file": repo_relative(results_file),
        "commit": commit or current_commit(),
        "date": date or now(),
    }
    if extra:
        entry["extra"] = dict(extra)
    if note:
        entry["note"] = note
    entry = validate(entry)
    with _locked(path):
        others = [old for old in load(path) if old["id"] != entry_id]
        _write(sorted([*others, entry], key=lambda e: e["id"]), path)
    return entry


# --- docs ------------------------------------------------------------------------------------
def _figure(value: object) -> str:
    """A number as the docs table shows it: 3 significant figures or so, thousands separated."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if abs(value) < 10:
        return f"{value:.2f}"
    return f"{value:,.1f}" if abs(value) < 100 else f"{value:,.0f}"


_UNITS: Final = (("_per_s", "/s"), ("_us", " µs"), ("_ms", " ms"), ("_mib", " MiB"), ("_s", " s"))


def _extras(extra: Mapping[str, Any]) -> str:
    """``extra`` as text: ``p99_runs_ms: [1, 2]`` -> ``p99 runs 1.00 / 2.00 ms``."""
    shown = []
    for key, value in extra.items():
        name, unit = key, ""
        for suffix, text in _UNITS:
            if key.endswith(suffix):
                name, unit = key[: -len(suffix)], text
                break
        if isinstance(value, list):
            figure = " / ".join(_figure(v) for v in value)
        else:
            figure = "n/a" if value is None else _figure(value)
        shown.append(f"{name.replace('_', ' ')} {figure}{unit if value is not None else ''}")
    return "; ".join(shown)


def render(entries: list[dict[str, Any]]) -> str:
    """The current-figures block of docs/benchmarks.md, markers included."""
    lines = [
        BEGIN,
        "| id | figure | target | met | other figures | measured | results file |",
        "|---|---|---|---|---|---|---|",
    ]
    notes = []
    for entry in entries:
        mark = f"{entry['id']}[^{entry['id']}]" if entry.get("note") else entry["id"]
        if entry.get("note"):
            notes.append(f"[^{entry['id']}]: {entry['note']}")
        lines.append(
            f"| **{mark}** | {_figure(entry['value'])} {entry['unit']} | {entry['target']} | "
            f"{'yes' if entry['met'] else '**no**'} | {_extras(entry.get('extra', {}))} | "
            f"{entry['date'][:10]}, `{entry['commit']}` | `{entry['results_file']}` |"
        )
    if notes:
        lines += ["", *notes]
    return "\n".join([*lines, END])


def update_docs(docs: Path = DOCS, path: Path = SUMMARY) -> bool:
    """Rewrite the generated block of ``docs`` from ``path``; False when it has no markers."""
    text = docs.read_text()
    start, stop = text.find(BEGIN), text.find(END)
    if start < 0 or stop < start:
        return False
    new = text[:start] + render(load(path)) + text[stop + len(END) :]
    if new != text:
        docs.write_text(new)
    return True


def docs_block(docs: Path = DOCS) -> str | None:
    """The generated block as ``docs`` holds it now, markers included."""
    text = docs.read_text()
    start, stop = text.find(BEGIN), text.find(END)
    return None if start < 0 or stop < start else text[start : stop + len(END)]


_CITED_IN_DOCS: Final = re.compile(r"\b((?:bench|chaos)/results/[\w./-]*\w)")


def cited_in_docs() -> set[str]:
    """Result files named in docs/*.md or README.md."""
    pages = [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md"]
    return {
        found
        for page in pages
        if page.exists()
        for found in _CITED_IN_DOCS.findall(page.read_text())
    }


def uncited(path: Path = SUMMARY) -> list[str]:
    """Result files (outside raw/) that neither an entry nor the docs cite: the ones to
    remove from git."""
    cited = {entry["results_file"] for entry in load(path)} | cited_in_docs()
    found = []
    for root in RESULT_ROOTS:
        for file in sorted((REPO / root).rglob("*")):
            rel = file.relative_to(REPO).as_posix()
            keep = rel in cited or file == path or file.name.startswith(".")
            if file.is_file() and not keep and "raw" not in Path(rel).parts:
                found.append(rel)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.summary", description=__doc__)
    parser.add_argument("--docs", action="store_true", help="regenerate docs/benchmarks.md")
    parser.add_argument("--show", action="store_true", help="print the entries")
    parser.add_argument("--uncited", action="store_true", help="list result files not cited")
    parser.add_argument("--from-results", nargs="+", type=Path, metavar="FILE", default=[])
    parser.add_argument("--note", help="with --from-results: where the figure comes from")
    args = parser.parse_args(argv)
    if args.from_results:
        from bench.figures import record_file

        for file in args.from_results:
            try:
                entries = record_file(file, note=args.note)
            except (SummaryError, OSError, ValueError) as err:
                print(f"{file}: not recorded: {err}", file=sys.stderr)
                return 1
            for entry in entries:
                print(f"{entry['id']}: {_figure(entry['value'])} {entry['unit']} from {file}")
    if args.docs:
        if not update_docs():
            print(f"{DOCS}: the markers of the generated block are missing", file=sys.stderr)
            return 1
        print(f"{DOCS.relative_to(REPO)}: current figures regenerated")
    if args.show:
        print(json.dumps(load(), indent=2))
    if args.uncited:
        print("\n".join(uncited()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
