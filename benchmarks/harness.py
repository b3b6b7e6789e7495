"""How every benchmark measures and reports: its command line, its rounds, its figures.

* ``parser``: a benchmark's command line (``python -m benchmarks NAME``), with the options all
  of them share: ``--repeat`` (rounds, the contenders alternated) and ``--json PATH`` (the
  figures as JSON, besides the printed table);
* ``Rounds``: the contenders in alternated order, round by round (ABBA: round 1 in order,
  round 2 reversed ...), so that a machine getting busier or quieter over a run touches every
  contender alike, and each figure's range over the rounds beside the ratios of the runs of a
  round (adjacent in time, the machine's noise alike);
* ``write_json``: the figures with what they were measured on (the command, the commit, the
  machine and its load);
* ``child``: a benchmark's own run in a fresh process (a fresh JVM, Python workers, a class
  path), optionally with another checkout's ``spark_purgatory`` (a change's before and after),
  its memory sampled; in the smoke run (``python -m benchmarks smoke``) in this process;
* ``stop``: a benchmark's session stopped at its end, or in the smoke run left to the next;
* what the benchmarks read of processes from Linux ``/proc``: CPU seconds and resident memory
  of a process tree, by kind (psutil is not a dependency).

Light on purpose (no Spark, no project import): a benchmark that times its own imports can
import it before the clock starts without moving work out of what it measures.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


# -- the command line ------------------------------------------------------------------------------


def parser(
    name: str,
    doc: str | None,
    *,
    repeat: int | None = 1,
    repeat_help: str = "rounds, every contender measured once a round, alternated",
) -> argparse.ArgumentParser:
    """The command line of benchmark ``name`` (its docstring ``doc`` as the help: the first
    paragraph as the description, the rest below the options), with ``--json`` and, unless
    ``repeat`` is None, ``--repeat`` defaulting to it (``repeat_help``: what it repeats)."""
    first, _, rest = (doc or "").strip().partition("\n\n")
    command = argparse.ArgumentParser(
        prog=f"python -m benchmarks {name}",
        description=" ".join(first.split()),
        epilog=textwrap.dedent(rest),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if repeat is not None:
        command.add_argument(
            "--repeat",
            type=int,
            default=repeat,
            help=f"{repeat_help} (default {repeat})",
        )
    command.add_argument("--json", metavar="PATH", help="also write the figures to this file, as JSON")
    return command


def names(text: str | None) -> list[str]:
    """A comma-separated option as a list, empty names dropped (``''``: none)."""
    return [name.strip() for name in (text or "").split(",") if name.strip()]


# -- rounds ----------------------------------------------------------------------------------------


def alternated(contenders: Sequence[str], repeat: int) -> Iterator[tuple[int, str]]:
    """``(round, contender)`` for ``repeat`` rounds: round 0 in the given order, round 1
    reversed, and so on."""
    for number in range(repeat):
        for name in contenders if number % 2 == 0 else reversed(contenders):
            yield number, name


class Rounds:
    """Each contender's figures, round by round; the ranges and the per-round ratios."""

    def __init__(self, contenders: Sequence[str], repeat: int) -> None:
        self.contenders = list(contenders)
        self.repeat = repeat
        self.runs: dict[str, list[dict[str, float]]] = {name: [] for name in self.contenders}

    def __iter__(self) -> Iterator[tuple[int, str]]:
        return alternated(self.contenders, self.repeat)

    def add(self, name: str, figures: dict) -> None:
        self.runs[name].append(figures)

    def values(self, name: str, key: str) -> list[float]:
        return [run[key] for run in self.runs.get(name, []) if run.get(key) is not None]

    def ratios(self, mine: str, other: str, key: str) -> list[float]:
        """``mine``'s ``key`` over ``other``'s, round by round (the runs of one round paired)."""
        pairs = zip(self.runs.get(mine, []), self.runs.get(other, []), strict=False)
        return [a[key] / b[key] for a, b in pairs if a.get(key) and b.get(key)]

    def table(self, columns: dict[str, str], labels: dict[str, str] | None = None) -> str:
        """One row per contender, one ``min-max (median)`` cell per figure of ``columns``
        (key: heading)."""
        labels = labels or {}
        rows = [[labels.get(n, n)] + [span(self.values(n, key)) for key in columns] for n in self.contenders]
        head = ["", *columns.values()]
        widths = [max(len(row[i]) for row in [head, *rows]) + 2 for i in range(len(head))]
        lines = [head, *rows]
        return "\n".join(
            "  "
            + row[0].ljust(widths[0])
            + "".join(c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True))
            for row in lines
        )

    def json(self) -> dict:
        return {"repeat": self.repeat, "runs": self.runs}


def span(values: Sequence[float], unit: str = "", digits: int = 2) -> str:
    """``min-max (median)`` of ``values``, or ``-`` when there are none."""
    if not values:
        return "-"
    low, high, mid = min(values), max(values), statistics.median(values)
    return f"{low:.{digits}f}-{high:.{digits}f}{unit} ({mid:.{digits}f}{unit})"


def ratio_line(label: str, ratios: Sequence[float], target: str = "") -> str:
    """A ratio's rounds side by side: ``label: 1.02, 1.13x (median 1.08x)   target ...``."""
    if not ratios:
        return f"  {label}: -"
    each = ", ".join(f"{r:.2f}" for r in ratios)
    return f"  {label}: {each}x (median {statistics.median(ratios):.2f}x)" + (
        f"   {target}" if target else ""
    )


# -- results ---------------------------------------------------------------------------------------


def write_json(path: str | None, name: str, args: argparse.Namespace, figures: dict) -> None:
    """``figures`` into ``path`` (nothing when None), with what they were measured on."""
    if not path:
        return
    options = {k: v for k, v in vars(args).items() if k != "json"}
    record = {
        "benchmark": name,
        "options": options,
        "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "commit": _commit(),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_average": os.getloadavg()[0],
        },
        "figures": figures,
    }
    Path(path).write_text(json.dumps(record, indent=1, default=str) + "\n", encoding="utf-8")


def _commit() -> str | None:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
        )
    except OSError:
        return None
    return done.stdout.strip() or None


# -- a run in a fresh process ----------------------------------------------------------------------


def command(name: str, argv: Sequence[str]) -> list[str]:
    """The command that runs benchmark ``name`` with ``argv`` in a fresh interpreter (with
    ``child_env``'s environment, from the project's root)."""
    return [sys.executable, "-m", "benchmarks", name, *argv]


@contextlib.contextmanager
def child_env(checkout: str | None = None, env: dict[str, str] | None = None) -> Iterator[dict[str, str]]:
    """The environment of a ``command`` (``env``, this one's by default): the project's root
    on the path, and with ``checkout`` another checkout's ``spark_purgatory`` (a directory
    holding it) instead of this one's, the benchmark's own code still this one's.  That
    package is linked alone into a folder first on the path, and ``PYTHONSAFEPATH`` keeps the
    working directory from coming before it."""
    env = dict(os.environ if env is None else env)
    with tempfile.TemporaryDirectory(prefix="bench-checkout-") as linked:
        path = [str(ROOT)]
        if checkout:
            os.symlink(Path(checkout).resolve() / "spark_purgatory", Path(linked) / "spark_purgatory")
            path.insert(0, linked)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [*path, env.get("PYTHONPATH")]))
        env["PYTHONSAFEPATH"] = "1"
        yield env


#: set (to anything) when the benchmarks' smoke run (``python -m benchmarks smoke``) runs each
#: child in the parent's process: one JVM for them all, the figures meaningless
IN_PROCESS = "BENCHMARKS_IN_PROCESS"


def child(
    name: str,
    argv: Sequence[str],
    *,
    checkout: str | None = None,
    timeout: float = 1800,
    env: dict[str, str] | None = None,
    sample_s: float = 0.0,
) -> dict:
    """Run benchmark ``name`` with ``argv`` in a fresh process (a fresh JVM, Python workers,
    class path; ``child_env``'s ``checkout`` and ``env``) and return the JSON object of its
    last line of output: a child prints its figures so.  With ``sample_s`` the resident
    memory of the child's process tree is read that often, its peak returned as ``peak_mb``.

    In a smoke run (``IN_PROCESS`` set) the child runs in this process instead, ``env``'s
    variables set meanwhile."""
    if os.environ.get(IN_PROCESS):
        if checkout:
            raise ValueError("another checkout's package cannot run in this process")
        return _in_process(name, argv, env, sample_s)
    peak = 0.0
    with child_env(checkout, env) as environment:
        with subprocess.Popen(
            command(name, argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment,
            cwd=ROOT,
        ) as process:
            if sample_s:
                while process.poll() is None:
                    peak = max(peak, tree_rss_mb(process.pid))
                    time.sleep(sample_s)
            try:
                out, err = process.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                raise
    if process.returncode != 0:
        raise RuntimeError(f"{name} {' '.join(argv)} failed ({process.returncode}):\n{err[-4000:]}")
    figures = json.loads(out.strip().splitlines()[-1])
    return {**figures, "peak_mb": peak} if sample_s else figures


def stop(spark) -> None:
    """Stop a benchmark's session at its end; in a smoke run (``IN_PROCESS``) leave it running
    for the next benchmark, whose ``local_session`` takes it over with its Python workers
    warm (a new session forks new workers, and each imports pandas, pyarrow and the project
    again).  A session writing Spark's event log stops all the same: its log is complete
    once the application ends.  ``smoke`` stops the last one (``stop_running``)."""
    if os.environ.get(IN_PROCESS) and spark.sparkContext.getConf().get("spark.eventLog.enabled") != "true":
        return
    spark.stop()


def stop_running() -> None:
    """Stop the session a benchmark before left running (``stop``), if any: a session's static
    settings (an event log) apply only to a new one."""
    pyspark = sys.modules.get("pyspark")  # nothing to stop where no benchmark imported Spark
    if pyspark is not None and pyspark.SparkContext._active_spark_context is not None:
        from pyspark.sql import SparkSession

        SparkSession.builder.getOrCreate().stop()


def _in_process(name: str, argv: Sequence[str], env: dict[str, str] | None, sample_s: float) -> dict:
    """``child``'s run in this process: stdout captured, ``env``'s changes undone after."""
    from benchmarks.registry import run

    changed = {k: v for k, v in (env or {}).items() if os.environ.get(k) != v}
    before = {k: os.environ.get(k) for k in changed}
    os.environ.update(changed)
    peak, done = [0.0], threading.Event()

    def sample() -> None:
        while not done.wait(sample_s):
            peak[0] = max(peak[0], tree_rss_mb(os.getpid()))

    sampler = threading.Thread(target=sample, daemon=True)
    if sample_s:
        sampler.start()
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            status = run(name, list(argv))
    finally:
        done.set()
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    if status:
        raise RuntimeError(f"{name} {' '.join(argv)} exited {status}")
    figures = json.loads(out.getvalue().strip().splitlines()[-1])
    return {**figures, "peak_mb": peak[0]} if sample_s else figures


# -- processes, from /proc -------------------------------------------------------------------------


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
        if int(fields[1]) == os.getpid() and b"java" in _cmdline(pid):
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return float("nan")


def tree_rss_mb(root: int) -> float:
    """Resident memory (MB) of process ``root`` and everything under it (a job: its JVM and
    the Python workers); a process that ends meanwhile counts nothing."""
    return sum(rss_by_kind(root).values())


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:  # gone meanwhile
        return b""


def cpu_by_kind(root: int | None = None) -> dict[str, float]:
    """CPU seconds (user + system, and the reaped children's) used so far by process ``root``
    (this one by default) and everything under it, by ``rss_by_kind``'s kinds: the driver's
    Python, its JVM, the Python workers; a process that ended meanwhile counts in its
    parent's reaped children."""
    tick = os.sysconf("SC_CLK_TCK")
    return _by_kind(
        os.getpid() if root is None else root, lambda fields: sum(int(f) for f in fields[11:15]) / tick
    )


def worker_threads_cpu(root: int | None = None) -> float:
    """CPU seconds the Python workers under ``root`` (this process by default) spent in threads
    other than their main one (a state read-ahead, Arrow's pools): each worker's own CPU less
    its main thread's (``/proc/PID/task/PID``); threads that ended count too."""
    tick = os.sysconf("SC_CLK_TCK")
    root = os.getpid() if root is None else root
    processes = _processes()
    children = _children(processes)
    total, todo = 0.0, [(root, False)]
    while todo:
        pid, under_jvm = todo.pop()
        if pid not in processes:
            continue
        command = _cmdline(pid).split(b"\0")[0] if pid != root else b""
        worker = under_jvm and b"python" in command
        if worker:
            try:
                with open(f"/proc/{pid}/task/{pid}/stat", "rb") as f:
                    main = f.read().rsplit(b")", 1)[1].split()
                own = processes[pid]
                total += (int(own[11]) + int(own[12]) - int(main[11]) - int(main[12])) / tick
            except OSError:  # gone meanwhile
                pass
        todo += [(child, under_jvm or command.endswith(b"java")) for child in children.get(pid, [])]
    return total


def rss_by_kind(root: int) -> dict[str, float]:
    """Resident memory (MB) of process ``root`` and everything under it, by kind: ``python
    driver`` (``root``, the job's own Python), ``driver JVM`` (a ``java`` process under it:
    ``spark-submit`` execs it), ``python workers`` (every Python process under the JVM: the
    worker daemon and the workers it forks) and ``other``; a process that ends meanwhile
    counts nothing."""
    page_mb = os.sysconf("SC_PAGE_SIZE") / 2**20
    return _by_kind(root, lambda fields: int(fields[21]) * page_mb)  # rss, the 24th field of stat


def _by_kind(root: int, figure: Callable[[list], float]) -> dict[str, float]:
    """``figure`` of each process's ``/proc`` stat fields, summed by kind under ``root``
    (``rss_by_kind``)."""
    processes = _processes()
    children = _children(processes)
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
        kinds[kind] += figure(processes[pid])
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


def event_log_conf(directory: str) -> dict[str, str]:
    """A session's settings for one uncompressed event log file under ``directory``; the
    session a smoke run's benchmark before left running is stopped (``stop_running``), or the
    new session would be that one, without the log."""
    stop_running()
    Path(directory).mkdir(parents=True, exist_ok=True)
    return {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": Path(directory).resolve().as_uri(),
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",
    }
