"""``STAGED``-shaped rows for the sink JAR's tests (``tests/runtime/test_small_rows.py``,
``test_staged_sink.py``): what the JSON text must carry, from a frame's ``id`` column."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import Column
from pyspark.sql import functions as F

from spark_purgatory.delta.staging import STAGED

#: JSON's escapes, control characters, non-ASCII
AWKWARD = 'a"b\\c\n\t\u00e9\u2603\U0001f600 '


def staged_columns(*, reverse: bool = False) -> list[Column]:
    """``STAGED``'s columns from ``id`` (in reverse order with ``reverse``): every third row's
    values null, strings with what JSON must escape, whole numbers beyond 2**53 and negative."""
    values = []
    for field in reversed(STAGED) if reverse else STAGED:
        if field.type == pa.string():
            value = F.concat(F.lit(AWKWARD), F.col("id").cast("string"))
        else:
            value = F.col("id") * F.lit(2**60 // 8) - F.lit(3)
        kind = "string" if field.type == pa.string() else "bigint"
        values.append(F.when(F.col("id") % 3 == 0, F.lit(None)).otherwise(value).cast(kind).alias(field.name))
    return values
