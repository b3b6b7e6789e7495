"""What the benchmarks read of processes from Linux ``/proc`` (psutil is not a dependency).

Light on purpose (no Spark, no project import): a benchmark that times its own imports can
import it before the clock starts without moving work out of what it measures.
"""

from __future__ import annotations

import os


def cpu_seconds() -> float:
    """CPU seconds (user + system) used so far by this process and everything under it: the
    JVM, its Python workers, and the children they have reaped (Linux ``/proc``; NaN where
    there is none).  Less disturbed than wall time by other work on a shared machine."""
    try:
        children: dict[int, list[int]] = {}
        ticks: dict[int, int] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as stat:
                        fields = stat.read().rsplit(")", 1)[1].split()
                except OSError:  # gone meanwhile
                    continue
                children.setdefault(int(fields[1]), []).append(int(entry))
                ticks[int(entry)] = sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    except OSError:
        return float("nan")
    total, todo = 0, [os.getpid()]
    while todo:
        pid = todo.pop()
        total += ticks.get(pid, 0)
        todo += children.get(pid, [])
    return total / os.sysconf("SC_CLK_TCK")
