"""On Spark: an expiry comes in the micro-batch whose rows move the watermark past its deadline.

Spark computes a micro-batch's watermark from its rows after it and applies it in the next
micro-batch; the shard step moves, once the rows are admitted, to the watermark they bring
(``shard.input.batch_watermark``), so the operation expires one micro-batch sooner, with the
same outcome (``tests/handoff/test_batch_watermark.py`` checks the outcomes on every split).
"""

from __future__ import annotations

import numpy as np
import pytest

from spark_purgatory.config import PurgatoryConfig
from spark_purgatory.spark import input_stream
from spark_purgatory.spark.key_hash import shards_of
from tests.support.stream_helpers import T0, Files, ev, op, run_stream

pytestmark = pytest.mark.spark


def _keys_of(shard: int, shards: int, count: int) -> list[str]:
    """``count`` keys that routing sends to ``shard`` of ``shards``."""
    found, i = [], 0
    while len(found) < count:
        key = f"key-{i}"
        if shards_of(np.array([key], dtype=object), shards)[0] == shard:
            found.append(key)
        i += 1
    return found


@pytest.mark.parametrize("marked", [True, False])
def test_an_expiry_comes_in_the_micro_batch_whose_rows_pass_its_deadline(
    spark, tmp_path, monkeypatch, marked
):
    """Two operations due at 1 s, one in each shard; the second micro-batch's rows, all in
    shard 1, bring Spark's next watermark past their deadlines.  Shard 1's operation expires
    in that micro-batch, whatever the marks.  Shard 0 gets no row there: with the marks
    (``spark.input_stream``) it learns where the watermark went and expires its operation in
    that micro-batch too, without them one micro-batch later."""
    if not marked:
        monkeypatch.setattr(input_stream, "batch_marks", lambda spark: None)
    (a_key, a_event), (b_key, b_event, c_key) = _keys_of(0, 2, 2), _keys_of(1, 2, 3)
    files = Files(str(tmp_path))
    # a (shard 0) and c (shard 1): due at 1 s
    files.add(ops=[op("a", a_key, 0, 1_000), op("c", c_key, 0, 1_000)], events=[ev(a_event, 100)])
    files.add(ops=[op("b", b_key, 5_000, 1_000)], events=[ev(b_event, 7_000)])  # shard 1 alone
    config = PurgatoryConfig(
        shards=2, tick_ms=100, watermark_delay="2 seconds", state_path=str(tmp_path / "state")
    )
    run = run_stream(spark, files, config)

    outcomes = run.outcomes.set_index("op_id")
    assert outcomes.loc[["a", "c"], "status"].tolist() == ["expired", "expired"]
    assert ("spark_purgatory_batch_marks" in run.plan.lower()) == marked
    # Spark's watermark in micro-batch 1 is the first file's (0 s - 2 s); its rows bring 3 s,
    # and the operator's watermark says where it went
    assert outcomes.loc["c", "batch_id"] == 1 and run.watermarks[1] == T0 + 3_000
    assert outcomes.loc["a", "batch_id"] == (1 if marked else 2)
    assert "b" not in outcomes.index  # due at 6 s: pending at the end of the run
