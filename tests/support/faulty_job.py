"""The job with a crash hook, for the crash tests: kill -9 at an accumulator fault point.

    PURGATORY_FAULT=<point>:<n> python tests/support/faulty_job.py <the job's arguments>

kills the process with SIGKILL the n-th time the accumulator passes ``<point>`` (one of
``RecordAccumulator``'s ``FAULT_POINTS``: staging, staged, manifest, written, committed),
through the accumulator's test-only ``fault_hook``; production code never installs one.
``PURGATORY_FAULT=raise:<point>:<n>`` raises there instead, once (a transient fault: an object
store's 503 in the middle of a micro-batch), for the job's restart policy to ride out.
"""

from __future__ import annotations

import functools
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from spark_purgatory import query  # noqa: E402
from spark_purgatory.delta.accumulator import FAULT_POINTS, FaultHook, RecordAccumulator  # noqa: E402
from spark_purgatory.job import console  # noqa: E402


class InjectedFault(OSError):
    """The transient fault ``raise:<point>:<n>`` injects."""


def kill_at(spec: str) -> FaultHook:
    """A hook that kills this process the n-th time it is called with ``point`` (``point:n``),
    or raises ``InjectedFault`` that one time (``raise:point:n``)."""
    raising = spec.startswith("raise:")
    point, _, count = spec.removeprefix("raise:").partition(":")
    if point not in FAULT_POINTS:
        raise SystemExit(f"PURGATORY_FAULT: {point!r} is not one of {FAULT_POINTS}")
    hits = 0

    def hook(reached: str) -> None:
        nonlocal hits
        if reached == point:
            hits += 1
            if raising and hits == int(count or 1):
                raise InjectedFault(f"503 SlowDown (injected at {point})")
            if not raising and hits >= int(count or 1):
                os.kill(os.getpid(), signal.SIGKILL)

    return hook


if __name__ == "__main__":
    # start() builds the job's accumulator: hand it the hook
    query.RecordAccumulator = functools.partial(  # type: ignore[misc]
        RecordAccumulator, fault_hook=kill_at(os.environ["PURGATORY_FAULT"])
    )
    sys.exit(console())
