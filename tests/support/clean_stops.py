"""Runs of the job that ride something out or must end cleanly, for ``crash_harness``: riding
out a transient fault by its restart policy, riding out a broker outage, stopped by a signal;
and their checks.

``ride_out`` runs one such step of a plan (``restart=<point>:<n>``, ``outage=<seconds>``,
``signal=TERM|INT``, or several joined by ``+`` in one run, which may end in a ``random``
kill instead of a stop); ``killed_as_planned`` checks a plan's runs: the kills died by SIGKILL
where planned (after riding out what their step says), the others exited 0
(``stopped_cleanly``: flushed, no error, nothing left staged).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator


def _commits(checkpoint: str, store=None) -> int:
    """How many micro-batches Spark has committed in ``checkpoint`` (a URI in ``store``'s bucket
    when given)."""
    if store is not None:
        prefix = checkpoint.split(f"{store.bucket}/", 1)[1] + "/commits"
        return sum(1 for key in store.keys(prefix) if key.rsplit("/", 1)[1].isdigit())
    try:
        return sum(1 for name in os.listdir(os.path.join(checkpoint, "commits")) if name.isdigit())
    except FileNotFoundError:
        return 0


@contextlib.contextmanager
def after_a_commit(checkpoint: str, fault: Callable[[], None], *, give_up_s: float = 300) -> Iterator[None]:
    """Around a job run in this process (its ``main`` on the main thread, where its signal
    handlers live): ``fault()`` once the run has committed a micro-batch of its own to
    ``checkpoint`` (a topic deleted, a credential revoked); a run that has not ended
    ``give_up_s`` seconds after it is sent SIGTERM, as a user would stop it (exit 0), so a
    fault the run never notices fails the test's exit-code assertion instead of hanging it."""
    ended = threading.Event()

    def inject() -> None:
        for _ in range(3000):
            if _commits(checkpoint) > 0 or ended.is_set():
                break
            ended.wait(0.1)
        fault()
        if not ended.wait(give_up_s):
            os.kill(os.getpid(), signal.SIGTERM)

    injector = threading.Thread(target=inject, name="fault-after-a-commit", daemon=True)
    injector.start()
    try:
        yield
    finally:
        ended.set()
        injector.join()


def _tail(path: str, chars: int = 3000) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()[-chars:]


def _signal_after_a_commit(
    job: subprocess.Popen,
    checkpoint: str,
    signum: int,
    delay: float,
    timeout: float,
    store=None,
    before: int | None = None,
    err: str | None = None,
) -> tuple[bool, float | None, int]:
    """Send ``signum`` to ``job`` ``delay`` seconds after it committed a micro-batch of its own,
    as a user would: SIGTERM to the driver (``kill -TERM``, Kubernetes), SIGINT to its whole
    process group (Ctrl-C in a terminal reaches the JVM and its Python workers too); then wait
    for it to exit.  Returns whether it had committed, and the seconds from the signal to its
    exit (None if it did not exit within ``timeout``: then it is killed), and how long the file
    ``err`` (the job's standard error) was when the signal went."""
    before = _commits(checkpoint, store) if before is None else before  # the commits counted so far
    deadline = time.monotonic() + timeout
    while _commits(checkpoint, store) == before and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    committed = _commits(checkpoint, store) > before
    if committed:
        time.sleep(delay)
    err_at = os.path.getsize(err) if err else 0
    sent = time.monotonic()
    if signum == signal.SIGINT:
        os.killpg(job.pid, signum)
    else:
        job.send_signal(signum)
    try:
        job.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        job.kill()
        job.wait()
        return committed, None, err_at
    return committed, round(time.monotonic() - sent, 1), err_at


def ride_out(
    step: str,
    start_job: Callable[[dict[str, str], str | None], subprocess.Popen],
    settings: dict[str, str],
    log: str,
    checkpoint: str,
    store,
    kafka,
    rng: random.Random,
    more_input: Callable[[], None],
) -> dict:
    """A run that rides out what ``step`` says, then stops on a signal after a micro-batch it
    committed, or dies by kill -9 at a random moment after one.

    ``step`` is one or more of these parts joined by ``+``, in this order, all in one run (one
    JVM start for what would be several runs): ``restart=<point>:<n>`` (a micro-batch raises
    once there, the restart policy rides it out), ``outage=<seconds>`` (the broker answers
    nobody for that long once a micro-batch committed, then ``more_input`` arrives), then its
    end: ``signal=TERM|INT`` (the stop: ``linger.ms`` long enough that only the stop commits,
    sent at a random moment after a commit; SIGTERM without an end) or ``random`` (SIGKILL a
    random 0-5 s after a commit, as the plan's ``random`` step: what was ridden out is then
    followed by a crash).  ``start_job(settings, fault)`` starts the job in a process group of
    its own, its output in ``log``.out and .err."""
    parts = parts_of(step)
    signum, fault, delay, ready, before = signal.SIGTERM, None, 0.0, True, None
    if "signal" in parts:
        signum, delay = getattr(signal, f"SIG{parts['signal']}"), rng.uniform(0, 3)
        settings = {**settings, "accumulator.linger.ms": "3600000"}  # nothing drains but the stop
    elif "random" in parts:
        signum, delay = signal.SIGKILL, rng.uniform(0, 5)
    if "restart" in parts:
        settings, fault = {**settings, "job.restart.backoff.ms": "500"}, f"raise:{parts['restart']}"
    job = start_job(settings, fault)
    if "restart" in parts:
        ready = _wait_for_line(f"{log}.out", "restart 1 of", job, timeout=600)
    if "outage" in parts:
        ready = ready and _outage_after_a_commit(job, checkpoint, kafka, float(parts["outage"]), timeout=600)
        before = _commits(checkpoint, store)
        more_input()
    reached, stop_seconds, err_at = _signal_after_a_commit(
        job, checkpoint, signum, delay=delay, timeout=600, store=store, before=before, err=f"{log}.err"
    )
    record = {
        "step": step,
        "returncode": job.returncode,
        "reached": reached and ready,
        "stop_seconds": stop_seconds,
        "out": _tail(f"{log}.out", 20000),
        "stderr": _tail(f"{log}.err", 20000),
        "stderr_after_signal": _from(f"{log}.err", err_at),
    }
    if "signal" in parts:
        record["staged_after"] = None if store is not None else staged_destinations(checkpoint)
    return record


def parts_of(step: str) -> dict[str, str]:
    """A plan's step as {kind: value}: ``restart=staged:2+signal=TERM`` ->
    ``{"restart": "staged:2", "signal": "TERM"}``, ``restart=staged:2+random`` ->
    ``{"restart": "staged:2", "random": ""}``."""
    return {kind: value for kind, _, value in (part.partition("=") for part in step.split("+"))}


def _from(path: str, offset: int) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        f.seek(offset)
        return f.read()


def _outage_after_a_commit(
    job: subprocess.Popen, checkpoint: str, kafka, seconds: float, timeout: float
) -> bool:
    """Once ``job`` committed a micro-batch of its own, freeze the broker for ``seconds``
    (``KafkaBroker.pause``); False if it committed none within ``timeout``."""
    before, deadline = _commits(checkpoint), time.monotonic() + timeout
    while _commits(checkpoint) == before and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    if _commits(checkpoint) == before:
        return False
    kafka.pause()
    try:
        time.sleep(seconds)
    finally:
        kafka.resume()
    return True


def _wait_for_line(path: str, text: str, job: subprocess.Popen, timeout: float) -> bool:
    """Wait until ``text`` appears in the file ``path`` (False if ``job`` ended first or the
    timeout passed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and job.poll() is None:
        with open(path, encoding="utf-8", errors="replace") as f:
            if text in f.read():
                return True
        time.sleep(0.2)
    return False


def staged_destinations(checkpoint: str) -> int:
    """How many destinations hold staged rows under a local checkpoint's accumulator."""
    from spark_purgatory.delta.accumulator import RecordAccumulator

    staging = RecordAccumulator(
        os.path.join(checkpoint, "accumulator"), app_id="check", batch_size=1, linger_ms=0, buffer_memory=1
    )
    return len(staging.destinations())


def killed_as_planned(result: dict, plan: list[str]) -> None:
    """Every run died by SIGKILL where planned, or stopped cleanly on its signal, after riding
    out what its step says."""
    killed = [k for k in result["kills"] if k["returncode"] == -9 and k["reached"]]
    assert len(killed) == len([step for step in plan if not is_clean(step)]), result["kills"]
    for run in (k for k in result["kills"] if rides_out(k["step"])):
        parts = parts_of(run["step"])
        # rode out what it met and committed after it, then stopped (or was killed)
        assert run["reached"] and run["returncode"] == (-9 if "random" in parts else 0), run
        if "signal" in parts:
            stopped_cleanly(run)
        if "restart" in parts:
            assert "503 SlowDown (injected" in run["out"] and "restart 1 of 3" in run["out"]


def rides_out(step: str) -> bool:
    """Whether a plan's step is a run of ``ride_out``: a restart or an outage ridden out, or a
    signal's stop."""
    return step.startswith(("signal=", "restart=", "outage="))


def is_clean(step: str) -> bool:
    """Whether a plan's step is a run that must end cleanly (exit 0), not a kill."""
    return rides_out(step) and "random" not in parts_of(step)


def stopped_cleanly(run: dict) -> None:
    """A run stopped by SIGTERM or SIGINT (``crash_harness``: after a committed micro-batch, with
    ``linger.ms`` long enough that only the stop commits): exit 0, no error, the lingering rows
    flushed (nothing left staged), within the harness's bound."""
    signum = getattr(signal, f"SIG{parts_of(run['step'])['signal']}")
    assert run["reached"] and run["returncode"] == 0, run
    assert run["stop_seconds"] is not None
    assert f"signal {int(signum)}: stopping the query between micro-batches" in run["out"], run["out"]
    assert "flushed outcomes" in run["out"] and "done:" in run["out"], run["out"]
    # the whole run's, or from the signal on where a fault was ridden out first (it logs its error)
    said = run["stderr"] if set(parts_of(run["step"])) == {"signal"} else run["stderr_after_signal"]
    assert "Traceback" not in said and "Exception" not in said, said
    assert run["staged_after"] == 0
