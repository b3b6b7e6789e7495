"""Where a micro-batch's executor time goes, stage by stage and task by task, from Spark's event log.

``python -m benchmarks operator --event-log DIR ...`` keeps one event log of the whole run
(every contender's queries in one file); ``python -m benchmarks stages DIR`` reads it back.
Each streaming query run (a contender's run is one or two: the job's end of input is a second;
the warm-up's come first) is told by its run id, in the order they started.  Per micro-batch
with input, from Spark's own records:

* ``add_ms``: the progress's ``addBatch`` (the micro-batch's Spark jobs and its sink);
* ``route_ms``, ``route_cpu``: the stage that reads and routes the input and writes the
  shuffle: its span (submission to completion) and its tasks' summed executor CPU;
* ``state_ms``: the stateful stage's (``FlatMapGroupsInPandasWithState``) span; of its tasks
  that read rows (the shards'; ``busy`` of them), ``busy_max_ms`` the longest one's duration,
  and per task ``jvm_cpu`` the JVM's executor CPU (the shuffle read, the sort by group,
  Spark's Arrow writer, the state store) and ``py_ms`` PySpark's ``time to execute Python
  code`` (the worker's reading of the rows, the group function and the output's writing: it
  runs from the worker's first read of the input, so it includes waiting for the JVM to
  feed it); ``idle_ms``: the task that read no rows (the cross-shard group's, or the floor's
  empty partition), its duration.

Printed: each run's medians over its micro-batches after the first ``--skip``; with
``--stages`` also every stage kind's summed task figures and SQL metrics.  The Python
worker's own split of a shard task (when its function was called, the shard step, the output)
is in the job's stderr with ``PURGATORY_STATE_LOG=1`` (``purgatory-task`` lines,
``spark.operator``).

    python -m benchmarks operator --workloads typed --contenders stateful,stateful-routed,job \\
        --scaling '' --repeat 2 --event-log /tmp/ev
    python -m benchmarks stages /tmp/ev
    python -m benchmarks stages          # one round of those contenders run here, then read
"""

from __future__ import annotations

import argparse
import glob
import json
import shlex
import statistics
import tempfile
from collections import defaultdict
from pathlib import Path

from benchmarks.harness import write_json

__all__ = ["micro_batches", "main"]

_PROGRESS = "org.apache.spark.sql.streaming.StreamingQueryListener$QueryProgressEvent"
_STATEFUL = "FlatMapGroupsInPandasWithState"
_PY_EXEC = "time to execute Python code"
#: the figures per micro-batch, in the printed order
FIGURES = (
    "add_ms",
    "route_ms",
    "route_cpu",
    "state_ms",
    "busy",
    "busy_max_ms",
    "jvm_cpu",
    "py_ms",
    "idle_ms",
)


def _scopes(info: dict) -> list[str]:
    """The plan nodes a stage runs, from its RDDs' scopes, in order."""
    names: list[str] = []
    for rdd in sorted(info.get("RDD Info", []), key=lambda r: r["RDD ID"]):
        name = json.loads(rdd["Scope"])["name"] if rdd.get("Scope") else rdd["Name"]
        name = name.split(" (")[0]
        if name not in names:
            names.append(name)
    return names


def _task(event: dict) -> dict:
    info, metrics = event["Task Info"], event.get("Task Metrics") or {}
    sql = {a["Name"]: a.get("Update") for a in info.get("Accumulables", []) if a.get("Name")}
    return {
        "ms": info["Finish Time"] - info["Launch Time"],
        "cpu": (metrics.get("Executor CPU Time", 0) + metrics.get("Executor Deserialize CPU Time", 0)) / 1e6,
        "rows": int(sql.get("records read") or 0),
        "py_ms": float(sql.get(_PY_EXEC) or 0),
    }


def _runs(lines: list[str]) -> tuple[dict, dict, dict, dict]:
    """The event log's stages by (run, batch), their tasks and scopes, the runs' progress."""
    stage_of: dict[int, tuple[str, int]] = {}
    tasks: dict[int, list[dict]] = defaultdict(list)
    stages: dict[int, dict] = {}
    progress: dict[tuple[str, int], dict] = {}
    for line in lines:
        event = json.loads(line)
        kind = event.get("Event")
        if kind == "SparkListenerJobStart":
            props = event.get("Properties") or {}
            run, batch = props.get("spark.jobGroup.id"), props.get("streaming.sql.batchId")
            if run is not None and batch is not None and props.get("sql.streaming.queryId"):
                stage_of.update({stage: (run, int(batch)) for stage in event.get("Stage IDs", [])})
        elif kind == "SparkListenerTaskEnd" and event["Stage ID"] in stage_of:
            tasks[event["Stage ID"]].append(_task(event))
        elif kind == "SparkListenerStageCompleted" and event["Stage Info"]["Stage ID"] in stage_of:
            info = event["Stage Info"]
            span = info.get("Completion Time", 0) - info.get("Submission Time", 0)
            stages[info["Stage ID"]] = {"scopes": _scopes(info), "span": span, "info": info}
        elif kind == _PROGRESS:
            p = event["progress"]
            progress[(p["runId"], int(p["batchId"]))] = p
    return stage_of, tasks, stages, progress


def micro_batches(lines: list[str]) -> dict[str, list[dict]]:
    """Per query run (``run1``, ``run2`` ... in the order they started), its micro-batches
    with input: ``batch``, ``rows`` and ``FIGURES`` (see the module docstring)."""
    stage_of, tasks, stages, progress = _runs(lines)
    batches: dict[tuple[str, int], dict] = {}
    for stage, (run, batch) in sorted(stage_of.items()):
        if stage not in stages:
            continue  # skipped: its shuffle output was already there
        figures = batches.setdefault((run, batch), {"batch": batch, **dict.fromkeys(FIGURES, 0.0)})
        own = tasks[stage]
        if _STATEFUL in stages[stage]["scopes"]:
            busy = [t for t in own if t["rows"]]
            idle = [t for t in own if not t["rows"]]
            figures["state_ms"] += stages[stage]["span"]
            figures["busy"] = len(busy)
            figures["busy_max_ms"] = max((t["ms"] for t in busy), default=0)
            figures["jvm_cpu"] = statistics.mean(t["cpu"] for t in busy) if busy else 0
            figures["py_ms"] = statistics.mean(t["py_ms"] for t in busy) if busy else 0
            figures["idle_ms"] = max((t["ms"] for t in idle), default=0)
        elif "Exchange" in stages[stage]["scopes"] and stages[stage]["scopes"][0].startswith("Scan"):
            figures["route_ms"] += stages[stage]["span"]
            figures["route_cpu"] += sum(t["cpu"] for t in own)
    order: dict[str, int] = {}
    for (run, _batch), _p in sorted(progress.items(), key=lambda kv: kv[1]["timestamp"]):
        order.setdefault(run, len(order) + 1)
    out: dict[str, list[dict]] = defaultdict(list)
    for (run, batch), figures in sorted(batches.items(), key=lambda kv: (order.get(kv[0][0], 0), kv[0][1])):
        p = progress.get((run, batch), {})
        rows = p.get("numInputRows") or sum(s.get("numInputRows", 0) for s in p.get("sources", []))
        if not rows:
            continue
        figures.update(rows=rows, add_ms=p.get("durationMs", {}).get("addBatch", 0))
        out[f"run{order.get(run, 0)}"].append(figures)
    return out


def stage_kinds(lines: list[str]) -> dict[str, dict[str, dict]]:
    """Per run and stage kind (its plan nodes), the summed task figures and SQL metrics of
    its stages over the run (``--stages``)."""
    stage_of, tasks, stages, progress = _runs(lines)
    order: dict[str, int] = {}
    for (run, _batch), _p in sorted(progress.items(), key=lambda kv: kv[1]["timestamp"]):
        order.setdefault(run, len(order) + 1)
    out: dict[str, dict[str, dict]] = defaultdict(dict)
    for stage, (run, _batch) in sorted(stage_of.items()):
        if stage not in stages:
            continue
        kind = " > ".join(stages[stage]["scopes"])[:100]
        s = out[f"run{order.get(run, 0)}"].setdefault(
            kind, {"stages": 0, "tasks": 0, "ms": 0.0, "cpu": 0.0, "sql": defaultdict(float)}
        )
        s["stages"] += 1
        s["tasks"] += len(tasks[stage])
        s["ms"] += sum(t["ms"] for t in tasks[stage])
        s["cpu"] += sum(t["cpu"] for t in tasks[stage])
        for a in stages[stage]["info"].get("Accumulables", []):
            if a.get("Name") and not a["Name"].startswith("internal.") and str(a.get("Value", "")).isdigit():
                s["sql"][a["Name"]] += float(a["Value"])
    return out


def read_log(directory: str) -> list[str]:
    """Every line of the event log files under ``directory``."""
    lines: list[str] = []
    for path in sorted(glob.glob(f"{directory}/**/*", recursive=True)):
        if Path(path).is_file():
            lines.extend(Path(path).read_text().splitlines())
    return lines


def report(runs: dict[str, list[dict]], skip: int) -> None:
    """Each run's medians (ms a micro-batch; ``busy`` a count) after its first ``skip``."""
    print(f"{'run':<6} {'batches':>7} " + " ".join(f"{name:>11}" for name in FIGURES))
    for run, batches in runs.items():
        kept = batches[skip:] or batches
        medians = [statistics.median(b[name] for b in kept) for name in FIGURES]
        print(f"{run:<6} {len(kept):>7} " + " ".join(f"{value:>11.0f}" for value in medians))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks stages",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "directory", nargs="?", help="the --event-log directory of a benchmark's run (none: run --operator)"
    )
    parser.add_argument(
        "--operator",
        default="--workloads typed --contenders stateful,stateful-routed,job --scaling '' --repeat 1",
        help="without a directory: the operator benchmark's options for a run whose event log is read",
    )
    parser.add_argument("--skip", type=int, default=1, help="micro-batches left out at each run's start")
    parser.add_argument("--stages", action="store_true", help="also each stage kind's summed figures")
    parser.add_argument("--json", metavar="PATH", help="also write the figures to this file, as JSON")
    args = parser.parse_args(argv)
    if args.directory:
        lines = read_log(args.directory)
    else:
        from benchmarks import bench_operator

        with tempfile.TemporaryDirectory(prefix="stages-") as directory:
            status = bench_operator.main([*shlex.split(args.operator), "--event-log", directory])
            lines = read_log(directory)
        if status:
            return status
        print()
    runs = micro_batches(lines)
    report(runs, args.skip)
    write_json(args.json, "stages", args, {"micro_batches": runs})
    if args.stages:
        for run, kinds in stage_kinds(lines).items():
            print(f"\n{run}")
            for kind, s in kinds.items():
                print(f"  {kind}")
                figures = f"tasks {s['tasks']}, task ms {s['ms']:.0f}, CPU ms {s['cpu']:.0f}"
                print(f"    stages {s['stages']}, {figures}")
                print("    " + ", ".join(f"{n} {v:.0f}" for n, v in sorted(s["sql"].items())))
    return 0
