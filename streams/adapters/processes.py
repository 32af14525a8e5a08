"""Processes known by a pid file: whether one still runs, what it runs, waiting for its end.

The local broker (`streams.adapters.local_kafka`) and the demo's worker (`streams.demo.state`)
keep their pid in the data dir, so that a later command can find a process that an earlier one
started, even one killed with -9; these checks keep a reused pid from being taken for it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs: not gone, and not a zombie waiting for its (new) parent."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie still answers signal 0; /proc tells it apart where there is one
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


def runs_with(pid: int, *arguments: str) -> bool:
    """Whether ``pid``'s command line holds every one of ``arguments``. Where there is no
    ``/proc`` the pid file is all there is to go on, and this says yes."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return True
    return all(argument.encode() in argv for argument in arguments)


def wait_exit(pid: int, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for ``pid`` to end; whether it did."""
    deadline = time.monotonic() + timeout
    while process_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True
