"""The job on a real standalone cluster (a worker of two one-core executors on loopback),
deployed from the wheel alone, and over a Spark Connect session.

This is what catches closures that do not serialise and state that assumes one process:
the shards' state lives in executors' state stores, the driver only stages and commits.  And
what a cluster user deploys is the wheel (``--py-files``) and the JARs ``spark-purgatory jars``
names (``--jars``), never the checkout (docs/deployment.md).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

from spark_purgatory.config import PurgatoryConfig, read_properties
from spark_purgatory.contract import TABLES
from spark_purgatory.workload import generate, write_json_lines
from testbed.wheel import build_wheel, install_wheel, uninstall, venv_env
from tests.support.cluster import cluster_env, standalone_cluster
from tests.support.crash_harness import ROOT, check, read_table, reference

pytestmark = pytest.mark.spark


#: the driver of the cluster test, submitted with ``spark-submit --py-files <the wheel>``: it
#: says where the driver and an executor import the package from, then runs the job.
#: argv: the job's arguments
_DRIVER = """
import sys
import spark_purgatory
from pyspark.sql import SparkSession
from spark_purgatory.job import main as job
sc = SparkSession.builder.getOrCreate().sparkContext
print("DRIVER IMPORTS", spark_purgatory.__file__, flush=True)
imported = sc.parallelize([0, 1], 2).map(lambda _: __import__("spark_purgatory").__file__).collect()
print("EXECUTORS IMPORT", *sorted(set(imported)), flush=True)
sys.exit(job(sys.argv[1:]))
"""


@pytest.fixture
def submitted_wheel(tmp_path_factory):
    """What a cluster user deploys, from the wheel alone: the wheel (for ``--py-files``, under a
    ``.zip`` name: PySpark puts only ``.zip``, ``.egg`` and ``.jar`` files on the executors'
    path, while the driver takes a ``.whl`` too; a pure-Python wheel is a zip), the
    project's JARs ``spark-purgatory jars`` names in a venv it is installed in, copied out (a
    cluster library), and the nodes' Python: that venv with the wheel's requirements and
    without the package itself (executors import it from the submitted wheel).  pyspark at
    the tests' pin, the Spark the cluster's processes run."""
    where = tmp_path_factory.mktemp("submitted")
    wheel = build_wheel(where / "dist")
    python = install_wheel(wheel, where / "venv", bytecode=False, also=("pyspark==" + pyspark.__version__,))
    _compile_what_the_nodes_import(python)
    env = venv_env(python)
    named = subprocess.run(
        [str(python.parent / "spark-purgatory"), "jars"], capture_output=True, text=True, env=env, check=True
    ).stdout.strip()
    library = where / "cluster-library"
    library.mkdir()
    jars = [shutil.copy(jar, library) for jar in named.split(",")]
    uninstall(python, "spark-purgatory")
    return Path(shutil.copy(wheel, where / f"{wheel.stem}.zip")), jars, python


def _compile_what_the_nodes_import(python: Path) -> None:
    """Bytecode for what the driver and the executors' Python workers import from the nodes'
    venv (with ``PYTHONDONTWRITEBYTECODE`` set each of those processes compiles it again): not
    the venv's pyspark, since ``spark-submit`` and the executors put Spark's own ``pyspark.zip``
    before it on their path, nor the packages' tests."""
    (site,) = (python.parent.parent / "lib").glob("python*/site-packages")
    skipped = r"[\\/](pyspark|tests?)[\\/]"
    subprocess.run([str(python), "-m", "compileall", "-q", "-x", skipped, str(site)], check=True)


@pytest.mark.jars("checks")  # the wheel's build needs them built
def test_job_on_a_standalone_cluster_gives_the_engine_results(tmp_path, submitted_wheel):
    """Submitted from the wheel alone (``--py-files`` the wheel, ``--jars`` what ``spark-purgatory
    jars`` names; no checkout on any path) to a cluster whose executors are two JVMs of their
    own, the job on 4 shards over the input in two micro-batches: the tables equal the
    engine's, the metrics table has the shards' rows, both executors ran tasks of the shards'
    state partitions, the driver and the executors imported the package from the wheel, and
    the checks JAR was in use.

    Operations wait 5 s and the watermark trails by 2 s, so some expire, some of them carried
    pending from the first micro-batch (its state read back by whichever executor runs the
    next).  A rescale's continuation (stopped, ``spark-purgatory rescale``, started again on
    executors that keep the old layout's state stores) is ``tests/query/test_rescale_spark.py``'s:
    its local session's executor is as long-lived as a cluster's.
    """
    wheel, jars, python = submitted_wheel
    work = generate(1500, seed=21, ops_per_second=100, timeout_ms=5_000)
    write_json_lines(work, str(tmp_path / "ops"), str(tmp_path / "events"), files=6, malformed=4)
    driver = tmp_path / "driver.py"
    driver.write_text(_DRIVER, encoding="utf-8")
    settings = {"purgatory.shards": "4", "source.max.files.per.trigger": "3", "watermark.delay": "2 seconds"}
    cluster = str(tmp_path / "cluster")
    with standalone_cluster(cluster, cores=2) as master:
        env = {**cluster_env(cluster), **venv_env(python), "PYSPARK_PYTHON": str(python)}
        done = subprocess.run(
            [str(python.parent / "spark-submit"), "--master", master, "--py-files", str(wheel),
             "--jars", ",".join(jars), "--conf", "spark.ui.enabled=false",
             "--conf", "spark.executor.cores=1",  # two executors on the worker's two cores
             "--conf", "spark.sql.session.timeZone=UTC", str(driver),
             "--ops-path", str(tmp_path / "ops"), "--events-path", str(tmp_path / "events"),
             "--output-path", str(tmp_path / "out"), "--checkpoint-path", str(tmp_path / "chk"),
             "--conf", os.path.join(ROOT, "conf", "local.conf"),
             *(a for k, v in settings.items() for a in ("--set", f"{k}={v}"))],
            capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env,
        )  # fmt: skip
    (tmp_path / "driver.out").write_text(done.stdout)  # kept for a failure's post-mortem
    assert done.returncode == 0, done.stderr[-3000:]
    assert "not in use" not in done.stdout + done.stderr  # the checks JAR came with --jars
    (driver_imports,) = re.findall(r"DRIVER IMPORTS (\S+)", done.stdout)
    executors_import = re.findall(r"EXECUTORS IMPORT (.+)", done.stdout)[0].split()
    for module in (driver_imports, *executors_import):  # the wheel's copy, never the checkout's
        assert not module.startswith(ROOT) and wheel.stem in module, module
    local = {
        k: v
        for k, v in read_properties(os.path.join(ROOT, "conf", "local.conf")).items()
        if not k.startswith("job.")
    }
    outcomes, unmatched = reference(work, PurgatoryConfig.from_mapping({**local, **settings}))
    tables = {n: read_table(str(tmp_path / "out" / n), None, n) for n in TABLES}
    assert (tables["outcomes"]["status"] == "expired").any()
    check({"tables": tables, "expected_outcomes": outcomes, "expected_unmatched": unmatched, "malformed": 4})
    # a metrics row per (micro-batch, shard) called: shards 0-3 and the cross-shard group 4
    metrics = tables["metrics"]
    assert metrics["batch_id"].nunique() >= 2, "the input was read in one micro-batch"
    assert 3 in set(metrics["shard"].astype(int)) <= set(range(5)), metrics["shard"]
    # the executors, each a JVM of its own: each ran tasks of the query's state partitions
    # (Spark's state store logs them with the query run), all five of them between the two
    runs = set(re.findall(r"query started id=\S+ run=(\S+)", done.stdout))
    (app,) = os.listdir(os.path.join(cluster, "work"))
    served = {}
    for executor in os.listdir(os.path.join(cluster, "work", app)):
        with open(os.path.join(cluster, "work", app, executor, "stderr"), encoding="utf-8") as f:
            found = re.findall(r"partitionId=(\d+), storeName=default \], queryRunId=(\S+) \]", f.read())
        served[executor] = {int(p) for p, run in found if run in runs}
    assert len(served) == 2 and all(served.values()), served  # both executors ran shard tasks
    assert set().union(*served.values()) == set(range(5)), served


def test_operator_through_a_spark_connect_session(tmp_path):
    """Databricks shared/serverless compute is Spark Connect: no sparkContext, no _jvm."""
    from deltalake import DeltaTable

    from tests.support.cluster import connect_server

    work = generate(400, seed=4, ops_per_second=50)
    write_json_lines(work, str(tmp_path / "ops"), str(tmp_path / "events"), files=2, malformed=2)
    with connect_server(str(tmp_path / "server")) as url:
        client = subprocess.run(
            [sys.executable, os.path.join(ROOT, "tests", "support", "connect_client.py"), url, str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert client.returncode == 0, client.stderr[-3000:]
    report = json.loads(client.stdout.strip().splitlines()[-1])
    assert report["session"].startswith("pyspark.sql.connect")
    assert report["writer"] == "DeltaRsWriter"  # no Delta JARs on this server
    outcomes = DeltaTable(str(tmp_path / "out" / "outcomes")).to_pandas()
    rejected = DeltaTable(str(tmp_path / "out" / "rejected")).to_pandas()
    expected, _ = reference(work, PurgatoryConfig(shards=2, watermark_delay="2 seconds"))
    assert outcomes["op_id"].is_unique and len(rejected) == 2
    assert {(r.op_id, r.status) for r in outcomes.itertuples()} == {
        (r.op_id, r.status) for r in expected.itertuples()
    }
