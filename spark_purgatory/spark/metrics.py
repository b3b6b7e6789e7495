"""Per-micro-batch figures, through Spark's own channels: ``observe`` and a query listener.

``observe_purgatory(out)`` attaches named metrics (``purgatory``) to the operator's output;
they arrive in every ``StreamingQueryProgress.observedMetrics``, so users' own listeners see
them too.  ``ProgressListener`` turns them into one line per micro-batch plus a structured
log record.  Idle shards are not called, so pending is the sum of each shard's last report.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQueryListener
from pyspark.sql.streaming.listener import (
    JStreamingQueryListener,
    QueryProgressEvent,
    StreamingQueryProgress,
)

from ..contract import (
    COUNTS,
    GROUP_ROWS,
    KIND_METRICS,
    KIND_OUTCOME,
    ROW_COUNTS,
    STATUSES,
    ms_column,
)
from ..handoff.wake import is_end_watermark

OBSERVATION = "purgatory"
#: the input rows of the busiest shard call of a micro-batch, and of all of them: the busiest
#: group's share (``max_group_rows / group_rows_total``) shows whether one group is a funnel
MAX_GROUP_ROWS, GROUP_ROWS_TOTAL = "max_group_rows", "group_rows_total"
log = logging.getLogger("spark_purgatory.progress")


def observe_purgatory(out: DataFrame) -> DataFrame:
    """The operator's output with the ``purgatory`` observed metrics attached (its rows, or
    the ``STAGED`` rows of shards that staged their own: ``staged_stream``)."""
    if "kind" not in out.columns:
        return _observe_staged(out)

    def count(cond: str) -> str:
        return f"sum(CASE WHEN {cond} THEN 1 ELSE 0 END)"  # a bigint

    outcome = f"kind = '{KIND_OUTCOME}'"
    counts = {status: count(f"{outcome} AND status = '{status}'") for status in STATUSES}
    counts.update({name: count(f"kind = '{t.kind}'") for name, t in ROW_COUNTS.items()})
    return _observe(out, counts, call=f"kind = '{KIND_METRICS}'")


def _observe_staged(out: DataFrame) -> DataFrame:
    """The same metrics from ``STAGED`` rows: counted per staged file, gauges per shard call;
    SQL text written as the optimizer leaves it (``sql_text.sql_filled``)."""

    def total(column: str, cond: str) -> str:
        return f"coalesce(sum(CASE WHEN {cond} THEN `{column}` END), 0L)"

    # a call's row has its own counts: the staged files' only
    counts = {status: total(status, "`table` IS NOT NULL") for status in STATUSES}
    counts.update({name: total("rows", f"`table` = '{t.name}'") for name, t in ROW_COUNTS.items()})
    return _observe(out, counts, call="`table` IS NULL")


def _observe(out: DataFrame, counts: dict[str, str], call: str) -> DataFrame:
    """``out`` observed: the counts (SQL text) and the gauges of the rows where ``call``
    holds, one per shard call (the watermark, pending per shard, the group rows)."""
    watermark = ms_column("watermark")
    metrics = {
        **counts,
        watermark: f"max(`{watermark}`)",
        "pending_by_shard": (
            f"map_from_entries(collect_list(CASE WHEN {call} THEN struct(shard, pending) END))"
        ),
        MAX_GROUP_ROWS: f"max(CASE WHEN {call} THEN `{GROUP_ROWS}` END)",  # bigints (``STAGED``)
        GROUP_ROWS_TOTAL: f"sum(CASE WHEN {call} THEN `{GROUP_ROWS}` END)",
    }
    return out.observe(OBSERVATION, *[F.expr(f"{sql} AS `{name}`") for name, sql in metrics.items()])


def progress_figures(progress: Any, pending_by_shard: dict[int, int]) -> dict:
    """One micro-batch's figures from a ``StreamingQueryProgress`` (updates ``pending_by_shard``)."""
    observed = (getattr(progress, "observedMetrics", None) or {}).get(OBSERVATION)
    row = observed.asDict() if observed is not None else {}
    by_shard = row.get("pending_by_shard") or {}
    if isinstance(by_shard, list):  # a progress parsed from JSON (recentProgress, Connect): [{key, value}]
        by_shard = {entry["key"]: entry["value"] for entry in by_shard}
    for shard, pending in by_shard.items():
        pending_by_shard[int(shard)] = int(pending)
    wm = row.get(ms_column("watermark"))
    return {
        "batch_id": progress.batchId,
        "input_rows": int(progress.numInputRows or 0),
        "pending": sum(pending_by_shard.values()),
        **{name: int(row.get(name) or 0) for name in COUNTS},
        "watermark": _watermark_text(wm),
        "rows_per_second": round(float(progress.processedRowsPerSecond or 0.0), 1),
        "duration_ms": int((progress.durationMs or {}).get("triggerExecution", 0)),
        MAX_GROUP_ROWS: int(row.get(MAX_GROUP_ROWS) or 0),
        GROUP_ROWS_TOTAL: int(row.get(GROUP_ROWS_TOTAL) or 0),
    }


def _watermark_text(wm: int | None) -> str | None:
    """The watermark as ISO text; past every deadline: the end of input (``handoff.wake``)."""
    if not wm:
        return None
    if is_end_watermark(wm):
        return "end of input"
    return dt.datetime.fromtimestamp(wm / 1000, tz=dt.timezone.utc).isoformat()


def format_line(f: dict) -> str:
    return (
        f"batch {f['batch_id']:>5}  in {f['input_rows']:>8,}  pending {f['pending']:>9,}  "
        f"completed {f['completed']:>8,}  expired {f['expired']:>7,}  cancelled {f['cancelled']:>5,}  "
        f"unmatched {f['unmatched']:>6,}  rejected {f['rejected']:>5,}  warned {f['warned']:>5,}  "
        f"watermark {f['watermark'] or '-':<32}  "
        f"{f['rows_per_second']:>10,.0f} rows/s"
    )


class JsonListener(StreamingQueryListener):
    """A ``StreamingQueryListener`` whose progress events arrive parsed from one JSON string.

    Subclass it as you would ``StreamingQueryListener``: ``onQueryProgress`` gets the same
    event, read in two Py4J round trips instead of PySpark's hundreds.
    """

    @property
    def _jlistener(self) -> Any:  # PySpark's hook: the Java-side wrapper it registers
        from pyspark import SparkContext

        if not hasattr(self, "_jlistenerobj"):
            wrapper = SparkContext._jvm.PythonStreamingQueryListenerWrapper  # type: ignore[union-attr]
            self._jlistenerobj = wrapper(_ProgressAsJson(self))
        return self._jlistenerobj


class _ProgressAsJson(JStreamingQueryListener):
    """The Java interface's Python side (Py4J): each progress as its JSON text, parsed here."""

    def onQueryProgress(self, jevent: Any) -> None:  # noqa: N802 - Spark's names
        progress = StreamingQueryProgress.fromJson(json.loads(jevent.progress().json()))
        self.pylistener.onQueryProgress(QueryProgressEvent(progress))


class ProgressListener(JsonListener):
    """Logs one line per micro-batch from the ``purgatory`` observed metrics.

    ``emit`` receives each batch's figures (a dict), e.g. to print or collect them.
    """

    def __init__(self, emit: Callable[[dict], None] | None = None) -> None:
        super().__init__()
        self.pending_by_shard: dict[int, int] = {}
        self.history: list[dict] = []
        self.emit = emit

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - Spark's names
        log.info("query started id=%s run=%s", event.id, event.runId)

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802
        figures = progress_figures(event.progress, self.pending_by_shard)
        self.history.append(figures)
        log.info(format_line(figures), extra={"purgatory": figures})
        if self.emit:
            self.emit(figures)

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
        if event.exception:
            log.error("query failed: %s", event.exception)
        else:
            log.info("query terminated id=%s", event.id)


class JsonFormatter(logging.Formatter):
    """Structured logs: one JSON object per record, with the per-batch figures when present."""

    def format(self, record: logging.LogRecord) -> str:
        body = {
            "ts": dt.datetime.fromtimestamp(record.created, tz=dt.timezone.utc).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if hasattr(record, "purgatory"):
            body["figures"] = record.purgatory
        return json.dumps(body, default=str)
