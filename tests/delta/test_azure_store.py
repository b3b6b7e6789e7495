"""Everything the project writes itself, on an Azure Storage account (Azurite on loopback).

ADLS URIs (``abfss://container@account.dfs.core.windows.net/...``, ``az://container/...``)
go to pyarrow's ``AzureFileSystem`` (segments, staging, the checkpoint's id file) and to
delta-rs (tables) through ``spark_purgatory.storage``; the job runs with its output tables,
shard-state segments and accumulator staging there and its outcomes, read back with
``deltalake``, equal the engine's.  Spark's own checkpoint and input stay local: Spark has no
``abfss://`` file system here (the hadoop-azure JAR cannot be downloaded).  DBFS and Unity
Catalog volumes are Databricks mounts: only their mapping is tested.

The job killed on ADLS is a process of its own with the account and its key exported, as a
user runs it: its driver (delta-rs, pyarrow) and its Python workers (pyarrow: the staged rows)
find them in their environment before the kill.  The restart after the kill, never killed,
runs in this process on the worker's session (a JVM start less): the driver reads the same
variables from ``os.environ``, and the workers, forked by a JVM started before the test, get
them with each task (``SparkContext.environment``).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from deltalake import DeltaTable, write_deltalake

from spark_purgatory import job
from spark_purgatory.config import PurgatoryConfig, read_properties
from spark_purgatory.contract import TABLES
from spark_purgatory.query import app_id_of
from spark_purgatory.storage import Storage, location
from spark_purgatory.workload import generate, write_json_lines
from tests.support.azure_store import AzureStore
from tests.support.crash_harness import SETTINGS, check, job_options, read_table, reference
from tests.support.object_store import check_segment_files

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ADLS = "abfss://box@acct.dfs.core.windows.net/run/state"
#: where the ADLS job is killed: delta-rs's kill at this point of the crash tests' plans
#: (``test_crash.test_the_plans_kill_at_every_fault_point``)
KILL = "committed:1"


def test_an_adls_uri_is_its_account_container_and_path(monkeypatch):
    monkeypatch.delenv("AZURE_STORAGE_ENDPOINT", raising=False)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", "a2V5")
    fs, path = Storage().filesystem(ADLS)
    assert isinstance(fs, pafs.AzureFileSystem) and path == "box/run/state"
    assert Storage().delta_options(ADLS) == {"azure_storage_account_name": "acct", "max_retries": "10"}
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", "other")
    assert Storage().filesystem("az://box/run/")[1] == "box/run"
    azurite = Storage(endpoint="http://127.0.0.1:10000/devstoreaccount1", allow_http=True)
    assert azurite.delta_options("az://box/t") == {
        "azure_storage_account_name": "other",  # the environment's account, else the endpoint's
        "azure_storage_endpoint": "http://127.0.0.1:10000/devstoreaccount1",
        "allow_http": "true",
        "max_retries": "10",
    }
    monkeypatch.delenv("AZURE_STORAGE_ACCOUNT_NAME")
    assert azurite.delta_options("az://box/t")["azure_storage_account_name"] == "devstoreaccount1"
    with pytest.raises(ValueError, match="which Azure storage account"):
        Storage().filesystem("az://box/run")
    with pytest.raises(ValueError, match="path-style"):
        Storage(endpoint="https://proxy.example.com").filesystem(ADLS)


def test_databricks_paths_are_their_fuse_mounts():
    """On a Databricks driver and executors ``dbfs:/`` is mounted at ``/dbfs``, volumes at ``/Volumes``."""
    assert location("dbfs:/purgatory/chk") == location("dbfs:///purgatory/chk") == "/dbfs/purgatory/chk"
    volume = "/Volumes/main/p/v/chk"
    assert location("dbfs:" + volume) == location(volume) == volume
    fs, path = Storage().filesystem("dbfs:/Volumes/main/p/v/state")
    assert isinstance(fs, pafs.LocalFileSystem) and path == "/Volumes/main/p/v/state"
    assert Storage().filesystem("dbfs:/chk")[1] == "/dbfs/chk"
    assert Storage().delta_options("dbfs:/out") is None  # delta-rs writes the mount as a local path


@pytest.fixture(scope="module")
def azurite():
    store = AzureStore()
    yield store
    store.stop()


@pytest.fixture
def azure_env(azurite, monkeypatch):
    """The account and its key as a user exports them; the endpoint comes from our storage.* keys."""
    for name, value in azurite.env.items():
        monkeypatch.setenv(name, value)
    return azurite


def test_segment_files_and_the_app_id_on_adls(azure_env):
    check_segment_files(azure_env.uri("state"), azure_env.storage)
    first = app_id_of(azure_env.uri("chk"), storage=azure_env.storage)
    assert app_id_of(azure_env.uri("chk", scheme="az"), storage=azure_env.storage) == first
    assert azure_env.keys("chk") == ["chk/purgatory-id"]


def test_the_standard_environment_alone_reaches_the_account(azurite, monkeypatch):
    env = {**azurite.env, "AZURE_STORAGE_ENDPOINT": azurite.endpoint, "AZURE_ALLOW_HTTP": "true"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    storage, uri = Storage(), azurite.uri("env-only", "out", scheme="az")  # no storage.* keys
    fs, path = storage.filesystem(uri)
    with fs.open_output_stream(f"{path}/note") as out:
        out.write(b"pyarrow")
    write_deltalake(location(uri) + "/t", pa.table({"a": [1, 2]}), storage_options=storage.delta_options(uri))
    table = DeltaTable(azurite.uri("env-only", "out", "t"), storage_options=azurite.storage_options)
    assert table.to_pyarrow_table().column("a").to_pylist() == [1, 2]
    assert "env-only/out/note" in azurite.keys("env-only")


def _args(azurite, root: str, settings: dict[str, str]) -> list[str]:
    """The job's arguments (``available-now``) over ``root``'s input, its tables on Azurite."""
    args = ["--ops-path", f"{root}/ops", "--events-path", f"{root}/events", "--trigger", "available-now"]
    args += ["--checkpoint-path", f"{root}/chk", "--output-path", azurite.uri(os.path.basename(root), "out")]
    return args + job_options(settings)


def _killed(azurite, args: list[str], fault: str) -> subprocess.CompletedProcess:
    """The job in a process of its own with what a user exports (the endpoint is a --set),
    killed at ``fault``."""
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, "tests", "support", "faulty_job.py"), *args],
        env={**os.environ, **azurite.env, "PURGATORY_FAULT": fault},
        capture_output=True,
        text=True,
        timeout=600,
    )


def _exactly_once(azurite, spark, root: str, *, n_ops: int, fault: str) -> list[str]:
    """The job over new input, killed at ``fault`` in a process of its own, then run again in
    this one on ``spark``; check its tables; their blobs.  The caller exports the account and
    its key (``azure_env``)."""
    run = os.path.basename(root)  # a prefix of its own in the container
    settings = {
        **SETTINGS,
        **azurite.settings,
        "purgatory.state.path": azurite.uri(run, "state"),
        "accumulator.staging.path": azurite.uri(run, "staging", scheme="az"),
        "accumulator.linger.ms": "0",  # a drain and a Delta commit per micro-batch
    }
    work = generate(n_ops, seed=11, ops_per_second=100)
    write_json_lines(work, f"{root}/ops", f"{root}/events", files=4, malformed=6)
    args = _args(azurite, root, settings)
    killed = _killed(azurite, args, fault)
    assert killed.returncode == -9, f"not killed at {fault}: {killed.stderr[-3000:]}"
    # the Python workers do not see this process's environment: each task brings it
    environment = spark.sparkContext.environment
    saved = dict(environment)
    environment.update(azurite.env)
    try:
        job.run(job.parse_args(args))  # the restart, from the checkpoint the killed run left
    finally:
        environment.clear()
        environment.update(saved)
    local = read_properties(os.path.join(ROOT, "conf", "local.conf"))
    config = PurgatoryConfig.from_mapping(
        {k: v for k, v in {**local, **settings}.items() if not k.startswith("job.")}
    )
    expected_outcomes, expected_unmatched = reference(work, config)
    out = azurite.uri(run, "out")
    tables = {name: read_table(f"{out}/{name}", azurite.storage_options, name) for name in TABLES}
    assert len(tables["outcomes"]) > 0
    check(
        {
            "tables": tables,
            "expected_outcomes": expected_outcomes,
            "expected_unmatched": expected_unmatched,
            "malformed": 6,
        }
    )
    assert not os.path.exists(f"{root}/out")  # nothing went to a local path
    return azurite.keys(run)


@pytest.mark.spark
def test_the_job_on_adls_killed_after_a_commit_then_restarted_gives_exactly_once(azure_env, spark, tmp_path):
    """Tables, state and staging on ADLS; kill -9 after a Delta commit, before the staged rows
    are cleared: the restart (on this worker's session) commits nothing twice, and nothing went
    to a local path."""
    keys = _exactly_once(azure_env, spark, str(tmp_path / "crash"), n_ops=400, fault=KILL)
    assert any(k.startswith("crash/state/") for k in keys), "segment files on Azurite"
    versions = [k for k in keys if k.startswith("crash/out/outcomes/_delta_log/0") and k.endswith(".json")]
    # commits go on past version 1 (Azurite before 3.37 ignored List Blobs' startFrom, which
    # delta-rs lists a log from, and a table's version 2 failed)
    assert len(versions) >= 3, versions
    assert "crash/staging/staged_through" in keys
    staged = [k for k in keys if k.startswith("crash/staging/")]
    assert not any(k.endswith(".parquet") for k in staged)  # flushed
    assert not any("drain-" in k for k in staged)  # manifests resolved
