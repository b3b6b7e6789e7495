"""The tester's routing (``testing.local_shards.routed``) sends every row where Spark's does.

``PurgatoryTester`` runs the production shard step (``ShardStep``) over the shards, so it must
hand each group the routed rows a stream's routing (``spark.routing``) hands it: the same
copies (operation, stubs, claim, replica), shards, peers and fields.  One workload of
single- and multi-key operations (some op_ids repeated), events and rows rejected at parse is
routed both ways, under the default hand-off (mailbox and op_id registry), the replicas and
with cross-shard operations switched off.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from spark_purgatory.config import PurgatoryConfig
from spark_purgatory.engine.batch import with_keys
from spark_purgatory.engine.validation import validate_events, validate_operations
from spark_purgatory.shard.labels import shard_numbers
from spark_purgatory.shard.roles import ROLE_BAD, ROLES, ROUTED_COLUMNS
from spark_purgatory.spark import routing, sources
from spark_purgatory.testing.local_shards import routed

_OPS = "op_id string, keys array<string>, ts bigint, timeout_ms bigint, condition string, target double"
_EVENTS = "key string, ts bigint, op_id string, source string, value double"


def _workload(rng: np.random.Generator) -> tuple[list[tuple], list[tuple]]:
    keys = [f"order-{i}" for i in range(12)]
    ops = []
    for i in range(120):
        n = 1 if rng.random() < 0.6 else int(rng.integers(2, 4))
        own = [str(k) for k in rng.choice(keys, size=n, replace=False)]
        op_id = f"op-{int(rng.integers(0, 90))}"  # some repeated
        condition, target = ("count", 2.0) if i % 3 else ("any", None)
        timeout = -5 if i % 17 == 0 else 1_000  # a few rejected at parse (negative_timeout)
        ops.append((op_id, own, int(rng.integers(0, 5_000)), timeout, condition, target))
    events = [
        (str(rng.choice(keys)), int(rng.integers(0, 6_000)), None, f"s{i % 3}", None) for i in range(80)
    ]
    events.append((None, 10, None, None, None))  # missing_key
    return ops, events


def _rows(frame: pd.DataFrame) -> list[tuple]:
    """Routed rows as comparable tuples: lists read back from their JSON, NaN as None; of a
    row rejected at parse, what the shard step reads of it (``shard.input.split_input``):
    its side, reason, op_id and key (its shard is that of its raw text, which each reader
    renders its own way)."""
    out = []
    bad = ROLES.index(ROLE_BAD)
    for row in frame[ROUTED_COLUMNS].itertuples(index=False):
        values = {}
        for name, v in zip(ROUTED_COLUMNS, row, strict=True):
            if v is None or (isinstance(v, float) and np.isnan(v)):
                v = None
            elif name in ("keys", "members"):
                v = tuple(json.loads(v))
            elif isinstance(v, (float, np.floating, np.integer)):
                v = float(v)
            values[name] = v
        if values["role"] == bad:
            key = values["key"] or (values["keys"] or (None,))[0]
            values = {
                "role": bad,
                "side": values["side"],
                "reason": values["condition"],
                "op_id": values["op_id"],
                "key": key,
            }
        out.append(tuple(values.items()))
    return sorted(out, key=repr)


@pytest.mark.parametrize(
    "settings",
    [{}, {"cross_shard_handoff": "replicas"}, {"cross_shard_operations": False}],
    ids=["mailbox-and-registry", "replicas", "no-cross-shard"],
)
def test_the_testers_routing_gives_the_rows_spark_routes(spark, tmp_path, settings):
    config = PurgatoryConfig(shards=3, state_path=str(tmp_path / "state"), **settings)
    ops, events = _workload(np.random.default_rng(7))
    reading = dict(max_timeout_ms=config.max_timeout_ms, limits=config.input_limits)
    parsed_ops = sources.parse_operations(spark.createDataFrame(ops, _OPS), "typed", **reading)
    parsed_events = sources.parse_events(spark.createDataFrame(events, _EVENTS), "typed")
    on_spark = routing.route_operations(parsed_ops, config).unionByName(
        routing.route_events(parsed_events, config)
    )
    spark_rows = on_spark.toPandas()
    numbers = shard_numbers(config.groups)
    spark_rows["shard"] = spark_rows["shard"].map(numbers)  # Spark's group labels, as numbers

    names = ["op_id", "keys", "ts", "timeout_ms", "condition", "target"]
    valid_ops, bad_ops = validate_operations(
        with_keys(pd.DataFrame(ops, columns=names)), max_timeout_ms=config.max_timeout_ms
    )
    valid_events, bad_events = validate_events(
        pd.DataFrame(events, columns=["key", "ts", "op_id", "source", "value"])
    )
    rejected = pd.concat([bad_ops, bad_events], ignore_index=True).assign(raw=None)
    local = routed(valid_ops, valid_events, rejected, config)

    assert len(spark_rows) > len(ops) + len(events)  # stubs, claims or replicas among them
    got, expected = _rows(local), _rows(spark_rows)
    assert got == expected
