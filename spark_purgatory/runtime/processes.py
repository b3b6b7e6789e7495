"""Processes of this host: whether one still runs (signal 0: nothing is sent), and a command's
self-kill at a named step for the crash tests."""

from __future__ import annotations

import os
import signal


def alive(pid: int) -> bool:
    """Does a process of id ``pid`` run on this host?  One of another user's counts (the
    signal is refused, the process is there); ids <= 0 name no single process.

    >>> alive(os.getpid()), alive(0)
    (True, False)
    """
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_at(variable: str, step: str) -> None:
    """SIGKILL this process when the environment variable ``variable`` names ``step``: how the
    crash tests stop a command at each of its steps."""
    if os.environ.get(variable) == step:
        os.kill(os.getpid(), signal.SIGKILL)
