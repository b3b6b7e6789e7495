"""The routed rows' hand-off to Python: what the shard stage pays per row to give the
operator its input, for the routed layout as it is and as it was.

The operator's input (``shard.roles.ROUTED``) crosses from the JVM to the Python workers
as Arrow and becomes pandas (``applyInPandasWithState``) before the engine sees a row.  This
times that crossing alone, on the rows of real input: one file of operations and one of
events (``contenders.write_workload``), routed as a stream routes them
(``route_typed_operations``, ``route_events``), written once as Parquet; then, per layout,
the rows read back, shuffled by shard and handed to a Python function that splits them as
the shard call does (``shard.input.split_input``) and returns nothing.  The layouts
(``--layouts``):

* **text**: the routed rows as they are: an operation's keys as JSON text only when it has
  several (one key in ``key``), its members only when it has any (``shard.roles.LIST_COLUMNS``);
* **wide**: the same rows with an event's source and value and a rejected row's reason and
  raw text in columns of their own, as routing sent them before they shared an operation's
  (``shard.roles.SHARED_COLUMNS``: 18 columns against 14);
* **arrays**: the wide rows with the two lists as Spark arrays, empty where absent, as
  routing sent them before (the function reads them as they come);
* **before**: the arrays layout with each row's role and side as strings, as routing sent
  them before they became numbers (``shard.roles.ROLES``, ``SIDES``): the layout of 5a71613;
* **floor**: shard, key and event time only: what the stateful floor hands over.

Each layout runs ``--repeat`` times after two warm-up rounds, the layouts alternated (every
other round in the reverse order); printed: wall and CPU (the JVM, its Python workers:
``harness.cpu_seconds``) per layout, medians and ranges, and each layout's CPU beside the
first's, round by round.  CPU is the figure to read on a shared machine.

    python -m benchmarks handoff
    python -m benchmarks handoff --ops 60000 --repeat 10 --layouts text,arrays,floor
"""

from __future__ import annotations

import glob
import os
import shutil
import statistics
import tempfile
import time

import pandas as pd

from benchmarks import harness
from benchmarks.contenders import write_workload
from spark_purgatory.config import PurgatoryConfig
from spark_purgatory.contract import SOURCE_OPERATIONS
from spark_purgatory.shard.input import split_input
from spark_purgatory.shard.roles import (
    ROLE_BAD,
    ROLE_CLAIM,
    ROLE_EVENT,
    ROLE_OPERATION,
    ROLE_REPLICA,
    ROLE_STUB,
    ROLES,
    SIDES,
)
from spark_purgatory.spark.routing import route_events, route_typed_operations
from spark_purgatory.spark.sources import parse_events
from spark_purgatory.spark.sql_text import sql_string
from spark_purgatory.testing import spark_session

LAYOUTS = ("text", "wide", "arrays", "before", "floor")
_OPERATIONS = SIDES.index(SOURCE_OPERATIONS)  # a routed row's side, as routing sends it


def _arrays_split(pdf: pd.DataFrame) -> None:
    """The shard call's reading of the arrays layout: each side's columns as numpy arrays."""
    for name in pdf.columns:
        pdf[name].to_numpy(dtype=object)


def _roles(*names: str) -> str:
    return ", ".join(str(ROLES.index(name)) for name in names)


_OPS = _roles(ROLE_OPERATION, ROLE_STUB, ROLE_CLAIM)
_EVENTS, _BAD = _roles(ROLE_EVENT, ROLE_REPLICA), _roles(ROLE_BAD)
#: the shared columns parted again (``shard.roles.SHARED_COLUMNS``): an operation's fields alone in
#: theirs, and each other field in a column of its own (``_OWN``)
_PARTED = {
    "condition": f"CASE WHEN role IN ({_OPS}) THEN condition END AS condition",
    "target": f"CASE WHEN role IN ({_OPS}) THEN target END AS target",
    "payload": f"CASE WHEN role IN ({_OPS}) THEN payload END AS payload",
}
_OWN = {
    "source": f"CASE WHEN role IN ({_EVENTS}) THEN condition END AS source",
    "value": f"CASE WHEN role IN ({_EVENTS}) THEN target END AS value",
    "raw": f"CASE WHEN role IN ({_BAD}) THEN payload END AS raw",
    "reason": f"CASE WHEN role IN ({_BAD}) THEN condition END AS reason",
}


def _consumer(layout: str):
    def consume(pdf: pd.DataFrame) -> pd.DataFrame:
        if layout == "text":
            split_input(pdf, registering=True)
        elif layout == "wide":  # the split as before: the shared fields from their own columns
            split_input(pdf, registering=True)
            for name in _OWN:
                pdf[name].to_numpy(dtype=object)
        elif layout == "arrays":
            _arrays_split(pdf)
        else:
            _arrays_split(pdf)
        return pdf.head(0)[["shard"]]

    return consume


def _layout(rows, layout: str):
    if layout == "floor":
        return rows.select("shard", "key", "ts_ms")
    if layout == "before":
        arrays = _layout(rows, "arrays")
        named = {"role": ROLES, "side": SIDES}
        names = {c: f"element_at(array({', '.join(map(sql_string, n))}), {c} + 1)" for c, n in named.items()}
        return arrays.selectExpr(*[f"{names[c]} AS {c}" if c in names else c for c in arrays.columns])
    if layout == "wide":
        return rows.selectExpr(*[_PARTED.get(c, c) for c in rows.columns], *_OWN.values())
    if layout == "arrays":
        rows = _layout(rows, "wide")
        empty = "CAST(array() AS array<string>)"
        keys = (
            "CASE WHEN keys IS NOT NULL THEN from_json(keys, 'array<string>') "
            f"WHEN key IS NOT NULL AND side = {_OPERATIONS} THEN array(key) ELSE {empty} END"
        )
        members = f"COALESCE(from_json(members, 'array<string>'), {empty})"
        others = [c for c in rows.columns if c not in ("keys", "members")]
        return rows.selectExpr(*others, f"{keys} AS keys", f"{members} AS members")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser("handoff", __doc__, repeat=8)
    parser.add_argument("--ops", type=int, default=60_000, help="operations in the file")
    parser.add_argument("--layouts", default=",".join(LAYOUTS), help=f"of {', '.join(LAYOUTS)}")
    args = parser.parse_args(argv)
    layouts = harness.names(args.layouts)
    unknown = set(layouts) - set(LAYOUTS)
    if unknown:
        parser.error(f"unknown layouts {sorted(unknown)}")
    root = tempfile.mkdtemp(prefix="bench-handoff-")
    write_workload(root, args.ops, 1, fmt="parquet")
    spark = spark_session()
    config = PurgatoryConfig(state_path=os.path.join(root, "state"))  # the op_id registry's claims too
    ops = spark.read.parquet(*glob.glob(f"{root}/ops/*.parquet"))
    events = spark.read.parquet(*glob.glob(f"{root}/events/*.parquet"))
    reading = dict(
        max_timeout_ms=config.max_timeout_ms, max_future_ms=config.max_future_ms, limits=config.input_limits
    )
    routed = route_typed_operations(ops, config, **reading).unionByName(
        route_events(parse_events(events, "auto", max_future_ms=config.max_future_ms), config)
    )
    routed.write.parquet(f"{root}/routed")
    rows = spark.read.parquet(f"{root}/routed")
    count = rows.count()
    plans = {
        name: _layout(rows, name).groupBy("shard").applyInPandas(_consumer(name), "shard int")
        for name in layouts
    }
    for _round, name in harness.alternated(layouts, 2):  # warm-up: code generation, the workers
        plans[name].write.format("noop").mode("overwrite").save()
    rounds = harness.Rounds(layouts, args.repeat)
    for _round, name in rounds:
        wall, cpu = time.perf_counter(), harness.cpu_seconds()
        plans[name].write.format("noop").mode("overwrite").save()
        rounds.add(
            name,
            {"wall_ms": 1000 * (time.perf_counter() - wall), "cpu_ms": 1000 * (harness.cpu_seconds() - cpu)},
        )
    print(f"{count:,} routed rows ({args.ops:,} operations and their events), {args.repeat} runs per layout")
    print(rounds.table({"wall_ms": "wall ms", "cpu_ms": "CPU ms"}))
    ratios = {}
    for name in layouts:
        cpu = statistics.median(rounds.values(name, "cpu_ms"))
        print(f"  {name:8s} {1000 * cpu / count:.2f} µs CPU per row")
        if name != layouts[0]:
            ratios[f"{name}_cpu_vs_{layouts[0]}"] = rounds.ratios(name, layouts[0], "cpu_ms")
            print(harness.ratio_line(f"{name} CPU / {layouts[0]}'s", ratios[f"{name}_cpu_vs_{layouts[0]}"]))
    harness.stop(spark)
    shutil.rmtree(root, ignore_errors=True)
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    harness.write_json(args.json, "handoff", args, {"rows": count, "ratios": ratios, **rounds.json()})
    return 0
