"""``start()``'s handle names what is gone: a query that failed because a bucket was deleted
(or credentials refused, a topic deleted) is raised from ``await_termination`` and ``stop``
as ``faults.PermanentFault``, one first line naming the resource, as the job says it.

No Spark here: the handle's query is a stand-in whose wait raises Spark's
``StreamingQueryException`` and its sink's flush fails; what the handle asks after the
failure is what ``start`` gives it (``query._asked_after_failure``: ``faults.diagnose`` over
the query's paths), asked of a real S3-compatible server (moto) on loopback.
"""

from __future__ import annotations

import types

import pytest
from pyspark.errors import StreamingQueryException

from spark_purgatory import PurgatoryConfig
from spark_purgatory.faults import PermanentFault
from spark_purgatory.handle import PurgatoryQuery, _Totals
from spark_purgatory.query import _asked_after_failure
from spark_purgatory.spark.errors import MicroBatchError
from tests.support.object_store import S3Store

_TRACE = (
    "[FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function.\n"
    "Traceback (most recent call last):\n"
    '  File "sink.py", line 1, in __call__\n'
    "OSError: When initiating multiple part upload for key 'out/outcomes/part-0.parquet' in bucket "
    "'deleted-bucket': AWS Error NO_SUCH_BUCKET\n"
)


class _FailedQuery:
    """A ``StreamingQuery`` whose micro-batch failed writing to a deleted bucket."""

    isActive = False

    def awaitTermination(self, *_timeout):
        raise StreamingQueryException(message=_TRACE)

    def exception(self):
        return None


class _Sink:
    """The driver's step of a query whose flush may fail (``DriverStep``: its control plane
    owes no wake)."""

    control = types.SimpleNamespace(wake=None)

    def __init__(self, flush_error: Exception | None = None) -> None:
        self.flush_error = flush_error

    def close(self) -> list[dict]:
        if self.flush_error is not None:
            raise self.flush_error
        return []


@pytest.fixture(scope="module")
def s3():
    store = S3Store(bucket="purgatory-handle")
    yield store
    store.stop()


def _handle(s3, monkeypatch, output: str, sink: _Sink | None = None) -> PurgatoryQuery:
    for name, value in s3.env.items():
        monkeypatch.setenv(name, value)
    cfg = PurgatoryConfig(state_path=s3.uri("chk", "state"), accumulator_staging_path=s3.uri("chk", "acc"))
    permanent = _asked_after_failure(
        None, s3.uri("ops"), s3.uri("events"), output, s3.uri("chk"), cfg, s3.storage, "json", None
    )
    return PurgatoryQuery(_FailedQuery(), sink or _Sink(), _Totals(None), linger=False, permanent=permanent)


def test_a_query_failed_on_a_deleted_bucket_is_raised_naming_the_bucket(s3, monkeypatch):
    gone = "s3://deleted-bucket/out"
    handle = _handle(s3, monkeypatch, gone)
    with pytest.raises(PermanentFault) as raised:
        handle.await_termination()
    first = str(raised.value).splitlines()[0]
    assert first.startswith(f"the bucket 'deleted-bucket' ({gone}) does not exist (deleted, or a wrong name)")
    assert isinstance(raised.value, MicroBatchError)  # what a caller of the handle catches already
    assert isinstance(raised.value.__cause__, StreamingQueryException)  # Spark's error, chained

    flushing = _handle(s3, monkeypatch, gone, _Sink(OSError("AWS Error NO_SUCH_BUCKET")))
    with pytest.raises(PermanentFault, match="^the bucket 'deleted-bucket'") as raised:
        flushing.stop()
    assert isinstance(raised.value.__cause__, OSError)


def test_a_failure_with_everything_there_keeps_its_own_first_cause(s3, monkeypatch):
    """A fault that may pass (every bucket answers): the failure's own first line, no
    ``PermanentFault`` (the job's restart policy, or the user, decides)."""
    handle = _handle(s3, monkeypatch, s3.uri("out"))
    with pytest.raises(MicroBatchError) as raised:
        handle.await_termination()
    assert not isinstance(raised.value, PermanentFault)
    assert str(raised.value).startswith("OSError: When initiating multiple part upload"), raised.value


class _RefusedQuery:
    """A ``StreamingQuery`` ended by a micro-batch that started after its stop was asked for."""

    isActive = False

    def __init__(self, message: str) -> None:
        self.error = StreamingQueryException(message=message)

    def awaitTermination(self, *_timeout):
        raise self.error

    def exception(self):
        return self.error


def test_a_micro_batch_refused_while_stopping_is_no_failure_but_any_other_error_is():
    """``PurgatoryQuery.exception``: the sink's refusal of a micro-batch triggered after the
    stop (``STOPPING``, a race between the refusal and Spark's stop) is a clean stop, as
    ``await_termination`` treats it; the same error before any stop, or another error, is not."""
    from spark_purgatory.driver_step import STOPPING

    refused = f"[FOREACH_BATCH_USER_FUNCTION_ERROR] ...\nRuntimeError: {STOPPING} (2)\n"
    running = PurgatoryQuery(_RefusedQuery(refused), _Sink(), _Totals(None), linger=False)
    assert running.exception() is not None  # not stopped by the handle: a failure
    running.interrupt()
    assert running.exception() is None and running.await_termination() is True
    failed = PurgatoryQuery(_RefusedQuery(_TRACE), _Sink(), _Totals(None), linger=False)
    failed.interrupt()
    assert failed.exception() is not None
