"""The job's restart policy: a query that fails while running is started again, a bounded
number of times, with a growing pause (Flink's fixed-attempts strategy with backoff).

Each restart continues from the checkpoint, exactly once as for any restart.  A failure found
at start is never retried; a run that made progress resets the count.

Invariant: no more than ``attempts`` restarts in a row without a committed micro-batch.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("spark_purgatory.job")


@dataclass(frozen=True)
class RestartPolicy:
    """``job.restart.attempts`` (0: off), ``job.restart.backoff.ms`` (the first pause, doubled
    after each failure) and ``job.restart.backoff.max.ms`` (the longest pause)."""

    attempts: int = 3
    backoff_ms: int = 10_000
    max_backoff_ms: int = 300_000

    def pause_ms(self, failures: int) -> int:
        """The pause before restart number ``failures`` (1 for the first).

        >>> [RestartPolicy(backoff_ms=1000, max_backoff_ms=5000).pause_ms(n) for n in (1, 2, 3, 4)]
        [1000, 2000, 4000, 5000]
        """
        return min(self.backoff_ms * 2 ** (failures - 1), self.max_backoff_ms)


@dataclass
class Attempt:
    """What one run of the query ended with: the error that failed it (None: it ended or was
    stopped), whether it committed a micro-batch, whether a signal stopped it."""

    error: BaseException | None
    progressed: bool
    signalled: bool


def run_restarting(
    once: Callable[[], Attempt],
    policy: RestartPolicy,
    *,
    interrupted: threading.Event,
    permanent: Callable[[BaseException], BaseException | None] | None = None,
) -> Attempt:
    """Run ``once`` until it ends without an error, a signal stops it, or ``policy``'s
    attempts are spent (then its error is raised).  ``interrupted`` cuts a pause short.
    ``permanent(error)``, asked after each failure, returns the error to end with at once
    when no restart would fix it (None: the policy decides); it is raised from the failure."""
    failures = 0
    while True:
        attempt = once()
        if attempt.error is None or attempt.signalled or interrupted.is_set():
            return attempt
        fatal = permanent(attempt.error) if permanent is not None else None
        if fatal is not None:
            raise fatal from attempt.error
        failures = 1 if attempt.progressed else failures + 1
        if failures > policy.attempts:
            raise attempt.error
        pause = policy.pause_ms(failures)
        first = str(attempt.error).strip().splitlines()[0] if str(attempt.error).strip() else "?"
        log.warning(
            "the query failed (%s): restart %d of %d in %.1f s (job.restart.attempts)",
            first,
            failures,
            policy.attempts,
            pause / 1000,
        )
        if interrupted.wait(pause / 1000):
            return attempt
