"""``sql_text.literal_column``: typed literals the optimizer leaves as they are, built once
per Py4J gateway client (``per_client``); and the JSON reading's SQL, which the
optimizer leaves as written."""

from __future__ import annotations

import re

from pyspark.sql import types as T

from spark_purgatory.config import PurgatoryConfig
from spark_purgatory.shard.roles import ROLE_BAD, ROLES
from spark_purgatory.spark import per_client, sql_text
from spark_purgatory.spark.input_stream import input_stream


def test_literals_are_typed_values_and_their_classes_are_looked_up_once_per_client(spark):
    frame = spark.range(1).select(
        sql_text.literal_column(spark, None, "bigint").alias("none"),
        sql_text.literal_column(spark, [2, 0, 1], "array<int>").alias("labels"),
    )
    assert frame.schema["none"].dataType == T.LongType()
    # a list's elements are never null, and its type says so (the state key's nullability)
    assert frame.schema["labels"].dataType == T.ArrayType(T.IntegerType(), containsNull=False)
    assert frame.collect()[0].asDict() == {"none": None, "labels": [2, 0, 1]}

    # the classes and each literal are built once per JVM and serve every projection, twice
    # in one too
    classes = sql_text._literal_classes(spark._jvm)
    assert sql_text._literal_classes(spark._jvm) is classes
    null = sql_text.literal_column(spark, None, "string")
    assert null._jc is sql_text.literal_column(spark, None, "string")._jc
    labels = sql_text.literal_column(spark, [2, 0, 1], "array<int>")
    assert labels._jc is sql_text.literal_column(spark, [2, 0, 1], "array<int>")._jc
    assert labels._jc is not sql_text.literal_column(spark, [0, 1], "array<int>")._jc
    twice = spark.range(1).select(null.alias("a"), null.alias("b"), labels.alias("c"))
    assert [f.dataType for f in twice.schema][:2] == [T.StringType(), T.StringType()]
    assert twice.collect()[0].asDict() == {"a": None, "b": None, "c": [2, 0, 1]}


def test_what_is_kept_per_client_is_served_to_that_client_only():
    """A client whose id was seen before, but which is not the one that asked (a new
    session's JVM), gets nothing of the other's."""

    class Client:
        pass

    class Jvm:
        def __init__(self, client: Client) -> None:
            self._gateway_client = client

    first, second = Client(), Client()
    per_client.kept(Jvm(first), "test")["x"] = 1
    assert per_client.kept(Jvm(first), "test") == {"x": 1}
    assert per_client.kept(Jvm(first), "other") == {}
    key = ("test", id(first))
    per_client._KEPT[("test", id(second))] = per_client._KEPT.pop(key)  # a reused id
    assert per_client.kept(Jvm(second), "test") == {}
    del per_client._KEPT[("test", id(second))]


#: the optimizer's rules that rewrite an expression in place (not the plan's shape): each
#: rewrite of the input's reading is made again in every micro-batch of a stream, and costs
#: its batch of rules another pass over the whole plan
_EXPRESSION_REWRITES = (
    "BooleanSimplification",
    "SimplifyCasts",
    "OptimizeIn",
    "SimplifyConditionals",
    "PushFoldableIntoBranches",
    "CombineConcats",
    "SimplifyBinaryComparison",
    "NullPropagation",
)


def _rewrites(spark, frame) -> dict[str, int]:
    """How often each of ``_EXPRESSION_REWRITES`` changed ``frame``'s plan while Spark
    optimized it (Catalyst's rule metering: effective runs)."""
    meter = spark._jvm.org.apache.spark.sql.catalyst.rules.RuleExecutor
    meter.resetMetrics()
    frame._jdf.queryExecution().optimizedPlan()
    counts = {}
    for line in meter.dumpTimeSpent().splitlines():
        found = re.match(r"\s*(\S+)\s+\d+ / \d+\s+(\d+) / \d+\s*$", line)
        name = found and found.group(1).rsplit(".", 1)[-1].rsplit("$", 1)[-1]
        if name in _EXPRESSION_REWRITES:
            counts[name] = int(found.group(2))
    return counts


def test_the_json_reading_and_routing_are_written_as_the_optimizer_leaves_them(spark, tmp_path):
    """JSON lines parsed, checked and routed: the optimizer finds no expression to rewrite (a
    stream pays each rewrite again in every micro-batch), and the rows are the same."""
    lines = [
        '{"op_id": "o1", "key": "k", "ts": 1000, "timeout_ms": 5000}',
        '{"op_id": "o2", "keys": ["a", " ", "a", "b"], "ts": "1970-01-01T00:00:02Z", "timeout_ms": 5000, '
        '"condition": "quorum", "target": 1, "members": ["m", "n"]}',
        '{"op_id": 7, "keys": {"no": 1}, "ts": 1000, "timeout_ms": -1}',
        '{"key": "k", "ts": 1000, "value": "Infinity", "op_id": [1], "source": 3}',
        "not json",
    ]
    (tmp_path / "in.json").write_text("\n".join(lines) + "\n")
    text = spark.read.text(str(tmp_path / "in.json"))
    config = PurgatoryConfig(shards=2, cross_shard_operations=False, max_timeout_ms=60_000)
    routed = input_stream(text, text, config, source_format="json")
    assert _rewrites(spark, routed) == dict.fromkeys(_EXPRESSION_REWRITES, 0)
    reasons = sorted(r.condition for r in routed.collect() if r.role == ROLES.index(ROLE_BAD))
    assert "malformed_json" in reasons and "bad_op_id" in reasons
