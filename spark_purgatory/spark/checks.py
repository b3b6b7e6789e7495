"""A typed operation's checks as one JVM function, when the project's JAR is on the classpath.

Spark analyses and optimizes a streaming query's whole plan again in every micro-batch, and
the typed operations' checks written as SQL (``sources``: keys and members cleaned, the
condition read, fourteen reasons in the contract's order) are some hundreds of expression
nodes that every rule walks each time: a large part of the driver's time per micro-batch
(docs/performance.md).  ``sparkpurgatory.OperationChecks`` (``jvm/checks``, compiled by
``make jars`` against the pyspark wheel's own JARs into ``.jars/checks``) does the same
checks in one function, one node for Catalyst.  Its arguments are the columns the SQL
reading computes first (the event time in epoch ms, the whole-number timeout); it returns
the reason and the cleaned keys, condition and members.

The SQL reading stays the reference and the fallback: where the JAR is not on the driver's
classpath (a session built without ``spark.jars``, a cluster without the library),
``operation_checks`` says so by returning None and ``sources`` builds the SQL.  The two give
the same rows (``tests/test_checks_jar.py`` runs both on the same input).

Invariant: a row gets the same reason, keys, condition and members from either reading.
"""

from __future__ import annotations

import logging

from pyspark.sql import SparkSession
from pyspark.sql import types as T

from ..engine.conditions import ALL, CONDITION_NAMES, CONDITIONS, NEEDS_TARGET

__all__ = ["FUNCTION", "CLASS", "operation_checks", "condition_names"]

log = logging.getLogger(__name__)

#: the SQL name the function is registered under, and its class (``jvm/checks/src``)
FUNCTION, CLASS = "spark_purgatory_operation_checks", "sparkpurgatory.OperationChecks"

_RETURNS = T.StructType(
    [
        T.StructField("reason", T.StringType()),
        T.StructField("keys", T.ArrayType(T.StringType())),
        T.StructField("condition", T.StringType()),
        T.StructField("members", T.ArrayType(T.StringType())),
    ]
)


def condition_names() -> str:
    """The condition names as the function takes them: every name, those that need a target,
    the one that needs members (``engine.conditions``: one source for both readings)."""
    needing = " ".join(str(CONDITION_NAMES[code]) for code in NEEDS_TARGET)
    return f"{' '.join(CONDITIONS)}|{needing}|{CONDITION_NAMES[ALL]}"


def operation_checks(spark: SparkSession) -> str | None:
    """The function's SQL name, registered in ``spark``'s session; None when its class is not
    on the driver's classpath, or the session is a Spark Connect client, which cannot look
    (``sources`` then writes the checks as SQL)."""
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        return None
    jvm = spark._jvm  # type: ignore[attr-defined]
    try:
        jvm.java.lang.Class.forName(CLASS, False, jvm.Thread.currentThread().getContextClassLoader())
    except Exception:  # py4j wraps ClassNotFoundException
        log.debug("%s is not on the classpath: the operations' checks are SQL", CLASS)
        return None
    spark.udf.registerJavaFunction(FUNCTION, CLASS, _RETURNS)
    return FUNCTION
