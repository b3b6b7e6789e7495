"""``output_parts`` (a staging shard's rows straight to Arrow, by kind), stacked, gives exactly
the rows of ``output_rows`` converted as PySpark converts them, on random engine results: outcomes of
every condition with one key and several, unmatched events, rows the engine rejects, rows
rejected at parse, and the metrics row with its nulls.  No Spark session: both run in the
Python workers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from spark_purgatory.contract import KIND_OUTCOME, OPERATOR_OUTPUT, PARTITION_MAXIMA
from spark_purgatory.shard.output import output_parts, output_rows
from tests.support.engine_helpers import _random_workload, frame, purgatory


def output_table(*call, state_bytes: int | None = None) -> pa.Table:
    """``output_parts`` stacked, a single key moved to ``key`` as ``output_rows`` sends it
    (the ``outcomes`` table holds every outcome's keys in ``keys``)."""
    parts = output_parts(*call, state_bytes=state_bytes)
    outcome = [p.column("kind")[0].as_py() == KIND_OUTCOME for p in parts]
    return pa.concat_tables([_single_key(p) if o else p for p, o in zip(parts, outcome, strict=True)])


def _single_key(outcomes: pa.Table) -> pa.Table:
    """A single key in ``key``, only the lists of other lengths left in ``keys``."""
    keys = outcomes.column("keys").combine_chunks()
    single = pc.equal(pc.list_value_length(keys), 1)
    key = pc.replace_with_mask(pa.nulls(len(keys), pa.string()), single, pc.list_flatten(keys.filter(single)))
    multi = pc.if_else(single, pa.scalar(None, keys.type), keys)
    at = outcomes.schema.get_field_index
    return outcomes.set_column(at("key"), "key", key).set_column(at("keys"), "keys", multi)


def _bad(rng: np.random.Generator, n: int) -> pd.DataFrame:
    """Rows rejected at parse, as ``shard_input.split_input`` gives them."""
    return pd.DataFrame(
        {
            "source": rng.choice(["operations", "events"], n).astype(object),
            "raw": [f'{{"x": {i}}}' for i in range(n)],
            "reason": ["bad_json"] * n,
            "op_id": [None if i % 2 else f"b{i}" for i in range(n)],
            "key": [f"k{i}" if i % 3 else None for i in range(n)],
        }
    )


@pytest.mark.parametrize("trial", range(6))
def test_output_table_is_output_rows_as_arrow(trial):
    rng = np.random.default_rng(trial)
    ops, events = _random_workload(rng)
    ops += [{"op_id": "no-key", "keys": [], "ts": 5, "timeout_ms": 10, "condition": "any"}]
    p = purgatory()
    cut = sorted(rng.choice(np.arange(1, len(events)), 2, replace=False).tolist())
    batches = np.split(np.arange(len(events)), cut)
    seen = {"several keys": 0, "unmatched": 0, "rejected": 0}
    batches.append(np.arange(0))  # a last call that only moves the watermark past everything
    wm = 0
    for i, rows in enumerate(batches):
        mine = ops[i::3] if i < 3 else []
        result = p.process(frame(mine), frame([events[j] for j in rows]), watermark_ms=wm, batch_id=i)
        wm = events[rows[-1]]["ts"] - 300 if len(rows) else 10_000  # as Spark's, one call behind
        bad = _bad(rng, int(rng.integers(0, 3)))
        figures = {
            "pending": p.pending,
            "batch_time_ms": 1_000 + i,
            PARTITION_MAXIMA: None if i else '{"events":{"0":5}}',
        }
        kwargs = {"state_bytes": None if i == 1 else 100 * i}
        expected = pa.Table.from_pandas(
            output_rows(3, result, bad, figures, wm, **kwargs),
            schema=OPERATOR_OUTPUT,
            preserve_index=False,
        )
        got = output_table(3, result, bad, figures, wm, **kwargs)
        assert got.schema.equals(OPERATOR_OUTPUT)
        assert not _diff(got, expected), (i, _diff(got, expected))
        seen["several keys"] += sum(len(k) > 1 for k in result.outcomes["keys"])
        seen["unmatched"] += len(result.unmatched)
        seen["rejected"] += len(result.rejected)
        assert (
            got.num_rows == len(result.outcomes) + len(result.unmatched) + len(result.rejected) + len(bad) + 1
        )
    assert all(seen.values()), seen  # every kind of row was compared


def _diff(got: pa.Table, expected: pa.Table) -> list[str]:
    """The columns whose values differ."""
    return [n for n in got.column_names if not got.column(n).equals(expected.column(n))]
