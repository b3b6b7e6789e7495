"""An operation's checks and routes as JVM functions, when the project's JAR is on the classpath.

Spark analyses and optimizes a streaming query's whole plan again in every micro-batch, and
the operations' checks and routing written as SQL (``sources``: keys and members cleaned,
the condition read, seventeen reasons in the contract's order; ``routing``: each operation's
copies, their shards, roles, peers and keys) are some hundreds of expression nodes that every
rule walks each time, and that Spark turns into Java source again each time: a large part of
the driver's time per micro-batch (docs/performance-history.md).  The project's checks JAR (the
Maven module ``jvm/spark-purgatory/checks``, built and unit-tested against the pyspark
wheel's Spark into the package's ``jars/`` folder: ``runtime.jars``) does the same work in a few
functions, one node each for Catalyst (package ``io.sparkpurgatory.checks``):

* ``OperationChecks`` (typed input): from the columns the SQL reading
  computes first (the event time in epoch ms, the whole-number timeout), the reason and the
  cleaned keys, condition and members;
* ``EventChecks`` (typed input): a completion event's reason, and its op_id
  and source read as absent where blank;
* ``OperationRoutes`` (any input): from the parsed keys, op_id, reason and
  raw text, the reason (``cross_shard_keys`` where such operations are off) and the copies;
* ``OperationRows`` (typed input, a stream's routing): the two before in one call, the
  checks' arguments then the routes' (``routing.route_typed_operations``); ``EventRows``
  the same for a typed event (its checks and its key's shard, ``routing.route_typed_events``),
  and ``WakeRows`` a wake line's rows (``routing.route_wake``).  Not a Java UDF
  but a static method that Spark calls from its generated code on its own values
  (``UTF8String``, ``ArrayData``, numbers; an ``InternalRow`` back), registered by
  ``StaticCalls`` as a Catalyst ``StaticInvoke``: a Java UDF has each argument converted to
  a Java object and its result back, row by row, which cost more than the checks (the
  three ``...Rows`` and ``OperationRoutes`` are such calls).

And ``BatchMarks``, not a check: a generator that passes the routed rows through and ends each
Spark partition with every input's largest event time there, for every primary shard
(``batch_marks``, ``input_stream``: the watermark Spark applies next, known in the micro-batch).

And ``BatchMillis``, not a check: a micro-batch's time (``unix_millis(current_timestamp())``)
as an expression that Spark's generated code reads by reference, so the code is the same in
every micro-batch (``batch_millis``, ``sql_text.latest_ts``).

Beside it in the package's ``jars/`` folder (``runtime.jars.jar_files``: the wheel carries
them), from the same build (``jvm/spark-purgatory/checkpoint``):
``io.sparkpurgatory.checkpoint.LocalCheckpointFiles``, the checkpoint file manager
``local_session`` names (``runtime.settings.checkpoint_files``), not a check.

The SQL stays the reference and the fallback: where the JAR is not on the driver's classpath
(a cluster whose session refuses ``ADD JAR``, a Spark Connect
client, or a JAR whose calls are of another version: ``CALLS_VERSION``), ``operation_checks``
/ ``event_checks`` / ``operation_routes`` / ``operation_rows`` / ``event_rows`` /
``wake_rows`` / ``batch_millis`` return None and ``sources`` / ``routing`` / ``sql_text``
build the SQL.  Both give the same rows
(``tests/spark/test_checks_jar.py`` runs both on random input).

Invariant: a row gets the same reason, fields and copies from either reading.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from pyspark.sql import SparkSession
from pyspark.sql import types as T

from ..config import InputLimits
from ..contract import CONDITIONS, TARGET_COUNTS_MEMBERS, TARGETED, WITH_MEMBERS
from ..runtime.jars import fits, jar_paths, jars_hint, spark_notice
from ..runtime.settings import is_connect
from .per_client import kept

__all__ = [
    "CHECKS",
    "EVENT_CHECKS",
    "ROUTES",
    "ROWS",
    "operation_checks",
    "operation_rows",
    "event_checks",
    "EVENT_ROWS",
    "event_rows",
    "WAKE_ROWS",
    "wake_rows",
    "operation_routes",
    "condition_names",
    "batch_millis",
    "batch_marks",
]

log = logging.getLogger(__name__)

_TEXTS = T.ArrayType(T.StringType())
#: (SQL name, class, return type) of each function (``jvm/spark-purgatory/checks``)
CHECKS = (
    "spark_purgatory_operation_checks",
    "io.sparkpurgatory.checks.OperationChecks",
    T.StructType(
        [
            T.StructField("reason", T.StringType()),
            T.StructField("keys", _TEXTS),
            T.StructField("condition", T.StringType()),
            T.StructField("members", _TEXTS),
        ]
    ),
)
EVENT_CHECKS = (
    "spark_purgatory_event_checks",
    "io.sparkpurgatory.checks.EventChecks",
    T.StructType(
        [
            T.StructField("reason", T.StringType()),
            T.StructField("op_id", T.StringType()),
            T.StructField("source", T.StringType()),
        ]
    ),
)
#: an operation's copies, from ``ROUTES`` and ``ROWS``: the role as its name's place in
#: ``shard.roles.ROLES`` (a number: no CASE over the roles in the plan)
_COPIES = T.ArrayType(
    T.StructType(
        [
            T.StructField("_shard", T.IntegerType()),
            T.StructField("_role", T.ByteType()),
            T.StructField("_peer", T.IntegerType()),
            T.StructField("_keys", _TEXTS),
        ]
    )
)
ROUTES = (
    "spark_purgatory_operation_routes",
    "io.sparkpurgatory.checks.OperationRoutes",
    T.StructType([T.StructField("reason", T.StringType()), T.StructField("copies", _COPIES)]),
)
ROWS = (
    "spark_purgatory_operation_rows",
    "io.sparkpurgatory.checks.OperationRows",
    T.StructType(
        [
            T.StructField("reason", T.StringType()),
            T.StructField("condition", T.StringType()),
            T.StructField("members", _TEXTS),
            T.StructField("copies", _COPIES),
            T.StructField("ts_ms", T.LongType()),
        ]
    ),
)
#: a typed event checked and routed (``routing.route_typed_events``): the checks' reason,
#: op_id and source, the event time (epoch ms, null out of range), the key's shard (-1 for a
#: rejected row) and the role's number
EVENT_ROWS = (
    "spark_purgatory_event_rows",
    "io.sparkpurgatory.checks.EventRows",
    T.StructType(
        [
            *EVENT_CHECKS[2].fields,
            T.StructField("ts_ms", T.LongType()),
            T.StructField("shard", T.IntegerType()),
            T.StructField("role", T.ByteType()),
        ]
    ),
)
#: a wake line's rows (``routing.route_wake``): each (shard, role's number, clock's watermark)
WAKE_ROWS = (
    "spark_purgatory_wake_rows",
    "io.sparkpurgatory.checks.WakeRows",
    T.ArrayType(
        T.StructType(
            [
                T.StructField("_shard", T.IntegerType()),
                T.StructField("_role", T.ByteType()),
                T.StructField("_clock", T.LongType()),
            ]
        )
    ),
)


def condition_names(limits: InputLimits | None = None) -> str:
    """The condition names as the checks take them: every name, those that need (and use) a
    target, those that need (and use) members (``contract.inputs``: one source for every
    reader); then the most keys and members an operation may have (``input.max.keys``,
    ``input.max.members``); then those whose target may not exceed their members."""
    limits = limits or InputLimits()
    parts = (
        " ".join(CONDITIONS),
        " ".join(TARGETED),
        " ".join(WITH_MEMBERS),
        str(int(limits.keys)),
        str(int(limits.members)),
        " ".join(TARGET_COUNTS_MEMBERS),
    )
    return "|".join(parts)


#: the session settings that record a registered function (``_registered``)
_REGISTERED = "spark.purgatory.registered"


def operation_checks(spark: SparkSession) -> str | None:
    """The checks' SQL name, registered in ``spark``'s session; None without the JAR, or with
    a JAR whose checks are of another version (``CALLS_VERSION``: a JAR built before the
    reasons of this package would accept what they reject)."""
    name = _registered(spark, *CHECKS)
    return name if name and _current(spark) else None


def event_checks(spark: SparkSession) -> str | None:
    """The event checks' SQL name, registered in ``spark``'s session; None without the JAR."""
    return _registered(spark, *EVENT_CHECKS)


def operation_routes(spark: SparkSession) -> str | None:
    """The routes' SQL name, registered in ``spark``'s session as a call on Spark's own values
    (``_STATIC``); None without the JAR."""
    return _static(spark, *ROUTES, "route")


#: what registers ``ROWS``: a static method called from Spark's generated code on Spark's own
#: values (a Catalyst ``StaticInvoke``), where a Java UDF converts every argument to a Java
#: object and the result back, row by row
_STATIC = "io.sparkpurgatory.checks.StaticCalls"


def operation_rows(spark: SparkSession) -> str | None:
    """The checks-and-routes function's SQL name, registered in ``spark``'s session as a call
    on Spark's own values (``_STATIC``); None without the JAR (or a JAR built before it)."""
    return _static(spark, *ROWS, "rows", quiet=True)  # the two functions serve without it


#: the micro-batch's time for generated code (``batch_millis``): (SQL name, class)
BATCH_MILLIS = ("spark_purgatory_batch_millis", "io.sparkpurgatory.checks.BatchMillis")


def batch_millis(spark: SparkSession) -> str | None:
    """The SQL name of ``BatchMillis(millis)``, registered in ``spark``'s session: its argument
    (a micro-batch's time) read by Spark's generated code from the code's references, so the
    code is the same in every micro-batch (Spark compiles it once) and no projection leaves
    generated code to hide the time (``sql_text.latest_ts``); None without the JAR (or one
    built before it)."""
    name, cls = BATCH_MILLIS
    if not _calls(spark, quiet=True):
        return None

    def register() -> None:
        registry = spark._jsparkSession.sessionState().functionRegistry()  # type: ignore[attr-defined]
        spark._jvm.io.sparkpurgatory.checks.BatchMillis.register(registry, name)  # type: ignore[attr-defined]

    return _once(spark, name, cls, register)


#: the routed rows with each input's largest event time per partition for every shard group
#: (``batch_marks``): (SQL name, class)
BATCH_MARKS = ("spark_purgatory_batch_marks", "io.sparkpurgatory.checks.BatchMarks")


def batch_marks(spark: SparkSession) -> str | None:
    """The SQL name of ``BatchMarks``, a generator registered in ``spark``'s session: the
    routed rows as they are, and at the end of each Spark partition one ``mark`` row per input
    and shard group with that input's largest event time there (``input_stream``); None
    without the JAR (or one built before it): the shards then move as far as their own rows
    say (``shard.input.batch_watermark``)."""
    name, cls = BATCH_MARKS
    if not _calls(spark, quiet=True) or not _loadable(spark, cls):
        return None

    def register() -> None:
        registry = spark._jsparkSession.sessionState().functionRegistry()  # type: ignore[attr-defined]
        spark._jvm.io.sparkpurgatory.checks.BatchMarks.register(registry, name)  # type: ignore[attr-defined]

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
    """``name``, registered as calls of ``cls``'s static ``method`` by ``_STATIC``; None as
    ``_registered`` (or with a JAR built before ``_STATIC`` or ``cls``, or for calls of other
    signatures: ``_current``)."""
    if not _calls(spark, quiet=quiet) or not _loadable(spark, cls):
        return None

    def register() -> None:
        registry = spark._jsparkSession.sessionState().functionRegistry()  # type: ignore[attr-defined]
        calls = spark._jvm.io.sparkpurgatory.checks.StaticCalls  # type: ignore[attr-defined]
        calls.register(registry, name, cls, method, returns.json())

    return _once(spark, name, _STATIC, register)


#: the version of the static calls' signatures this package calls (``StaticCalls.VERSION``)
CALLS_VERSION = 3


def _calls(spark: SparkSession, *, quiet: bool) -> bool:
    """Can ``spark`` call the JAR's static calls and ``BatchMillis``: ``_STATIC`` there
    (``_available``) and of the version this package calls (``_current``)?"""
    return _available(spark, _STATIC, quiet=quiet) and _current(spark)


def _current(spark: SparkSession) -> bool:
    """Are the JAR's static calls those this package calls (``CALLS_VERSION``)?  A JAR built
    from older sources registers calls whose methods Spark cannot find, which would fail the
    query: the input is read as SQL instead, and the log says why."""
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
    """``name``, registered for ``cls``; None when the class is not on the driver's classpath
    and the package's JARs cannot be added (``_added``), or the session is a Spark Connect
    client, which cannot look (the caller writes SQL)."""
    if not _available(spark, cls, quiet=quiet):
        return None
    return _once(spark, name, cls, lambda: spark.udf.registerJavaFunction(name, cls, returns))


def _once(spark: SparkSession, name: str, how: str, register: Callable[[], None]) -> str:
    """``name``, registered by ``register`` once per session and way (``how``: the class
    registered, or ``_STATIC``): a second start() would replace it, and Spark warns that it
    did (the session's catalog is not asked: that would create spark-warehouse/ in the
    working directory)."""
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
    """One warning per process that the checks and routes run as SQL: the job gives the same
    rows, with a plan Spark optimizes longer in every micro-batch."""
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
    """Once per process, at the first start: the one line ``runtime.jars.spark_notice`` has
    when the session's Spark is not the one the project's JARs were built for; a warning only
    when the JARs are left out (a patch release apart is INFO: nothing for the user to do)."""
    if "spark" in _SAID:
        return
    _SAID.add("spark")
    notice = spark_notice(spark.version)
    if notice:
        log.log(logging.INFO if fits(spark.version) else logging.WARNING, "%s", notice)


def _loadable(spark: SparkSession, cls: str) -> bool:
    """Does the driver's class loader find ``cls``?  Asked of the JVM while it does not
    (``ADD JAR`` may bring it), and a class found stays found: kept per JVM (``per_client``)
    and Python thread (Py4J pins each to a JVM thread, whose context class loader is the one
    asked, and ``ADD JAR`` sets only its own), since every route's plan asks (a round trip
    per dotted part)."""
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
    """A session built without the project's JARs (``SparkSession.builder`` as it stands)
    gets them from the package (``runtime.jars.jar_files``: the wheel's package data, or what
    ``make checks-jar`` built in a checkout): ``ADD JAR`` puts them on the session's class
    loader and ships them to the executors.  False when there are none (or they do not fit
    this Spark: ``runtime.jars.fits``), or the session refuses (a cluster that allows no
    added JARs)."""
    for path in jar_paths("checks"):
        try:
            spark.sql(f"ADD JAR '{path}'")
        except Exception as exc:  # noqa: BLE001 - any refusal means: SQL instead
            log.info("could not add %s to the session (%s): the checks are SQL", path, exc)
            return False
        log.info("added %s to the session: the checks run as JVM functions", path)
    return _loadable(spark, cls)
