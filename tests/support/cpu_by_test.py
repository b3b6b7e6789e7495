"""Where the suite's CPU goes: each test's CPU-seconds, its whole process tree counted.

The suite is CPU-bound on two cores, so what shortens ``make test`` is CPU saved, and a test's
own process says little of it: a job run's JVM, its Python workers, a broker, a killed job's
orphans are other processes.  This plugin samples ``/proc`` twice a second in each xdist
worker, follows every process descended from the worker (and keeps following one once it is
orphaned), and charges what they used to the test running then::

    make test ARGS="-p tests.support.cpu_by_test"
    python -m tests.support.cpu_by_test            # the files and tests that cost most

Each worker appends ``{"test", "cpu", "wall"}`` lines to ``$CPU_BY_TEST`` (default
``/tmp/cpu-by-test``)/<worker>.jsonl; remove the folder between runs.  The controller of an
xdist run records nothing (its tree is every worker's).  The last half second of a process
that ends is lost, so figures are slightly low.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest

_TICK = os.sysconf("SC_CLK_TCK")
_OUT = Path(os.environ.get("CPU_BY_TEST", "/tmp/cpu-by-test"))


class _Tree:
    """The CPU ticks a process tree used since the last reading, its orphans included."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.seen: dict[int, tuple[int, int]] = {}  # pid -> (start time, ticks read last)
        self.lock = threading.Lock()

    def used(self) -> int:
        stats = {}
        for name in os.listdir("/proc"):
            if name.isdigit() and (stat := _stat(int(name))) is not None:
                stats[int(name)] = stat
        children = collections.defaultdict(list)
        for pid, (parent, _, _) in stats.items():
            children[parent].append(pid)
        tree, todo = set(), [self.root]
        while todo:
            pid = todo.pop()
            if pid not in tree:
                tree.add(pid)
                todo.extend(children[pid])
        ticks = 0
        with self.lock:
            for pid in tree | set(self.seen):
                known = self.seen.pop(pid, None)
                if pid not in stats:
                    continue
                _, used, start = stats[pid]
                if known is None or known[0] != start:  # new, or its pid reused
                    if pid not in tree:
                        continue
                    known = (start, 0)
                ticks += used - known[1]
                self.seen[pid] = (start, used)
        return ticks


def _stat(pid: int) -> tuple[int, int, int] | None:
    """A process's parent, user + system ticks and start time (``/proc/PID/stat``)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[19])


_tree: _Tree | None = None
_charged = collections.Counter()
_running = ["<between tests>"]


def _charge() -> None:
    ticks = _tree.used()
    _charged[_running[0]] += ticks


def _sample() -> None:
    while True:
        _charge()
        time.sleep(0.5)


def pytest_configure(config) -> None:
    global _tree
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):  # not a controller
        _tree = _Tree(os.getpid())
        _tree.used()  # what ran before the first test is nobody's
        threading.Thread(target=_sample, daemon=True).start()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if _tree is None:
        yield
        return
    _charge()
    _running[0], began = item.nodeid, time.monotonic()
    yield
    _charge()
    _running[0] = "<between tests>"
    record = {"test": item.nodeid, "cpu": round(_charged.pop(item.nodeid, 0) / _TICK, 2)}
    record["wall"] = round(time.monotonic() - began, 2)
    _OUT.mkdir(parents=True, exist_ok=True)
    with open(_OUT / f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")


def records(folder: Path = _OUT) -> list[dict]:
    """Every test's record of a run, each worker's."""
    return [json.loads(line) for path in folder.glob("*.jsonl") for line in path.read_text().splitlines()]


def summary(folder: Path = _OUT, top: int = 25) -> str:
    """The run's CPU in all, then the files and the tests that cost most."""
    rows = records(folder)
    by_file = collections.Counter()
    for record in rows:
        by_file[record["test"].split("::")[0]] += record["cpu"]
    lines = [f"{len(rows)} tests, {sum(r['cpu'] for r in rows):,.0f} CPU-s", "", "CPU-s  file"]
    lines += [f"{cpu:5.0f}  {name}" for name, cpu in by_file.most_common(top)]
    lines += ["", "CPU-s  wall-s  test"]
    for record in sorted(rows, key=lambda r: -r["cpu"])[:top]:
        lines.append(f"{record['cpu']:5.0f}  {record['wall']:6.0f}  {record['test']}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(Path(sys.argv[1]) if len(sys.argv) > 1 else _OUT))
