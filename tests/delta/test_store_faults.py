"""An object store that misbehaves: ``503 SlowDown`` on part of the requests (ridden out by
retries, ``storage.retries``), then a bucket gone (the job ends with one line naming it, and a
start after the bucket is back continues exactly once).

The store is moto's server behind ``tests/support/faulty_proxy.FaultyProxy``, which answers
as S3 does (status and XML body) instead of forwarding.  Spark-free first: pyarrow and
delta-rs through the proxy with and without retries, a small file read through 503s pyarrow
does not retry itself (``storage.read_bytes``), and the probe that names a gone bucket or
revoked credentials (``spark_purgatory.faults``).  Then the job, in this process on the
worker's session, with delta-rs writing the tables and pyarrow the staging and the shard
state on the store, through 10% of 503s all along: a run that loses its bucket once its first
micro-batch is staged, then a run after the bucket is back; the tables then hold what the
engine computes (``crash_harness.check``).  Spark's own Delta writer (S3A) meets the 503s in
``test_s3a.py``, whose whole query runs through the proxy.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from spark_purgatory.faults import gone_buckets
from spark_purgatory.job import main as job_main
from spark_purgatory.storage import Storage, read_bytes
from spark_purgatory.workload import generate
from tests.support.crash_harness import SETTINGS, check, job_options, tables_and_reference
from tests.support.faulty_proxy import FaultyProxy
from tests.support.object_store import REGION, S3Store
from tests.support.stream_helpers import arriving_input


@pytest.fixture(scope="module")
def s3():
    store = S3Store(bucket="purgatory-faults", own_process=True)  # the job runs in this process
    yield store
    store.stop()


@pytest.fixture
def proxy(s3, monkeypatch):
    """The proxy in front of the module's store, and the credentials as a user exports them."""
    for name, value in s3.env.items():
        monkeypatch.setenv(name, value)
    faulty = FaultyProxy(s3.endpoint, seed=7)
    yield faulty
    faulty.stop()


def _write_file(storage: Storage, uri: str, data: bytes) -> None:
    fs, path = storage.filesystem(uri)
    with fs.open_output_stream(path) as f:
        f.write(data)


def _delta_options(storage: Storage, uri: str) -> dict[str, str]:
    return storage.delta_options(uri) or {}


def test_retries_by_configuration_ride_out_503s_and_without_them_the_first_one_fails(s3, proxy):
    none = Storage(endpoint=proxy.endpoint, region=REGION, allow_http=True, retries=0)
    rows = pa.table({"n": list(range(10))})
    proxy.slow_down(1.0)  # every request
    with pytest.raises(OSError, match="SLOW_DOWN|SlowDown|reduce your request rate"):
        _write_file(none, s3.uri("retries", "none", "file"), b"x")
    table = s3.uri("retries", "none-table")
    with pytest.raises(Exception, match="SlowDown|503"):
        write_deltalake(table, rows, storage_options=_delta_options(none, table))
    assert proxy.injected["pyarrow"] >= 1 and proxy.injected["delta-rs"] >= 1
    proxy.heal()

    retried = dataclasses.replace(none, retries=10)
    proxy.slow_down(0.3)
    for i in range(20):
        _write_file(retried, s3.uri("retries", "some", f"file-{i}"), b"%d" % i)
    table = s3.uri("retries", "some-table")
    for _ in range(3):
        write_deltalake(table, rows, mode="append", storage_options=_delta_options(retried, table))
    proxy.heal()
    assert len(s3.keys("retries/some/")) == 20
    assert DeltaTable(table, storage_options=s3.storage_options).to_pyarrow_table().num_rows == 30
    assert proxy.injected["pyarrow"] > 1 and proxy.injected["delta-rs"] > 1  # each met several


def test_a_small_file_is_read_through_503s_that_pyarrow_does_not_retry(s3, proxy):
    """AWS's SDK for C++ reads a 503 to a read smaller than the error's own body as
    INTERNAL_FAILURE ("Failed to flush response stream") and does not retry it, whatever the
    retry strategy: ``storage.read_bytes`` (every small file the project reads) reads again."""
    s3.put("small/staged_through", b"42")
    fs, root = Storage(endpoint=proxy.endpoint, region=REGION, allow_http=True).filesystem(s3.uri("small"))
    proxy.slow_down(0.5)
    failed = []
    for _ in range(10):
        try:
            with fs.open_input_stream(f"{root}/staged_through") as f:
                f.read()
        except OSError as error:
            failed.append(str(error))
    assert failed and "Failed to flush response stream" in failed[0]
    assert {read_bytes(fs, f"{root}/staged_through") for _ in range(10)} == {b"42"}


def test_a_bucket_gone_or_credentials_revoked_are_named_in_one_line_a_slow_store_is_not(s3, proxy):
    storage = Storage(endpoint=proxy.endpoint, region=REGION, allow_http=True, retries=1)
    out, staging = s3.uri("probe", "out"), s3.uri("probe", "staging", scheme="s3a")
    uris = ["/local/checkpoint", out, staging]
    assert gone_buckets(uris, storage) is None
    proxy.gone(s3.bucket)
    assert gone_buckets(uris, storage) == (
        f"the bucket '{s3.bucket}' ({out}) does not exist (deleted, or a wrong name)"
    )
    proxy.heal()
    proxy.revoked()
    refused = gone_buckets(uris, storage)
    assert refused is not None and refused.startswith(
        f"the object store refuses this job's credentials for the bucket '{s3.bucket}' ({out}; revoked"
    )
    proxy.heal()
    proxy.slow_down(1.0)  # no answer but "later": a fault that may pass
    assert gone_buckets(uris, storage) is None


@pytest.fixture
def workers_env(spark, s3):
    """The credentials in the Python workers' environment too (sent with each task; the
    workers do not see the driver's ``os.environ``)."""
    env = spark.sparkContext.environment
    saved = dict(env)
    env.update(s3.env)
    yield
    env.clear()
    env.update(saved)


@pytest.mark.spark
def test_the_job_rides_out_503s_ends_in_one_line_when_its_bucket_goes_and_continues_exactly_once(
    spark, s3, proxy, workers_env, tmp_path, capsys
):
    work = generate(300, seed=21, ops_per_second=50, multi_key=0.05)
    malformed = 2
    ops, events, deliver = arriving_input(tmp_path / "input", work, files=4, malformed=malformed)

    through = s3.via(proxy.endpoint)  # the job talks to the proxy, the test to the server
    settings = {
        **SETTINGS,
        **through.settings,
        "purgatory.state.path": through.uri("job", "state"),
        "accumulator.staging.path": through.uri("job", "staging", scheme="s3a"),
        "job.writer": "delta-rs",
        "job.restart.backoff.ms": "100",  # a restart, were there one, would not wait
    }
    out = through.uri("job", "out")
    args = [
        *("--ops-path", ops, "--events-path", events),
        *("--output-path", out, "--checkpoint-path", str(tmp_path / "chk")),
        *("--trigger", "available-now"),
        *job_options(settings),
    ]

    deliver(range(0, 4))  # two micro-batches (source.max.files.per.trigger)
    proxy.slow_down(0.1)  # all along, from every client
    proxy.gone_after(s3.bucket, "PUT", "/staging/staged_through")  # once the first is staged
    assert job_main(args) == 1
    failed = capsys.readouterr()
    lines = failed.err.strip().splitlines()
    assert len(lines) == 1, failed.err[-3000:]
    assert lines[0].startswith(f"error: the bucket '{s3.bucket}' ({out}") and "does not exist" in lines[0]
    assert "restart" not in failed.out  # none for the 503s, none for a bucket that is gone

    proxy.heal()  # the bucket is back, with what it held; the 503s go on
    proxy.slow_down(0.1)
    assert job_main(args) == 0, capsys.readouterr().err[-3000:]
    assert "restart" not in capsys.readouterr().out  # the retries alone rode the 503s out
    injected = proxy.injected
    assert injected["pyarrow"] > 0 and injected["delta-rs"] > 0, injected  # both writers met them
    proxy.heal()
    check(tables_and_reference(work, out, through.storage_options, settings, malformed))
