"""``spark-purgatory rescale`` on a real checkpoint: a query begun with 2 shards, stopped,
rescaled, continued with 4 then 3, gives the tables of the same input run on 2 shards
throughout, in one run never stopped (the same micro-batches: one per file); the metrics
table names the new shards from the next micro-batch on.

One Spark test (its runs cost seconds each); the properties are Spark-free
(``tests/state/test_rescale.py``).
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pandas as pd
import pytest
from deltalake import DeltaTable

from spark_purgatory import PurgatoryConfig, start
from spark_purgatory.cli import main
from spark_purgatory.config import ConfigError
from spark_purgatory.spark.key_hash import shards_of
from spark_purgatory.state.layout import default_shards, layout_of
from spark_purgatory.workload import generate, write_json_lines

RUNS = 3


def _table(output: str, name: str) -> pd.DataFrame:
    return DeltaTable(os.path.join(output, name)).to_pandas()


def _run(spark, tmp_path, name: str, plan: list[int]) -> tuple[str, list]:
    """Run the input in ``RUNS`` parts (one file per stream each), on ``plan[i]`` shards in
    run i, rescaling the stopped checkpoint between runs where the count changes; returns the
    output and each run's first micro-batch."""
    staged = {kind: tmp_path / f"all-{kind}" for kind in ("ops", "events")}
    paths = {
        "output": str(tmp_path / name / "out"),
        "checkpoint": str(tmp_path / name / "chk"),
        "spark": spark,
    }
    firsts = []
    for run, shards in enumerate(plan):
        if run and shards != plan[run - 1]:
            assert main(["rescale", "--checkpoint", paths["checkpoint"], "--shards", str(shards)]) == 0
        for kind, source in staged.items():
            os.makedirs(tmp_path / name / kind, exist_ok=True)
            part = sorted(os.listdir(source))[run]
            shutil.copy(source / part, tmp_path / name / kind / part)
        config = PurgatoryConfig(shards=shards, watermark_delay="2 seconds")
        metrics = os.path.join(paths["output"], "metrics")
        firsts.append(int(_table(paths["output"], "metrics")["batch_id"].max()) + 1 if run else 0)
        assert not run or os.path.isdir(metrics)
        with start(
            str(tmp_path / name / "ops"), str(tmp_path / name / "events"), config=config, **paths
        ) as q:
            q.await_termination()
    return paths["output"], firsts


def _run_never_stopped(spark, tmp_path, name: str) -> str:
    """The whole input in one run on 2 shards, a micro-batch per file as each of ``_run``'s
    runs takes its file; returns the output."""
    for kind in ("ops", "events"):
        shutil.copytree(tmp_path / f"all-{kind}", tmp_path / name / kind)
    config = PurgatoryConfig(shards=2, watermark_delay="2 seconds", source_max_files_per_trigger=1)
    output = str(tmp_path / name / "out")
    with start(
        str(tmp_path / name / "ops"),
        str(tmp_path / name / "events"),
        output=output,
        checkpoint=str(tmp_path / name / "chk"),
        config=config,
        spark=spark,
    ) as q:
        q.await_termination()
    return output


@pytest.mark.spark
def test_a_checkpoint_begun_with_2_shards_continues_with_4_then_3(spark, tmp_path, capsys):
    work = generate(240, seed=7, ops_per_second=40, timeout_ms=20_000, multi_key=0.3)
    write_json_lines(work, str(tmp_path / "all-ops"), str(tmp_path / "all-events"), files=RUNS)
    kept = _run_never_stopped(spark, tmp_path, "kept")
    output, firsts = _run(spark, tmp_path, "rescaled", [2, 4, 3])
    assert "rescaled" in capsys.readouterr().out
    for name, columns in (
        ("outcomes", ["op_id", "status", "resolved_at", "matched_events", "progress"]),
        ("unmatched_events", ["key", "ts", "op_id", "reason"]),
        ("rejected", ["source", "reason", "op_id"]),
    ):
        # a sum's progress may differ in its last bits: the same values added in another order
        got, expected = (_table(o, name)[columns].round(6).astype(str) for o in (output, kept))
        assert sorted(map(tuple, got.values)) == sorted(map(tuple, expected.values)), name
    assert len(_table(output, "outcomes")) > 100
    # the new shards from the first micro-batch after each rescale
    metrics = _table(output, "metrics")
    for run, shards in ((1, 4), (2, 3)):
        end = firsts[run + 1] if run + 1 < len(firsts) else None
        seen = metrics.loc[(metrics["batch_id"] >= firsts[run]) & (end is None or metrics["batch_id"] < end)]
        assert (
            set(seen["shard"]) <= set(range(PurgatoryConfig(shards=shards).groups))
            and max(seen["shard"]) >= 2
        )
    chk = str(tmp_path / "rescaled" / "chk")
    assert [(h["from"], h["to"]) for h in layout_of(chk)["history"]] == [(2, 4), (4, 3)]
    # routing's hash in Python is Spark's (rescale sends moved keys where routing sends rows)
    keys = np.array(sorted({k for keys in work.operations["keys"] for k in keys})[:200], dtype=object)
    spark_shards = spark.createDataFrame([(k,) for k in keys], "k string").selectExpr(
        "pmod(xxhash64(k), 3) AS s"
    )
    assert [r.s for r in spark_shards.collect()] == shards_of(keys, 3).tolist()
    with pytest.raises(ConfigError, match="runs 3 shards since its rescale at micro-batch"):
        start(
            str(tmp_path / "rescaled" / "ops"),
            str(tmp_path / "rescaled" / "events"),
            output=output,
            checkpoint=chk,
            config=PurgatoryConfig(shards=2),
            spark=spark,
        )


@pytest.mark.spark
def test_with_no_configuration_the_shards_are_the_checkpoints_or_the_sessions_parallelism(
    spark, tmp_path, caplog
):
    new = str(tmp_path / "new")
    with caplog.at_level("WARNING", logger="spark_purgatory.rescale"):
        assert default_shards(spark, new) == spark.sparkContext.defaultParallelism
    assert "purgatory.shards is not configured" in caplog.text
    offsets = tmp_path / "old" / "offsets"
    offsets.mkdir(parents=True)
    (offsets / "0").write_text('v1\n{"conf":{"spark.sql.shuffle.partitions":"6"}}\n{}')
    assert default_shards(spark, str(tmp_path / "old")) == 5
