"""The input's checks and routes as JVM functions, when the project's JAR is on the classpath.

Spark optimizes a streaming query's plan again every micro-batch, and the checks and routing
written as SQL are hundreds of expression nodes.  The checks JAR (``io.sparkpurgatory.checks``)
does the same work in a few functions of one node each, static methods Spark calls from its
generated code (``StaticInvoke``), not Java UDFs that convert every row.

Each getter returns the function's SQL name, or None where the JAR cannot serve (not on the
class path, Spark Connect, or another ``CALLS_VERSION``): the caller then writes the SQL,
which is the reference and gives the same rows.

Invariant: a row gets the same reason, fields and copies from either reading.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from pyspark.sql import SparkSession
from pyspark.sql import types as T

from ..config import InputLimits
from ..contract import OPERATION_CHECKS, table_text
from ..runtime.jars import fits, jar_paths, jars_hint, spark_notice
from ..runtime.settings import is_connect
from .per_client import kept

log = logging.getLogger(__name__)

_TEXT, _TEXTS = T.StringType(), T.ArrayType(T.StringType())
_INT, _LONG, _BYTE = T.IntegerType(), T.LongType(), T.ByteType()


def _struct(**fields: T.DataType) -> T.StructType:
    return T.StructType([T.StructField(name, kind) for name, kind in fields.items()])


_PACKAGE = "io.sparkpurgatory.checks"
#: (SQL name, class, return type) of each function (``jvm/spark-purgatory/checks``)
CHECKS = (
    "spark_purgatory_operation_checks",
    f"{_PACKAGE}.OperationChecks",
    _struct(reason=_TEXT, keys=_TEXTS, condition=_TEXT, members=_TEXTS),
)
EVENT_CHECKS = (
    "spark_purgatory_event_checks",
    f"{_PACKAGE}.EventChecks",
    _struct(reason=_TEXT, op_id=_TEXT, source=_TEXT),
)
#: an operation's copies, from ``ROUTES`` and ``ROWS``: the role as its name's place in
#: ``shard.roles.ROLES`` (a number: no CASE over the roles in the plan)
_COPIES = T.ArrayType(_struct(_shard=_INT, _role=_BYTE, _peer=_INT, _keys=_TEXTS))
ROUTES = (
    "spark_purgatory_operation_routes",
    f"{_PACKAGE}.OperationRoutes",
    _struct(reason=_TEXT, copies=_COPIES),
)
ROWS = (
    "spark_purgatory_operation_rows",
    f"{_PACKAGE}.OperationRows",
    _struct(reason=_TEXT, condition=_TEXT, members=_TEXTS, copies=_COPIES, ts_ms=_LONG),
)
#: a typed event checked and routed: the checks' fields, the event time (null out of range),
#: the key's shard (-1 for a rejected row) and the role's number
EVENT_ROWS = (
    "spark_purgatory_event_rows",
    f"{_PACKAGE}.EventRows",
    T.StructType([*EVENT_CHECKS[2].fields, *_struct(ts_ms=_LONG, shard=_INT, role=_BYTE).fields]),
)
#: a wake line's rows (``routing.route_wake``): each (shard, role's number, clock's watermark)
WAKE_ROWS = (
    "spark_purgatory_wake_rows",
    f"{_PACKAGE}.WakeRows",
    T.ArrayType(_struct(_shard=_INT, _role=_BYTE, _clock=_LONG)),
)


def checks_table(max_timeout_ms: int, limits: InputLimits | None = None) -> str:
    """The operations' checks as the JVM reads them: the contract's table with this query's
    limits (the latest event time accepted comes with each row)."""
    return table_text(OPERATION_CHECKS, (limits or InputLimits()).bounds(max_timeout_ms))


#: the session settings that record a registered function (``_registered``)
_REGISTERED = "spark.purgatory.registered"


def operation_checks(spark: SparkSession) -> str | None:
    """The checks' SQL name, registered in ``spark``'s session; None without the JAR, or with
    a JAR of another ``CALLS_VERSION`` (it would accept what this package rejects)."""
    name = _registered(spark, *CHECKS)
    return name if name and _current(spark) else None


def event_checks(spark: SparkSession) -> str | None:
    """The event checks' SQL name, registered in ``spark``'s session; None without the JAR."""
    return _registered(spark, *EVENT_CHECKS)


def operation_routes(spark: SparkSession) -> str | None:
    """The routes' SQL name (a static call); None without the JAR."""
    return _static(spark, *ROUTES, "route")


#: what registers the static calls
_STATIC = f"{_PACKAGE}.StaticCalls"


def operation_rows(spark: SparkSession) -> str | None:
    """The checks-and-routes function's SQL name (a static call); None without the JAR."""
    return _static(spark, *ROWS, "rows", quiet=True)  # the two functions serve without it


#: (SQL name, class) of the micro-batch's time for generated code
BATCH_MILLIS = ("spark_purgatory_batch_millis", f"{_PACKAGE}.BatchMillis")
#: (SQL name, class) of the generator that ends each Spark partition with the inputs' marks
BATCH_MARKS = ("spark_purgatory_batch_marks", f"{_PACKAGE}.BatchMarks")


def batch_millis(spark: SparkSession) -> str | None:
    """The SQL name of ``BatchMillis(millis)``: the micro-batch's time, read by the generated
    code by reference, so the code is the same in every micro-batch; None without the JAR."""
    return _self_registering(spark, *BATCH_MILLIS)


def batch_marks(spark: SparkSession) -> str | None:
    """The SQL name of ``BatchMarks``: a generator that passes the routed rows through and
    ends each Spark partition with one ``mark`` row per input and shard group; None without
    the JAR (the shards then move as far as their own rows say)."""
    return _self_registering(spark, *BATCH_MARKS)


def _self_registering(spark: SparkSession, name: str, cls: str) -> str | None:
    """``name``, registered by ``cls``'s own ``register``; None without the JAR."""
    if not _calls(spark, quiet=True) or not _loadable(spark, cls):
        return None

    def register() -> None:
        registry = spark._jsparkSession.sessionState().functionRegistry()  # type: ignore[attr-defined]
        getattr(spark._jvm.io.sparkpurgatory.checks, cls.rsplit(".", 1)[1]).register(registry, name)  # type: ignore[attr-defined]

    return _once(spark, name, cls, register)


def event_rows(spark: SparkSession) -> str | None:
    """The events' check-and-route function's SQL name, as ``operation_rows``."""
    return _static(spark, *EVENT_ROWS, "rows", quiet=True)


def wake_rows(spark: SparkSession) -> str | None:
    """The wake lines' function's SQL name, as ``operation_rows`` (the SQL serves without it)."""
    return _static(spark, *WAKE_ROWS, "rows", quiet=True)


def _static(
    spark: SparkSession, name: str, cls: str, returns: T.DataType, method: str, *, quiet: bool = False
) -> str | None:
    """``name``, registered as calls of ``cls``'s static ``method``; None without the JAR."""
    if not _calls(spark, quiet=quiet) or not _loadable(spark, cls):
        return None

    def register() -> None:
        registry = spark._jsparkSession.sessionState().functionRegistry()  # type: ignore[attr-defined]
        calls = spark._jvm.io.sparkpurgatory.checks.StaticCalls  # type: ignore[attr-defined]
        calls.register(registry, name, cls, method, returns.json())

    return _once(spark, name, _STATIC, register)


#: the version of the static calls' signatures this package calls (``StaticCalls.VERSION``)
CALLS_VERSION = 5


def _calls(spark: SparkSession, *, quiet: bool) -> bool:
    """Can ``spark`` call the JAR's static calls, of the version this package calls?"""
    return _available(spark, _STATIC, quiet=quiet) and _current(spark)


def _current(spark: SparkSession) -> bool:
    """Are the JAR's static calls of ``CALLS_VERSION``?  Older calls would fail the query:
    the input is read as SQL instead, and the log says why."""
    versions = kept(spark._jvm, "static calls' version")  # type: ignore[attr-defined]
    if "found" not in versions:  # a loaded class keeps its version: asked once per JVM
        try:
            versions["found"] = spark._jvm.io.sparkpurgatory.checks.StaticCalls.VERSION  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - a JAR built before the version: not current (ask again)
            pass
    found = versions.get("found")
    if found == CALLS_VERSION:
        return True
    if "version" not in _SAID:
        _SAID.add("version")
        log.warning(
            "spark-purgatory's checks JAR has calls of version %s, this package calls version %s: "
            "inputs are read as SQL (the same rows); use the JAR of this release",
            found,
            CALLS_VERSION,
        )
    return False


def _registered(
    spark: SparkSession, name: str, cls: str, returns: T.DataType, *, quiet: bool = False
) -> str | None:
    """``name``, registered as a Java UDF of ``cls``; None when ``cls`` is not available."""
    if not _available(spark, cls, quiet=quiet):
        return None
    return _once(spark, name, cls, lambda: spark.udf.registerJavaFunction(name, cls, returns))


def _once(spark: SparkSession, name: str, how: str, register: Callable[[], None]) -> str:
    """``name``, registered by ``register`` once per session and way (``how``): Spark warns
    when a function is replaced (its catalog is not asked: that creates spark-warehouse/)."""
    marker = f"{_REGISTERED}.{name}"
    if spark.conf.get(marker, None) != how:
        register()
        spark.conf.set(marker, how)
    return name


def _available(spark: SparkSession, cls: str, *, quiet: bool) -> bool:
    """Can ``spark`` call ``cls``: on the driver's class path, or the package's JARs added
    (``_added``), and not a Spark Connect client, which cannot look?"""
    if is_connect(spark):
        if not quiet:
            _say_sql("a Spark Connect client cannot call them")
        return False
    _say_spark(spark)
    if not _loadable(spark, cls) and not _added(spark, cls):
        log.debug("%s is not on the classpath: SQL instead", cls)
        if not quiet:
            _say_sql(f"{cls} is not on the driver's class path")
        return False
    return True


#: what this process has said about the checks running as SQL (``_say_sql``): once
_SAID: set[str] = set()


def _say_sql(why: str) -> None:
    """One warning per process that the checks and routes run as SQL."""
    if "sql" in _SAID:
        return
    _SAID.add("sql")
    log.warning(
        "spark-purgatory's checks JAR is not in use (%s): inputs are checked and routed by SQL, "
        "the same rows, more planning per micro-batch (docs/performance.md); %s",
        why,
        jars_hint(),
    )


def _say_spark(spark: SparkSession) -> None:
    """Once per process: ``runtime.jars.spark_notice`` when the session's Spark is not the JARs'
    (a warning only when the JARs are left out)."""
    if "spark" in _SAID:
        return
    _SAID.add("spark")
    notice = spark_notice(spark.version)
    if notice:
        log.log(logging.INFO if fits(spark.version) else logging.WARNING, "%s", notice)


def _loadable(spark: SparkSession, cls: str) -> bool:
    """Does the driver's class loader find ``cls``?  A class found stays found, kept per JVM
    and Python thread (Py4J pins each to a JVM thread, whose context class loader ``ADD JAR``
    sets); one not found is asked again."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    found, key = kept(jvm, "loadable classes"), (threading.get_ident(), cls)
    if key in found:
        return True
    try:
        jvm.java.lang.Class.forName(cls, False, jvm.Thread.currentThread().getContextClassLoader())
    except Exception:  # py4j wraps ClassNotFoundException
        return False
    found[key] = True
    return True


def _added(spark: SparkSession, cls: str) -> bool:
    """``ADD JAR`` of the package's JARs for a session built without them; False when there
    are none that fit this Spark, or the session refuses."""
    for path in jar_paths("checks"):
        try:
            spark.sql(f"ADD JAR '{path}'")
        except Exception as exc:  # noqa: BLE001 - any refusal means: SQL instead
            log.info("could not add %s to the session (%s): the checks are SQL", path, exc)
            return False
        log.info("added %s to the session: the checks run as JVM functions", path)
    return _loadable(spark, cls)
