"""What the benchmarks read of processes from Linux ``/proc`` (psutil is not a dependency).

Light on purpose (no Spark, no project import): a benchmark that times its own imports can
import it before the clock starts without moving work out of what it measures.
"""

from __future__ import annotations

import os


def _processes() -> dict[int, list[str]]:
    """Every process's ``/proc/<pid>/stat`` fields after the command name (``[1]`` is the
    parent, ``[11:15]`` utime stime cutime cstime in clock ticks)."""
    found: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    found[int(entry)] = stat.read().rsplit(")", 1)[1].split()
            except OSError:  # gone meanwhile
                continue
    return found


def _children(processes: dict[int, list[str]]) -> dict[int, list[int]]:
    """Each process's children, from the parents ``_processes`` read."""
    children: dict[int, list[int]] = {}
    for pid, fields in processes.items():
        children.setdefault(int(fields[1]), []).append(pid)
    return children


def cpu_seconds(root: int | None = None) -> float:
    """CPU seconds (user + system) used so far by this process (or process ``root``: a Spark
    Connect server) and everything under it: the JVM, its Python workers, and the children
    they have reaped (Linux ``/proc``; NaN where there is none).  Less disturbed than wall
    time by other work on a shared machine."""
    try:
        processes = _processes()
    except OSError:
        return float("nan")
    children = _children(processes)
    total, todo = 0, [os.getpid() if root is None else root]
    while todo:
        pid = todo.pop()
        if pid in processes:
            total += sum(int(f) for f in processes[pid][11:15])
        todo += children.get(pid, [])
    return total / os.sysconf("SC_CLK_TCK")


def jvm_cpu_seconds() -> float:
    """CPU seconds (user + system) of this process's JVM child alone (``spark-submit`` execs
    ``java``), without its Python workers; NaN when there is none."""
    try:
        processes = _processes()
    except OSError:
        return float("nan")
    for pid, fields in processes.items():
        if int(fields[1]) != os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"java" in f.read():
                    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            continue
    return float("nan")


def tree_rss_mb(root: int) -> float:
    """Resident memory (MB) of process ``root`` and everything under it (a job: its JVM and
    the Python workers); a process that ends meanwhile counts nothing."""
    processes = _processes()
    children = _children(processes)
    pages, todo = 0, [root]
    while todo:
        pid = todo.pop()
        if pid in processes:
            pages += int(processes[pid][21])  # rss, the 24th field of stat
        todo += children.get(pid, [])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:  # gone meanwhile
        return b""


def rss_by_kind(root: int) -> dict[str, float]:
    """Resident memory (MB) of process ``root`` and everything under it, by kind: ``python
    driver`` (``root``, the job's own Python), ``driver JVM`` (a ``java`` process under it:
    ``spark-submit`` execs it), ``python workers`` (every Python process under the JVM: the
    worker daemon and the workers it forks) and ``other``; a process that ends meanwhile
    counts nothing."""
    processes = _processes()
    children = _children(processes)
    page_mb = os.sysconf("SC_PAGE_SIZE") / 2**20
    kinds = dict.fromkeys(("python driver", "driver JVM", "python workers", "other"), 0.0)
    todo = [(root, "python driver")]
    while todo:
        pid, kind = todo.pop()
        if pid not in processes:
            continue
        if pid != root:
            command = _cmdline(pid).split(b"\0")[0]
            if command.endswith(b"java"):
                kind = "driver JVM"
            elif kind == "driver JVM" or kind == "python workers":
                kind = "python workers" if b"python" in command else "other"
            else:
                kind = "other"
        kinds[kind] += int(processes[pid][21]) * page_mb
        todo += [(child, kind) for child in children.get(pid, [])]
    return kinds


def jvm_pid(root: int) -> int | None:
    """The first ``java`` process under ``root`` (the job's driver JVM), None when none runs."""
    processes = _processes()
    children = _children(processes)
    todo = [root]
    while todo:
        pid = todo.pop(0)
        if pid != root and _cmdline(pid).split(b"\0")[0].endswith(b"java"):
            return pid
        todo += children.get(pid, [])
    return None
