"""Everything the project writes itself, on an Azure Storage account (Azurite on loopback).

ADLS URIs (``abfss://container@account.dfs.core.windows.net/...``, ``az://container/...``)
go to pyarrow's ``AzureFileSystem`` (segments, staging, the checkpoint's id file) and to
delta-rs (tables) through ``spark_purgatory.storage``; the job runs with its output tables,
shard-state segments and accumulator staging there and its outcomes, read back with
``deltalake``, equal the engine's.  Spark's own checkpoint and input stay local: Spark has no
``abfss://`` file system here (the hadoop-azure JAR cannot be downloaded).  DBFS and Unity
Catalog volumes are Databricks mounts: only their mapping is tested.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from azure_store import AzureStore
from deltalake import DeltaTable, write_deltalake

from spark_purgatory.config import PurgatoryConfig, read_properties
from spark_purgatory.contract import TABLES
from spark_purgatory.query import app_id_of
from spark_purgatory.state import SegmentStore
from spark_purgatory.storage import Storage, location
from spark_purgatory.workload import generate, write_json_lines

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ADLS = "abfss://box@acct.dfs.core.windows.net/run/state"


def test_an_adls_uri_is_its_account_container_and_path(monkeypatch):
    monkeypatch.delenv("AZURE_STORAGE_ENDPOINT", raising=False)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", "a2V5")
    fs, path = Storage().filesystem(ADLS)
    assert isinstance(fs, pafs.AzureFileSystem) and path == "box/run/state"
    assert Storage().delta_options(ADLS) == {"azure_storage_account_name": "acct"}
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", "other")
    assert Storage().filesystem("az://box/run/")[1] == "box/run"
    azurite = Storage(endpoint="http://127.0.0.1:10000/devstoreaccount1", allow_http=True)
    assert azurite.delta_options("az://box/t") == {
        "azure_storage_account_name": "other",  # the environment's account, else the endpoint's
        "azure_storage_endpoint": "http://127.0.0.1:10000/devstoreaccount1",
        "allow_http": "true",
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
    store = SegmentStore(azure_env.uri("state"), storage=azure_env.storage)
    name = store.write("base", {"a": b"xyz"}, {"shard": "0"})
    again = pickle.loads(pickle.dumps(store))  # as executors get it
    assert again.read(name) == ({"a": b"xyz"}, {"shard": "0"})
    assert again.segments() == [name]
    again.delete([name])
    assert store.segments() == []
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


def _job(azurite, root: str, settings: dict[str, str], n_ops: int, files: int) -> tuple:
    """The job over local input with its tables, state and staging on Azurite; its work and settings."""
    work = generate(n_ops, seed=11, ops_per_second=100)
    ops, events = os.path.join(root, "ops"), os.path.join(root, "events")
    write_json_lines(work, ops, events, files=files, malformed=6)
    sets = [x for k, v in settings.items() for x in ("--set", f"{k}={v}")]
    args = ["--ops-path", ops, "--events-path", events, "--output-path", azurite.uri("job", "out")]
    args += ["--checkpoint-path", os.path.join(root, "chk"), "--trigger", "available-now"]
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "jobs", "purgatory_job.py"), *args, *sets]
        + ["--conf", os.path.join(ROOT, "conf", "local.conf"), "--set", "job.master=local[2]"],
        env={**os.environ, **azurite.env},  # what a user exports; the endpoint is a --set
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return work


@pytest.mark.spark
def test_the_job_with_tables_state_and_staging_on_adls(azurite, tmp_path):
    from crash_harness import SETTINGS, check, read_table, reference

    settings = {
        **SETTINGS,
        **azurite.settings,
        "purgatory.state.path": azurite.uri("job", "state"),
        "accumulator.staging.path": azurite.uri("job", "staging", scheme="az"),
    }
    work = _job(azurite, str(tmp_path), settings, n_ops=600, files=4)
    local = read_properties(os.path.join(ROOT, "conf", "local.conf"))
    config = PurgatoryConfig.from_mapping(
        {k: v for k, v in {**local, **settings}.items() if not k.startswith("job.")}
    )
    expected_outcomes, expected_unmatched = reference(work, config)
    tables = {
        name: read_table(azurite.uri("job", "out", name), azurite.storage_options, name) for name in TABLES
    }
    check(
        {
            "tables": tables,
            "expected_outcomes": expected_outcomes,
            "expected_unmatched": expected_unmatched,
            "malformed": 6,
        }
    )
    assert len(tables["outcomes"]) > 0
    keys = azurite.keys("job")
    assert any(k.startswith("job/state/") for k in keys), "segment files on Azurite"
    assert any(k.startswith("job/out/outcomes/_delta_log/") for k in keys)
    assert "job/staging/staged_through" in keys
    assert not any(k.endswith(".arrow") and k.startswith("job/staging/") for k in keys)  # flushed
    assert not os.path.exists(os.path.join(str(tmp_path), "out"))  # nothing went to a local path
