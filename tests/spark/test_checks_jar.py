"""The project's JVM functions give the rows the SQL gives.

``spark.checks``: with the project's JARs on the classpath (``make checks-jar`` builds them), a typed
operation's reason and its cleaned keys, condition and members, and any operation's copies
(shards, roles, peers, keys), come from one function call each instead of some hundreds of
SQL expression nodes.  The SQL is the reference: random operations (blank and repeated keys,
odd condition spellings, timeouts and targets out of range, events in the future; keys
across shards, with and without a shard key delimiter, the registry on and off, rejected
rows) go through both, and every row must come out the same.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import threading
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_purgatory.config import InputLimits, PurgatoryConfig
from spark_purgatory.handoff.shard_handoff import registers
from spark_purgatory.shard.roles import ROLE_OPERATION, ROLES
from spark_purgatory.spark import checks, per_client, routing, sources, sql_text
from spark_purgatory.spark.sources import parse_events, parse_operations

pytestmark = [pytest.mark.spark, pytest.mark.jars("checks")]

_SCHEMA = (
    "op_id string, key string, keys array<string>, ts timestamp, timeout_ms long, condition string, "
    "target double, members array<string>, payload string"
)
_UTC = dt.timezone.utc
_TEXT = st.sampled_from(["", " ", "  a", "a", "b ", "B", "k1", "k2", "\u212a", "\U0001f600", "\uffff", "é"])
_LISTS = st.one_of(st.none(), st.lists(st.one_of(st.none(), _TEXT), max_size=4))
_CONDITIONS = st.one_of(
    st.none(),
    st.sampled_from(
        [
            "any",
            "count",
            "sum",
            "all",
            "offset",
            "quorum",
            " COUNT ",
            "Sum",
            " QUORUM",
            "\u212aount",
            "\u0130ll",
            "most",
            "",
            " ",
        ]
    ),
)
_TIMES = st.one_of(
    st.none(),
    st.sampled_from(
        [
            dt.datetime(2026, 1, 1, tzinfo=_UTC),
            dt.datetime(1969, 12, 31, tzinfo=_UTC),  # before the epoch: bad_ts
            dt.datetime(2300, 1, 1, tzinfo=_UTC),  # after contract.MAX_TS_MS: bad_ts
            dt.datetime(2100, 1, 1, tzinfo=_UTC),  # readable, too far ahead: ts_in_future
        ]
    ),
)
_OPERATIONS = st.tuples(
    st.one_of(st.none(), _TEXT),
    st.one_of(st.none(), _TEXT),
    _LISTS,
    _TIMES,
    st.one_of(st.none(), st.sampled_from([-1, 0, 5, 1000, 1001, 10**12])),
    _CONDITIONS,
    st.one_of(st.none(), st.sampled_from([1.0, 0.0, 2.0, 3.0, math.nan, math.inf, -math.inf])),
    _LISTS,
    st.one_of(st.none(), _TEXT),
)


def _rows(df, reading: str, monkeypatch) -> list[tuple]:
    """The parsed rows by one reading: ``jar`` (the function) or ``sql`` (its fallback)."""
    with monkeypatch.context() as patched:
        if reading == "sql":
            patched.setattr(sources, "operation_checks", lambda spark: None)
        parsed = parse_operations(df, max_timeout_ms=1000, max_future_ms=86_400_000)
        plan = parsed._jdf.queryExecution().optimizedPlan().toString()
        assert (checks.CHECKS[0] in plan) == (reading == "jar")
        # NaN == NaN here: a row is the same when its text is
        return [tuple(repr(v) for v in row) for row in parsed.collect()]


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_OPERATIONS, min_size=1, max_size=120))
def test_the_function_gives_every_row_the_sql_gives(spark, monkeypatch, operations):
    df = spark.createDataFrame(operations, _SCHEMA)
    jar, sql = _rows(df, "jar", monkeypatch), _rows(df, "sql", monkeypatch)
    assert len(jar) == len(operations)
    assert jar == sql


_EVENTS_SCHEMA = "key string, ts timestamp, op_id string, source string, value double"
_EVENTS = st.tuples(
    st.one_of(st.none(), _TEXT),
    _TIMES,
    st.one_of(st.none(), _TEXT),
    st.one_of(st.none(), _TEXT),
    st.one_of(st.none(), st.sampled_from([1.0, -2.5, math.nan, math.inf, -math.inf])),
)


def _events(df, reading: str, monkeypatch) -> list[tuple]:
    with monkeypatch.context() as patched:
        if reading == "sql":
            patched.setattr(sources, "event_checks", lambda spark: None)
        parsed = parse_events(df, max_future_ms=86_400_000)
        plan = parsed._jdf.queryExecution().optimizedPlan().toString()
        assert (checks.EVENT_CHECKS[0] in plan) == (reading == "jar")
        return [tuple(repr(v) for v in row) for row in parsed.collect()]


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_EVENTS, min_size=1, max_size=120))
def test_the_event_function_gives_every_row_the_sql_gives(spark, monkeypatch, events):
    df = spark.createDataFrame(events, _EVENTS_SCHEMA)
    jar = _events(df, "jar", monkeypatch)
    assert len(jar) == len(events)
    assert jar == _events(df, "sql", monkeypatch)


_PARSED = (
    "op_id string, keys array<string>, ts_ms bigint, timeout_ms bigint, condition string, "
    "target double, members array<string>, payload string, raw string, reason string"
)
_KEYS = st.sampled_from(["a", "b", "c", "order-1:x", "order-1:y", "order-2:x", "k\u00e9", "\U0001f600"])
_PARSED_ROWS = st.tuples(
    st.one_of(st.none(), st.sampled_from(["o1", "o2", "o3", "\u212a"])),
    st.lists(_KEYS, min_size=1, max_size=4, unique=True).map(sorted),
    st.just(1_000),
    st.just(10),
    st.just("any"),
    st.none(),
    st.just([]),
    st.none(),
    st.one_of(st.none(), st.sampled_from(['{"op_id": 1}', "not json"])),
    st.one_of(st.none(), st.none(), st.just("missing_ts")),
)


def _routed(parsed, config: PurgatoryConfig, claims: bool, reading: str, monkeypatch) -> list[tuple]:
    with monkeypatch.context() as patched:
        if reading == "sql":
            patched.setattr(routing, "operation_routes", lambda spark: None)
        routed = routing._route_operations(parsed, config, claims=claims)
        plan = routed._jdf.queryExecution().optimizedPlan().toString()
        assert (plan.count(f"static_invoke({checks.ROUTES[1]}.route(") == 1) == (reading == "jar")
        return sorted(tuple(repr(v) for v in row) for row in routed.collect())


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(_PARSED_ROWS, min_size=1, max_size=60),
    st.integers(1, 5),
    st.sampled_from(["", ":"]),
    st.booleans(),
    st.booleans(),
)
def test_the_routes_function_gives_every_copy_the_sql_gives(
    spark, monkeypatch, tmp_path, rows, shards, delimiter, cross_shard, claims
):
    config = PurgatoryConfig(
        shards=shards,
        shard_key_delimiter=delimiter,
        cross_shard_operations=cross_shard,
        state_path=str(tmp_path / "state"),  # the op_id registry needs one
    )
    parsed = spark.createDataFrame(rows, _PARSED)
    jar = _routed(parsed, config, claims, "jar", monkeypatch)
    assert len(jar) >= len(rows)
    assert jar == _routed(parsed, config, claims, "sql", monkeypatch)


def test_a_session_without_the_class_reads_the_checks_as_sql_and_says_so_once(spark, monkeypatch, caplog):
    """The fallback is chosen by the class's presence on the driver: a name that is not there
    gives None and registers nothing; the process says once that the checks run as SQL."""
    name, _, returns = checks.CHECKS
    monkeypatch.setattr(checks, "CHECKS", (name, "io.sparkpurgatory.checks.NoSuchChecks", returns))
    monkeypatch.setattr(checks, "_SAID", set())
    monkeypatch.setattr(checks, "_added", lambda spark, cls: False)  # the checkout's JAR not added either
    with caplog.at_level("WARNING", logger=checks.__name__):
        assert checks.operation_checks(spark) is None
        assert checks.operation_checks(spark) is None
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(said) == 1 and "NoSuchChecks" in said[0] and "`spark-purgatory jars`" in said[0]
    monkeypatch.undo()
    assert checks.operation_checks(spark) == name
    assert checks.operation_routes(spark) == checks.ROUTES[0]
    assert checks.event_checks(spark) == checks.EVENT_CHECKS[0]
    table = checks.checks_table(1000).split("\n")  # the contract's checks a typed row can fail
    assert (
        table[0] == "missing_op_id\tabsent\top_id\t-\t-"
        and "timeout_above_max\tabove\ttimeout_ms\t1000\t-" in table
    )


def _routed_rows(frame) -> list[tuple]:
    return sorted(tuple(repr(v) for v in row) for row in frame.collect())


#: an event time as epoch ms (a bigint ``ts``): none, valid, before the epoch, past the
#: contract's end (``contract.MAX_TS_MS``), readable but too far ahead
_EPOCH_MS = st.one_of(
    st.none(), st.sampled_from([0, 1_767_225_600_000, -1, 7_258_118_400_000, 4_102_444_800_000])
)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.tuples(_OPERATIONS, _EPOCH_MS), min_size=1, max_size=80),
    st.integers(1, 4),
    st.booleans(),
    st.booleans(),
)
def test_one_call_checks_and_routes_every_typed_operation_as_the_sql_does(
    spark, monkeypatch, tmp_path, drawn, shards, cross_shard, epoch_ms
):
    """``OperationRows``: a stream's typed operations checked and routed in one call,
    straight from the input's columns (``ts`` as a timestamp or as epoch ms), give the
    routed rows (reasons, event times, copies, ``raw`` of the rejected, their shards) that
    the SQL parsing and routing give; the call is Spark's own (a static method on its
    internal values, called from its generated code), with no Java UDF around it to convert
    each row."""
    config = PurgatoryConfig(
        shards=shards, cross_shard_operations=cross_shard, state_path=str(tmp_path / "state")
    )
    reading = dict(max_timeout_ms=1000, max_future_ms=86_400_000)
    operations = [(*op[:3], ms, *op[4:]) if epoch_ms else op for op, ms in drawn]
    df = spark.createDataFrame(
        operations, _SCHEMA.replace("ts timestamp", "ts bigint") if epoch_ms else _SCHEMA
    )
    one = routing.route_typed_operations(df, config, limits=InputLimits(), **reading)
    plan = one._jdf.queryExecution().optimizedPlan().toString()
    # called once a row: no filter Spark infers from the copies calls it again at the scan
    assert plan.count(f"static_invoke({checks.ROWS[1]}.rows(") == 1
    assert checks.ROWS[0] not in plan  # not a Java UDF of that name
    with monkeypatch.context() as patched:
        patched.setattr(sources, "operation_checks", lambda spark: None)
        patched.setattr(routing, "operation_routes", lambda spark: None)
        sql = routing.route_operations(sources.parse_operations(df, **reading), config)
        expected = _routed_rows(sql)
    assert len(expected) >= len(operations)
    assert _routed_rows(one) == expected


def _sql_routed_events(df, config: PurgatoryConfig, monkeypatch) -> list[tuple]:
    """The routed rows of ``df`` by the SQL reading and routing (no JVM function)."""
    with monkeypatch.context() as patched:
        patched.setattr(sources, "event_checks", lambda spark: None)
        parsed = sources.parse_events(df, max_future_ms=86_400_000)
        return _routed_rows(routing.route_events(parsed, config))


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(_EVENTS, min_size=1, max_size=80),
    st.lists(_EPOCH_MS, min_size=80, max_size=80),
    st.integers(1, 4),
    st.sampled_from(["", ":"]),
    st.booleans(),
)
def test_one_call_checks_and_routes_every_typed_event_as_the_sql_does(
    spark, monkeypatch, tmp_path, events, epoch_ms, shards, delimiter, mailbox
):
    """``EventRows``: typed events (blank keys, NaN and infinite values, no time, times before
    the epoch, past the contract's end or too far ahead; ``ts`` as a timestamp or as epoch ms)
    checked and routed in one call, straight from the input's columns, give the routed rows
    the SQL gives: reasons, op_id and source, event times, shards, roles, a rejected row's
    ``raw`` and its shard; and, without a mailbox, the same replicas."""
    config = PurgatoryConfig(
        shards=shards,
        shard_key_delimiter=delimiter,
        state_path=str(tmp_path / "state") if mailbox else "",
    )
    as_timestamps = spark.createDataFrame(events, _EVENTS_SCHEMA)
    as_epoch_ms = spark.createDataFrame(
        [(e[0], ms, *e[2:]) for e, ms in zip(events, epoch_ms[: len(events)], strict=True)],
        _EVENTS_SCHEMA.replace("timestamp", "bigint"),
    )
    for df in (as_timestamps, as_epoch_ms):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the replicas' warning, both readings
            one = routing.route_typed_events(df, config, max_future_ms=86_400_000)
            plan = one._jdf.queryExecution().optimizedPlan().toString()
            # once a row; the replicas' branch (no mailbox) calls it again in its filter
            assert f"static_invoke({checks.EVENT_ROWS[1]}.rows(" in plan
            assert checks.EVENT_CHECKS[0] not in plan  # no Java UDF
            expected = _sql_routed_events(df, config, monkeypatch)
        assert len(expected) >= len(events)
        assert _routed_rows(one) == expected


_WAKE_LINES = [
    "end",
    " end ",
    "clock 5",
    "clock  1767225600000 ",
    " clock 0",
    "clock",
    "clocks 5",
    "ending",
    "",
    "w",
]


@pytest.mark.parametrize("registry", [True, False])
def test_one_call_gives_the_wake_lines_rows_the_sql_gives(spark, monkeypatch, tmp_path, registry):
    """``WakeRows``: a wake line (the end mark, a clock line, anything else; spaces around)
    gives the rows the SQL gives: shards, roles, the clock's watermark."""
    config = PurgatoryConfig(
        shards=3, state_path=str(tmp_path / "state"), dedup_scope="global" if registry else "shard"
    )
    assert registers(config) == registry
    lines = spark.createDataFrame([(line,) for line in _WAKE_LINES], "value string")
    one = routing.route_wake(lines, config)
    assert (
        f"static_invoke({checks.WAKE_ROWS[1]}.rows(" in one._jdf.queryExecution().optimizedPlan().toString()
    )
    with monkeypatch.context() as patched:
        patched.setattr(routing, "wake_rows", lambda spark: None)
        expected = _routed_rows(routing.route_wake(lines, config))
    assert len(expected) == 5 * 4 + (5 * 4 if registry else 5)
    assert _routed_rows(one) == expected


def test_a_jar_built_before_a_static_call_reads_that_input_as_sql(spark, monkeypatch):
    """``_static`` asks for the called class too: a JAR that has ``StaticCalls`` but not
    ``EventRows`` or ``WakeRows`` (built before them) gives None, and the caller writes the
    SQL, instead of a query that fails when Spark looks the method up; and for the calls'
    version (``StaticCalls.VERSION``): a JAR whose calls have other signatures, or whose
    checks are older (before ``quorum`` and the unused fields' reasons), gives None for every
    call and for the operations' checks."""
    for spec, function in (("EVENT_ROWS", checks.event_rows), ("WAKE_ROWS", checks.wake_rows)):
        name, _, returns = getattr(checks, spec)
        with monkeypatch.context() as patched:
            patched.setattr(checks, spec, (name, "io.sparkpurgatory.checks.NoSuchRows", returns))
            assert function(spark) is None
        assert function(spark) == name
    # a JAR of calls with other signatures (built from older sources): every call is SQL
    calls = (
        checks.operation_rows,
        checks.operation_routes,
        checks.event_rows,
        checks.wake_rows,
        checks.operation_checks,
    )
    with monkeypatch.context() as patched:
        patched.setattr(checks, "CALLS_VERSION", checks.CALLS_VERSION + 1)
        assert [call(spark) for call in (*calls, checks.batch_millis)] == [None] * 6
    assert None not in [call(spark) for call in (*calls, checks.batch_millis)]


def test_a_static_calls_arguments_are_given_as_the_optimizer_leaves_them(spark):
    """``StaticCalls.flagged``: a constant argument reaches the call as two literals (is it
    null, its value), a never-null one as ``false`` and itself, and only a nullable one is
    flagged row by row: the plan Spark optimizes again in every micro-batch has nothing there
    for the optimizer to fold.  And the call gives the rows it gave before."""
    name = checks.wake_rows(spark)
    assert name
    frame = spark.createDataFrame([("end",), ("relay 7",), (None,)], "line string").selectExpr(
        f"{name}(line, 'end', 'clock', 2, true) AS a",
        f"{name}(coalesce(line, ''), 'end', 'clock', 2, false) AS b",
    )
    analysed = re.sub(r"#\d+", "", frame._jdf.queryExecution().analyzed().toString())
    assert "rows(isnull(line), line, false, end, false, clock, false, 2, false, true)" in analysed
    assert "rows(false, coalesce(line, ), false, end, false, clock, false, 2, false, false)" in analysed
    rows = [(len(r.a), len(r.b)) for r in frame.collect()]
    assert rows == [
        (3, 3),
        (3, 1),
        (3, 1),
    ]  # the end mark: every group; a wake: every group with the registry


def test_the_batch_time_is_read_by_generated_code_that_is_the_same_in_every_micro_batch(spark, tmp_path):
    """``BatchMillis``: the latest event time a micro-batch accepts (its time plus
    ``max_future_ms``, ``sql_text.with_latest``) is the lambda's value, and the projection that
    reads it is generated code (no lambda holds it out) whose text names the time by reference,
    not as a number: Spark compiles the input's reading once, not in every micro-batch."""
    name = checks.batch_millis(spark)
    assert name
    jar, lam = sql_text.latest_ts(5, name), sql_text.latest_ts(5)
    both = spark.range(1).selectExpr(f"{jar} AS jar", f"{lam} AS lambda", "unix_millis(now()) AS t")
    row = both.first()
    assert row.jar == row["lambda"] == row.t + 5
    src = tmp_path / "in"
    for _ in range(2):  # files in two writes, one per micro-batch
        spark.range(3).selectExpr("id", "CAST(id AS STRING) AS key").write.mode("append").parquet(str(src))
    stream = spark.readStream.schema("id long, key string").option("maxFilesPerTrigger", 1).parquet(str(src))
    query = (
        sql_text.with_latest(stream, 86_400_000)
        .writeStream.format("noop")
        .trigger(availableNow=True)
        .option("checkpointLocation", str(tmp_path / "chk"))
        .start()
    )
    query.awaitTermination()
    assert query.lastProgress["batchId"] >= 1  # a file or more per micro-batch
    plan = query._jsq.streamingQuery().lastExecution().executedPlan()
    assert "lambdafunction" not in plan.toString() and "batch_millis(" in plan.toString()
    code = spark._jvm.org.apache.spark.sql.execution.debug.package.codegenString(plan)
    assert "batchMillis" in code  # the time, by reference ...
    assert not re.findall(r"\b1[0-9]{12}L\b", code)  # ... and no epoch milliseconds written in


def test_a_class_found_is_kept_for_the_thread_that_asked(spark):
    """``_loadable`` keeps a class it found, per JVM and Python thread (``ADD JAR`` sets the
    context class loader of the asking thread's JVM thread only): another thread asks the
    JVM itself, and a class not found is asked again next time."""
    cls = checks.CHECKS[1]
    assert checks._loadable(spark, cls)
    found = per_client.kept(spark._jvm, "loadable classes")
    assert (threading.get_ident(), cls) in found
    other: list[tuple[bool, int]] = []

    def ask() -> None:
        other.append((checks._loadable(spark, cls), threading.get_ident()))

    thread = threading.Thread(target=ask)
    thread.start()
    thread.join()
    assert other[0][0] and (other[0][1], cls) in found
    missing = "io.sparkpurgatory.checks.NoSuchClass"
    assert not checks._loadable(spark, missing)
    assert all(name != missing for _, name in found)


def test_the_java_role_numbers_are_the_places_of_the_roles_declared_in_python():
    """``OperationRoutes``' role numbers (a copy's role, as the routed rows carry it) are the
    places of their names in ``shard.roles.ROLES``, the one declaration."""
    java = (_CHECKS / "OperationRoutes.java").read_text()
    numbers = dict(re.findall(r"static final byte ([A-Z]+) = (\d+);", java))
    names = {"OP": ROLE_OPERATION, **{name: name.lower() for name in numbers if name != "OP"}}
    assert numbers and {name: int(n) for name, n in numbers.items()} == {
        name: ROLES.index(names[name]) for name in numbers
    }


#: the checks' Java sources
_CHECKS = Path(__file__).parents[2] / "jvm/spark-purgatory/checks/src/main/java/io/sparkpurgatory/checks"
