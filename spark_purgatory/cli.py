"""The command line: ``spark-purgatory status|pending|at-risk|explain|rescale|upgrade|jars``.

``python -m spark_purgatory`` runs it too.  Every command takes ``--conf FILE`` / ``--set
KEY=VALUE`` like the job, and ``--json`` for scripts.  No command starts a JVM, but for a
state store only Spark reads (said in one line on stderr) or under ``spark-submit``.

Exit codes: 0 done; 1 the question cannot be answered (no such checkpoint, not a purgatory
checkpoint, unreadable state version), one line on stderr; 2 a usage or configuration error.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from collections.abc import Iterable
from typing import Any

from .config import ConfigError, PurgatoryConfig, read_settings, scrubbed, secret_values
from .job import split_settings
from .runtime.jars import built_for, jar_files, jars_hint, kafka_jars
from .runtime.session import local_session
from .storage import Storage
from .version import __version__

_PROG = "spark-purgatory"
#: columns of the pending table as printed (the JSON has every ``contract.PENDING`` column)
_PENDING_SHOWN = ["op_id", "keys", "shard", "condition", "progress_text", "deadline", "time_left_ms"]
_RISK_SHOWN = ["op_id", "keys", "shard", "deadline", "time_left_ms", "progress_text", "payload"]


class _UsageError(Exception):
    pass


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--output", help="where the query's Delta tables are")
    common.add_argument("--conf", action="append", default=[], help="a .conf file of KEY = VALUE lines")
    common.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override one key")
    common.add_argument("--json", action="store_true", help="JSON for scripts instead of tables")
    parser = argparse.ArgumentParser(prog=_PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"{_PROG} {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    status = commands.add_parser(
        "status", parents=[common], help="last batch, watermarks, pending by shard, tables"
    )
    status.add_argument("--no-state", action="store_true", help="do not read the state (no JVM)")

    pending = commands.add_parser(
        "pending", parents=[common], help="the pending operations and their progress"
    )
    _watermark_options(pending)
    pending.add_argument("--batch-id", type=int, help="the committed micro-batch to read (default: the last)")
    pending.add_argument("--limit", type=int, default=50, help="rows to print, earliest deadline first")

    risk = commands.add_parser("at-risk", parents=[common], help="pending operations due within a horizon")
    risk.add_argument("--within", required=True, help="the horizon: 10s, 15m, 1h, 2d or '1 hour'")
    _watermark_options(risk)
    risk.add_argument("--limit", type=int, default=100, help="rows to print")

    explain = commands.add_parser("explain", parents=[common], help="where each op_id is, and its events")
    explain.add_argument("op_ids", nargs="+", metavar="OP_ID")
    explain.add_argument("--no-state", action="store_true", help="only the tables (no JVM)")

    rescale = commands.add_parser(
        "rescale", parents=[common], help="change a stopped checkpoint's shard count (no JVM)"
    )
    rescale.add_argument("--shards", type=int, required=True, help="the new purgatory.shards (required)")
    commands.add_parser(
        "upgrade", parents=[common], help="bring a stopped checkpoint to this version's formats (no JVM)"
    )
    for name, command in commands.choices.items():  # --help says which commands need it
        needed = "optional: where to look for pending operations" if name == "explain" else "required"
        command.add_argument("--checkpoint", help=f"the query's checkpoint, a path or URI ({needed})")
    jars = commands.add_parser("jars", help="the project's JARs: for --jars, spark.jars, cluster libraries")
    jars.add_argument(
        "--format",
        choices=["comma", "lines", "conf", "json"],
        default="comma",
        help="comma: --jars/spark.jars (default); lines: one a line; conf: spark.jars=...; json",
    )
    jars.add_argument("--kafka", action="store_true", help="Spark's Kafka source instead (resolved once)")
    return parser


def _print_jars(form: str, kafka: bool = False) -> int:
    """``spark-purgatory jars [--kafka]``: the project's JARs (or Spark's Kafka source's) in
    ``form``; 1 with one line without any."""
    try:
        paths = kafka_jars() if kafka else jar_files()
    except ConfigError as error:
        print(f"{_PROG}: {error}", file=sys.stderr)
        return 1
    if not paths:
        print(f"{_PROG}: no JARs: {jars_hint()}", file=sys.stderr)
        return 1
    comma = ",".join(paths)
    if form == "json":
        print(json.dumps({"jars": paths, "spark": built_for(), "version": __version__}))
    else:
        print({"comma": comma, "lines": "\n".join(paths), "conf": f"spark.jars={comma}"}[form])
    return 0


def _watermark_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--watermark",
        help="count time left from this watermark (ISO-8601 or epoch ms); default: the operator's "
        "clock while a query runs with one, else the checkpoint's watermark",
    )


def run() -> None:
    """The ``spark-purgatory`` command and ``python -m spark_purgatory``: ``main``, then exit.

    After a JVM-free command, with everything written, the process exits without the
    interpreter's finalisation, where a native thread (pyarrow's or delta-rs's) may abort it;
    with a session running, Python exits as usual.
    """
    code = main()
    pyspark = sys.modules.get("pyspark")
    if pyspark is None or pyspark.SparkContext._active_spark_context is None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # exits 2 on a usage error
    if args.command == "jars":
        return _print_jars(args.format, args.kafka)
    secrets: tuple[str, ...] = ()
    try:
        values = read_settings(args.conf, args.set)
        secrets = secret_values(values)  # never shown
        job, _kafka, config = split_settings(values)  # an unknown key is refused as the job refuses it
        return _run(args, config, job["job.master"])
    except (ConfigError, _UsageError) as error:
        print(scrubbed(f"{_PROG}: error: {error}", secrets), file=sys.stderr)
        return 2
    except Exception as error:  # noqa: BLE001 - the one line a person reads instead of a trace
        print(scrubbed(f"{_PROG}: {_one_line(error)}", secrets), file=sys.stderr)
        return 1


def _run(args: argparse.Namespace, config: PurgatoryConfig, master: str) -> int:
    from .inspect import StateNeedsSpark, at_risk, checkpoint_status, explain, pending_operations

    if args.command in ("status", "pending", "at-risk", "rescale", "upgrade") and not args.checkpoint:
        raise _UsageError(f"{args.command} needs --checkpoint")
    if args.command == "explain" and not args.output:
        raise _UsageError("explain needs --output (and --checkpoint to look for pending operations)")
    if args.command == "rescale":
        _rescale(args, config)
        return 0
    if args.command == "upgrade":
        _upgrade(args, config)
        return 0
    if args.command == "status":
        from .inspect.checkpoint import read_checkpoint
        from .inspect.pending_view import inspect_config

        read_checkpoint(args.checkpoint, storage=Storage.of(inspect_config(args.checkpoint, config)))
        report = checkpoint_status(
            args.checkpoint,
            output=args.output,
            spark=_LazySession(master),  # only for a state only Spark reads
            config=config,
            state=not args.no_state,
            reader=_reader(args.output, config, master),
        )
        _print_status(report, args.json)
    elif args.command in ("pending", "at-risk"):
        within = None
        if args.command == "at-risk":
            from .inspect.pending_view import horizon_ms

            within = horizon_ms(args.within)  # a bad horizon is a usage error, before any read
        _check_checkpoint(args.checkpoint, config)
        batch_id = getattr(args, "batch_id", None)
        shown = _PENDING_SHOWN if args.command == "pending" else _RISK_SHOWN
        title = "pending" if args.command == "pending" else f"due within {args.within}"
        try:
            table = _pending_rows(args.checkpoint, config, args.watermark, batch_id, within)
        except StateNeedsSpark as why:
            print(f"{_PROG}: reading the state with Spark: {why}", file=sys.stderr)
            frame = pending_operations(
                args.checkpoint,
                spark=_session(master),
                config=config,
                watermark=args.watermark,
                batch_id=batch_id,
            )
            frame = at_risk(args.checkpoint, within=2**62 if within is None else within, pending=frame)
            _print_frame(frame, args.json, args.limit, shown, title)
        else:
            _print_table(table, args.json, args.limit, shown, title)
        if args.command == "at-risk" and args.output and not args.json:
            from .inspect.status import expiry_lag

            lag = _lag_text(expiry_lag(_reader(args.output, config, master)))
            if lag:
                print(f"expiry lag: {lag}")
    else:
        if args.checkpoint and not args.no_state:
            _check_checkpoint(args.checkpoint, config)
        spark = _LazySession(master) if args.checkpoint and not args.no_state else None
        stories = explain(
            args.op_ids,
            output=args.output,
            checkpoint=args.checkpoint,
            spark=spark,  # only for a state only Spark reads
            config=config,
            state=not args.no_state,
            reader=_reader(args.output, config, master),
        )
        _print_stories(stories, args.json)
    return 0


def _pending_rows(
    checkpoint: str, config: PurgatoryConfig, watermark: str | None, batch_id: int | None, within: int | None
) -> Any:
    """The pending operations (those due within ``within`` ms, if given) with their progress
    in words, read from the checkpoint's files (no JVM)."""
    from .inspect import at_risk_table, pending_table
    from .inspect.pending_table import with_progress

    if within is not None:
        return at_risk_table(checkpoint, within=within, config=config, watermark=watermark)
    table = pending_table(checkpoint, config=config, watermark=watermark, batch_id=batch_id)
    return with_progress(table.sort_by([("deadline", "ascending"), ("op_id", "ascending")]))


def _rescale(args: argparse.Namespace, config: PurgatoryConfig) -> None:
    from .rescale import rescale

    done = rescale(args.checkpoint, args.shards, config=config)
    if args.json:
        print(json.dumps(done.__dict__, default=str))
        return
    print(
        f"rescaled {done.checkpoint}: {done.from_shards} -> {done.to_shards} shards as micro-batch "
        f"{done.batch}, {done.pending} pending operations moved in {done.seconds:.2f} s; "
        f"start it with purgatory.shards={done.to_shards}"
    )


def _upgrade(args: argparse.Namespace, config: PurgatoryConfig) -> None:
    from .upgrade import upgrade

    done = upgrade(args.checkpoint, config=config)
    if args.json:
        print(json.dumps(done.__dict__))
        return
    if not done.steps:
        print(f"{done.checkpoint} is up to date: spark-purgatory {done.to_version} and its formats")
        return
    began = "resumed the upgrade of" if done.resumed else "upgraded"
    print(
        f"{began} {done.checkpoint}: spark-purgatory {done.from_version or 'from before version records'} "
        f"-> {done.to_version} ({', '.join(done.steps)}) in {done.seconds:.2f} s; start it with "
        f"spark-purgatory {done.to_version}"
    )


def _check_checkpoint(checkpoint: str, config: PurgatoryConfig) -> None:
    """Read the checkpoint's logs without Spark: a wrong path fails before a JVM starts."""
    from .inspect.checkpoint import InspectError, read_checkpoint
    from .inspect.pending_view import inspect_config

    info = read_checkpoint(checkpoint, storage=Storage.of(inspect_config(checkpoint, config)))
    if info.last_batch is None:
        raise InspectError(f"no committed micro-batch yet: {checkpoint}")


def _session(master: str) -> Any:
    """The submitted session under spark-submit, else a quiet local one."""
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        from pyspark.sql import SparkSession

        return SparkSession.builder.getOrCreate()
    return local_session("spark-purgatory-cli", master=master, shuffle_partitions=4)


def _reader(output: str | None, config: PurgatoryConfig, master: str) -> Any:
    """The tables' reader: delta-rs, in this process, unless run by spark-submit (then the
    submitted session's Delta source, if it has one): a table question starts no JVM."""
    from .inspect.table_readers import DeltaRsReader, table_reader

    if output is None:
        return None
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        return table_reader(output, spark=_session(master), storage=Storage.of(config))
    return DeltaRsReader(output, Storage.of(config))


class _LazySession:
    """A session started only if a question needs one (``explain`` of resolved op_ids does not)."""

    def __init__(self, master: str) -> None:
        self._master, self._spark = master, None

    def __getattr__(self, name: str) -> Any:
        if self._spark is None:
            self._spark = _session(self._master)
        return getattr(self._spark, name)


# -- printing ---------------------------------------------------------------------------------------


def _console() -> Any:
    from rich.console import Console

    try:
        width = os.get_terminal_size().columns
    except OSError:
        width = 160
    return Console(width=max(120, width), soft_wrap=False)


def _print_table(table: Any, as_json: bool, limit: int, shown: list[str], title: str) -> None:
    """Pending operations read without Spark (an Arrow table, in deadline order)."""
    if as_json:
        for batch in table.to_batches():
            for row in batch.to_pylist(maps_as_pydicts="strict"):
                sys.stdout.write(json.dumps(row, default=_json_value) + "\n")
        sys.stdout.flush()
        return
    _print_rows(table.slice(0, limit).to_pylist(maps_as_pydicts="strict"), table.num_rows, shown, title)


def _print_frame(frame: Any, as_json: bool, limit: int, shown: list[str], title: str) -> None:
    """Pending operations read with Spark (a DataFrame)."""
    if as_json:
        _print_json_lines(frame)
        return
    rows = [r.asDict(recursive=True) for r in frame.orderBy("deadline", "op_id").limit(limit).collect()]
    _print_rows(rows, frame.count(), shown, title)


def _print_rows(rows: list[dict], total: int, shown: list[str], title: str) -> None:
    from rich.table import Table

    batch = rows[0]["batch_id"] if rows else None
    watermark = rows[0]["watermark"] if rows else None
    table = Table(
        title=f"{total:,} {title}" + (f" (batch {batch}, watermark {_text(watermark)})" if rows else "")
    )
    for name in shown:
        table.add_column(name, overflow="fold")
    for row in rows:
        table.add_row(*(_text(row.get(name)) for name in shown))
    console = _console()
    console.print(table)
    if total > len(rows):
        console.print(f"... {total - len(rows):,} more (--limit, or --json for all)")


def _print_json_lines(frame: Any) -> None:
    """Every row as a JSON line, in order, never the whole frame in this process: on a local
    master Spark's own JSON writer writes the lines (far sooner than a Python dict per row),
    elsewhere the rows come one partition at a time."""
    if str(frame.sparkSession.conf.get("spark.master", "")).startswith("local"):
        import glob
        import shutil
        import tempfile

        with tempfile.TemporaryDirectory(prefix="spark-purgatory-") as tmp:
            frame.write.mode("overwrite").option("ignoreNullFields", "false").option(
                "timestampFormat", "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"
            ).json(tmp)
            sys.stdout.flush()
            for part in sorted(glob.glob(os.path.join(tmp, "part-*"))):
                with open(part, "rb") as lines:
                    shutil.copyfileobj(lines, sys.stdout.buffer)
            sys.stdout.buffer.flush()
        return
    for row in frame.toLocalIterator():
        print(json.dumps(row.asDict(recursive=True), default=_json_value))


#: the metrics table's columns ``status`` prints per shard (a terminal's width)
_STATUS_METRICS = (
    "shard", "input_operations", "input_events", "pending", "completed", "expired", "cancelled",
    "unmatched", "rejected", "warned", "latency_p99_ms", "expiry_lag_ms", "busiest_share", "state_bytes",
)  # fmt: skip


def _lag_text(lag: dict | None) -> str | None:
    """``status``/``at-risk``'s line on the expiry lag."""
    if not lag:
        return None
    return (
        f"last {lag['last_ms'] / 1000:.1f} s (batch {lag['batch_id']}), "
        f"largest {lag['max_ms'] / 1000:.1f} s: how long after their deadline expiries were decided"
    )


#: what ``status`` prints for a checkpoint key whose name alone would not say which watermark
_STATUS_LABELS = {
    "expiry_watermark": "expiry watermark (decides expiries now)",
    "expiry_watermark_is": "  which is",
    "watermark": "watermark (Spark's, last committed batch)",
    "next_watermark": "next watermark (Spark's, for the running batch)",
}


def _print_status(report: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(report, default=_json_value, indent=2))
        return
    from rich.table import Table

    console = _console()
    chk = Table(title="checkpoint", show_header=False)
    for key, value in report["checkpoint"].items():
        chk.add_row(_STATUS_LABELS.get(key, key), _text(value))
    if "pending" in report:
        chk.add_row("pending", f"{report['pending']:,} ({report['pending_from']})")
    for name, value in (report.get("input_watermarks") or {}).items():  # the checkpoint's is above
        chk.add_row(f"{name} (this input's own, metrics table, last batch)", _text(value))
    if _lag_text(report.get("expiry_lag")):
        chk.add_row("expiry lag (metrics table)", _lag_text(report["expiry_lag"]))
    topic = report.get("output_topic")
    if topic:
        done = topic["last_committed_batch"]
        chk.add_row(
            f"output topic {topic['topic']}",
            "no micro-batch yet" if done is None else f"through batch {done}",
        )
    console.print(chk)
    layout = report.get("layout")
    if layout:
        title = f"layout: {layout['shards']} shards + the cross-shard group"
        if layout["rescale_under_way"]:
            title += " (a rescale was interrupted: the next start or rescale completes or undoes it)"
        history = Table("rescaled at batch", "from", "to", "at", title=title)
        for entry in layout["rescales"]:
            history.add_row(*(_text(entry.get(k)) for k in ("batch", "from", "to", "at")))
        if not layout["rescales"]:
            history.add_row("never rescaled", "", "", "")
        console.print(history)
    if report["pending_by_shard"] is not None:
        shards = Table("shard", title="pending by shard")
        shards.add_column("pending", justify="right")
        for shard, count in report["pending_by_shard"].items():
            shards.add_row(shard, f"{count:,}")
        console.print(shards)
    if report["last_batch"] and report["last_batch"]["rows"]:
        rows = report["last_batch"]["rows"]
        last = Table(title=f"metrics, batch {report['last_batch']['batch_id']}")
        shown = [name for name in _STATUS_METRICS if name in rows[0]]  # all of them: --json
        for name in shown:
            last.add_column(name, justify="right")
        for row in rows:
            last.add_row(*(_text(row[name]) for name in shown))
        console.print(last)
    if report["tables"]:
        sizes = Table("table", "rows", "app commit", title="tables")
        for name, entry in report["tables"].items():
            sizes.add_row(name, _text(entry.get("rows")), _text(entry.get("app_commit")))
        console.print(sizes)
    for note in report["notes"]:
        console.print(f"note: {note}", markup=False)


def _print_stories(stories: list, as_json: bool) -> None:
    if as_json:
        print(json.dumps([s.to_dict() for s in stories], indent=2))
        return
    console = _console()
    for story in stories:
        console.print(story.summary(), markup=False, highlight=False)
        for label, rows in (
            ("rejected", story.rejected),
            ("duplicate rejected", story.duplicates),
            ("unmatched event", story.unmatched_events),
            ("late event", story.late_events),
        ):
            for row in rows:
                console.print(f"  {label}: {_brief(row)}", markup=False, highlight=False)
        if story.answered() is not None:
            console.print(f"  answered: {story.answered()}", markup=False, highlight=False)
        if story.pending is not None:
            p = story.pending
            console.print(
                f"  progress: {p['matched_events']} matched events, {p['distinct_sources']} distinct "
                f"sources, sum {p['value_sum']:g}, offsets {_text(p['offsets'])}, "
                f"missing {_text(p['members_missing'])}",
                markup=False,
                highlight=False,
            )
        for note in story.notes:
            console.print(f"  note: {note}", markup=False, highlight=False)


def _brief(row: dict) -> str:
    names = [
        n
        for n in ("reason", "key", "ts", "op_id", "source", "value", "batch_id", "raw")
        if row.get(n) is not None
    ]
    return ", ".join(f"{n}={_text(row[n])}" for n in names)


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ").replace("+00:00", "")
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_text(v)}" for k, v in value.items())
    if isinstance(value, Iterable) and not isinstance(value, str):
        return ", ".join(_text(v) for v in value)
    return str(value)


def _json_value(value: Any) -> Any:
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    return str(value)


def _one_line(error: BaseException) -> str:
    """The line of an error a person needs: ours as it is; Spark's from its Python trace."""
    from .inspect.checkpoint import InspectError

    if isinstance(error, InspectError):
        return str(error)
    text = str(error)
    for marker in ("InspectError: ", "unsupported purgatory state format"):
        at = text.find(marker)
        if at >= 0:
            line = text[at:].splitlines()[0]
            return line.removeprefix("InspectError: ")
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


if __name__ == "__main__":
    sys.exit(main())
