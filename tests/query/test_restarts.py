"""The job's restart policy (``spark_purgatory.restarts``), without Spark: bounded attempts,
growing pauses, a count reset by progress, a signal ending the pause.  The policy riding out a
fault in a real run: ``tests/delta/test_crash.py`` (``restart=`` in its plan)."""

from __future__ import annotations

import threading

import pytest

from spark_purgatory.config import ConfigError
from spark_purgatory.job import parse_args
from spark_purgatory.restarts import Attempt, RestartPolicy, run_restarting

_ARGS = ["--ops-path", "o", "--events-path", "e", "--output-path", "out", "--checkpoint-path", "chk"]


def _runs(*attempts: Attempt):
    given = list(attempts)
    calls = []

    def once() -> Attempt:
        calls.append(1)
        return given.pop(0)

    return once, calls


def test_failures_in_a_row_are_retried_as_often_as_configured_then_the_last_one_is_raised():
    boom = [Attempt(RuntimeError(f"503 number {i}"), progressed=False, signalled=False) for i in range(4)]
    once, calls = _runs(*boom)
    with pytest.raises(RuntimeError, match="503 number 3"):
        run_restarting(
            once, RestartPolicy(attempts=3, backoff_ms=1, max_backoff_ms=2), interrupted=threading.Event()
        )
    assert len(calls) == 4


def test_a_run_that_made_progress_resets_the_count_and_a_clean_end_ends_it():
    fail, moved = RuntimeError("gone"), Attempt(RuntimeError("gone"), progressed=True, signalled=False)
    once, calls = _runs(
        Attempt(fail, False, False), moved, Attempt(fail, False, False), Attempt(None, True, False)
    )
    ended = run_restarting(once, RestartPolicy(attempts=2, backoff_ms=1), interrupted=threading.Event())
    assert ended.error is None and len(calls) == 4


def test_off_a_signal_or_a_signal_in_the_pause_end_without_a_restart():
    once, calls = _runs(Attempt(RuntimeError("x"), False, False))
    with pytest.raises(RuntimeError):
        run_restarting(once, RestartPolicy(attempts=0), interrupted=threading.Event())
    once, calls = _runs(Attempt(RuntimeError("x"), False, True))  # stopped by a signal
    assert run_restarting(once, RestartPolicy(), interrupted=threading.Event()).signalled
    interrupted = threading.Event()
    interrupted.set()  # a signal came during the pause
    once, calls = _runs(Attempt(RuntimeError("x"), False, False))
    assert run_restarting(once, RestartPolicy(backoff_ms=60_000), interrupted=interrupted).error is not None
    assert len(calls) == 1


def test_the_policy_is_read_from_the_job_keys_and_checked():
    settings = parse_args([*_ARGS, "--set", "job.restart.attempts=5", "--set", "job.restart.backoff.ms=200"])
    assert settings.restart == RestartPolicy(attempts=5, backoff_ms=200, max_backoff_ms=300_000)
    with pytest.raises(ConfigError, match="job.restart.attempts must be a whole number >= 0, got '-1'"):
        parse_args([*_ARGS, "--set", "job.restart.attempts=-1"])


def test_a_failure_that_no_restart_fixes_ends_at_once_with_its_own_error():
    once, calls = _runs(*[Attempt(RuntimeError("NoSuchBucket"), False, False) for _ in range(3)])
    gone = ValueError("the bucket 'b' (s3://b/out) does not exist")
    asked = []

    def permanent(error: BaseException) -> BaseException | None:
        asked.append(str(error))
        return gone

    with pytest.raises(ValueError, match="does not exist") as raised:
        run_restarting(
            once, RestartPolicy(attempts=3, backoff_ms=1), interrupted=threading.Event(), permanent=permanent
        )
    assert len(calls) == 1 and asked == ["NoSuchBucket"]
    assert isinstance(raised.value.__cause__, RuntimeError)  # the failure it was found after
    once, calls = _runs(Attempt(RuntimeError("503"), False, False), Attempt(None, True, False))
    ended = run_restarting(
        once,
        RestartPolicy(attempts=3, backoff_ms=1),
        interrupted=threading.Event(),
        permanent=lambda _e: None,
    )
    assert ended.error is None and len(calls) == 2  # a fault that may pass: restarted
