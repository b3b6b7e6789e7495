"""The job on a real standalone cluster (two one-core workers on loopback), deployed from the
wheel alone, and over a Spark Connect session.

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


#: the driver of the cluster test, submitted with ``spark-submit --py-files <the wheel>``: the job
#: over the next 3 files of each input with 2 shards, ``spark-purgatory rescale`` to 4, the job
#: over the rest with 4: one Spark application (a notebook's way: stop, rescale, start again on
#: the same cluster; one set of executors).  It first says where the driver and an executor
#: import the package from.  argv: the test's directory, then the job's own arguments
_STOP_RESCALE_CONTINUE = """
import os, sys
import spark_purgatory
from pyspark.sql import SparkSession
from spark_purgatory.cli import main as cli
from spark_purgatory.job import main as job
tmp, args = sys.argv[1], sys.argv[2:]
sc = SparkSession.builder.getOrCreate().sparkContext
print("DRIVER IMPORTS", spark_purgatory.__file__, flush=True)
imported = sc.parallelize([0, 1], 2).map(lambda _: __import__("spark_purgatory").__file__).collect()
print("EXECUTORS IMPORT", *sorted(set(imported)), flush=True)
for shards in (2, 4):
    if shards != 2 and cli(["rescale", "--checkpoint", f"{tmp}/chk", "--shards", str(shards)]):
        sys.exit("rescale failed")
    for kind in ("ops", "events"):
        for name in sorted(os.listdir(f"{tmp}/all-{kind}"))[:3]:
            os.replace(f"{tmp}/all-{kind}/{name}", f"{tmp}/{kind}/{name}")
    print(f"=== run with {shards} shards", flush=True)
    if job([*args, "--set", f"purgatory.shards={shards}"]):
        sys.exit("job failed")
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
    python = install_wheel(wheel, where / "venv", also=("pyspark==" + pyspark.__version__,))
    env = venv_env(python)
    named = subprocess.run(
        [str(python.parent / "spark-purgatory"), "jars"], capture_output=True, text=True, env=env, check=True
    ).stdout.strip()
    library = where / "cluster-library"
    library.mkdir()
    jars = [shutil.copy(jar, library) for jar in named.split(",")]
    uninstall(python, "spark-purgatory")
    return Path(shutil.copy(wheel, where / f"{wheel.stem}.zip")), jars, python


@pytest.mark.jars("checks")  # the wheel's build needs them built
def test_job_on_a_standalone_cluster_gives_the_engine_results_across_a_rescale(tmp_path, submitted_wheel):
    """Submitted from the wheel alone (``--py-files`` the wheel, ``--jars`` what ``spark-purgatory
    jars`` names; no checkout on any path): begun with 2 shards on half of the input, stopped,
    rescaled to 4 (``spark-purgatory rescale``, no JVM) and continued on the rest: the tables
    equal the engine's over all the input, the metrics table has the new layout's shards from
    the next micro-batch on, both workers ran tasks of the new layout, the driver and the
    executors imported the package from the wheel, and the checks JAR was in use.

    Operations wait 5 s and the watermark trails by 2 s, so some expire in each run (pending
    operations carried across the rescale expire in the new layout).  The files are cut in
    event-time order, both inputs at the same times, so no row of the second half is late.
    """
    wheel, jars, python = submitted_wheel
    work = generate(1500, seed=21, ops_per_second=100, timeout_ms=5_000)
    write_json_lines(work, str(tmp_path / "all-ops"), str(tmp_path / "all-events"), files=6, malformed=4)
    (tmp_path / "ops").mkdir()
    (tmp_path / "events").mkdir()
    driver = tmp_path / "driver.py"
    driver.write_text(_STOP_RESCALE_CONTINUE, encoding="utf-8")
    settings = {"source.max.files.per.trigger": "3", "watermark.delay": "2 seconds"}
    cluster = str(tmp_path / "cluster")
    with standalone_cluster(cluster) as master:
        env = {**cluster_env(cluster), **venv_env(python), "PYSPARK_PYTHON": str(python)}
        done = subprocess.run(
            [str(python.parent / "spark-submit"), "--master", master, "--py-files", str(wheel),
             "--jars", ",".join(jars), "--conf", "spark.ui.enabled=false",
             "--conf", "spark.sql.session.timeZone=UTC", str(driver), str(tmp_path),
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
    runs = done.stdout.split("=== run with ")[1:]
    assert [r.split()[0] for r in runs] == ["2", "4"] and "rescaled" in runs[0], done.stdout[-3000:]
    assert not os.listdir(tmp_path / "all-ops")  # all input read
    local = {
        k: v
        for k, v in read_properties(os.path.join(ROOT, "conf", "local.conf")).items()
        if not k.startswith("job.")
    }
    outcomes, unmatched = reference(work, PurgatoryConfig.from_mapping({**local, **settings}))
    tables = {n: read_table(str(tmp_path / "out" / n), None, n) for n in TABLES}
    assert (tables["outcomes"]["status"] == "expired").any()
    check({"tables": tables, "expected_outcomes": outcomes, "expected_unmatched": unmatched, "malformed": 4})
    # a metrics row per (micro-batch, shard) called: shards 0-1 (and the cross-shard group 2),
    # then 0-3 (and 4) from the first micro-batch after the rescale on
    metrics, layout = tables["metrics"], []
    for run in runs:
        batches = {int(line.split()[2]) for line in run.splitlines() if " batch " in line}
        layout.append(set(metrics[metrics["batch_id"].isin(batches)]["shard"].astype(int)))
    assert layout[0] <= {0, 1, 2} and 3 in layout[1] <= set(range(5)), layout
    # the executors, one per worker: each ran tasks of the second run's state partitions
    # (Spark's state store logs them with the query run; partitions 3 and 4 exist only with 4 shards)
    second = set(re.findall(r"query started id=\S+ run=(\S+)", runs[1]))
    (app,) = os.listdir(os.path.join(cluster, "work"))  # one application, both runs
    served = {}
    for executor in os.listdir(os.path.join(cluster, "work", app)):
        with open(os.path.join(cluster, "work", app, executor, "stderr"), encoding="utf-8") as f:
            found = re.findall(r"partitionId=(\d+), storeName=default \], queryRunId=(\S+) \]", f.read())
        served[executor] = {int(p) for p, run in found if run in second}
    assert len(served) == 2 and all(served.values()), served  # both workers ran shard tasks
    assert set().union(*served.values()) == set(range(5)), served


def test_operator_through_a_spark_connect_session(tmp_path):
    """Databricks shared/serverless compute is Spark Connect: no sparkContext, no _jvm."""
    from deltalake import DeltaTable

    from tests.support.cluster import connect_server

    work = generate(600, seed=4, ops_per_second=50)
    write_json_lines(work, str(tmp_path / "ops"), str(tmp_path / "events"), files=4, malformed=2)
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
