"""``runtime.small_rows.SmallRows``: a plan's few rows through the sink JAR's ``SmallRows`` are
the rows ``toArrow`` gives, and where the JAR cannot be used the caller is told to use
``toArrow`` (None) rather than given other rows."""

from __future__ import annotations

import pyarrow as pa
import pytest
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import functions as F

from spark_purgatory.delta.staging import STAGED
from spark_purgatory.runtime.small_rows import SmallRows
from tests.support.staged_rows import AWKWARD, staged_columns

pytestmark = [pytest.mark.spark, pytest.mark.jars("checks")]


def _staged_like(spark, rows: int = 7):
    """A DataFrame of ``STAGED``'s columns over 3 partitions (``staged_columns``)."""
    return spark.range(0, rows, 1, 3).select(*staged_columns())


def test_small_rows_are_the_rows_to_arrow_gives(spark):
    frame = _staged_like(spark)
    rows = SmallRows()(frame, STAGED)
    assert rows is not None
    assert rows.equals(frame.toArrow().cast(STAGED))
    assert rows.column("name").to_pylist()[1] == AWKWARD + "1"
    assert rows.column("bytes").to_pylist()[1] == 2**60 // 8 - 3


def test_no_rows_give_an_empty_table_of_the_schema(spark):
    rows = SmallRows()(_staged_like(spark).limit(0), STAGED)
    assert rows is not None and rows.num_rows == 0 and rows.schema == STAGED


def test_int_and_boolean_columns_are_carried(spark):
    frame = spark.range(0, 4, 1, 2).select(
        F.col("id").cast("int").alias("i"),
        (F.col("id") % 2 == 0).alias("even"),
        F.lit(None).cast("tinyint").alias("t"),
    )
    schema = pa.schema([("i", pa.int32()), ("even", pa.bool_()), ("t", pa.int8())])
    rows = SmallRows()(frame, schema)
    assert rows is not None
    assert rows.to_pydict() == {"i": [0, 1, 2, 3], "even": [True, False, True, False], "t": [None] * 4}


def test_a_type_the_text_does_not_carry_is_left_to_to_arrow(spark):
    frame = spark.range(2).select(F.col("id").cast("double").alias("d"))
    assert SmallRows()(frame, pa.schema([("d", pa.float64())])) is None


def test_without_the_jar_the_caller_is_told_to_use_to_arrow(spark):
    reader = SmallRows()
    reader._jvm_class = None  # what the look-up finds on a session without the JAR
    assert reader(_staged_like(spark), STAGED) is None


def test_a_failing_plan_raises_rather_than_giving_no_rows(spark):
    frame = spark.range(0, 3, 1, 1).select(
        F.when(F.col("id") == 2, F.raise_error(F.lit("boom"))).otherwise(F.lit("x")).alias("s")
    )
    with pytest.raises((PySparkException, Py4JJavaError), match="boom"):
        SmallRows()(frame, pa.schema([("s", pa.string())]))
