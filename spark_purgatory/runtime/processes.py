"""Whether a process of this host still runs, asked by its id (signal 0: nothing is sent).

Two records of the project name a process of this host and stand only while it runs: a
checkpoint's run lease and a class-data dump a local session's JVM writes when it exits.
"""

from __future__ import annotations

import os

__all__ = ["alive"]


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
