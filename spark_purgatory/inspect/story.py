"""One operation's story: where each of a few op_ids is, and what happened to its events.

"Order 4711 has no outcome. Where is it?"  ``explain`` looks in every place an operation or
its events can be: the checkpoint's pending state, ``outcomes``, ``rejected`` and the events
of its keys that matched nothing or came late.  Rows staged but not yet committed are read
from the checkpoint's staging, and said to be staged.

Invariant: an op_id is ``pending`` or has an outcome, not both, but for an op_id sent again
after ``purgatory.dedup.retention.ms`` (a new operation: ``pending``, with the earlier
outcome and a note); an op_id found nowhere is ``unknown``, with the likely reasons.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..config import PurgatoryConfig
from ..contract import (
    DUPLICATE_OP_ID,
    LATE,
    OUTCOMES,
    REJECTED,
    SOURCE_EVENTS,
    SOURCE_OPERATIONS,
    TABLES,
    UNMATCHED_EVENTS,
)
from ..delta.accumulator import RecordAccumulator
from ..storage import Storage
from .pending_table import StateNeedsSpark, pending_table, with_progress
from .pending_view import inspect_config, pending_operations
from .table_readers import TableReader, table_reader

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: how long past its deadline an untargeted event of its keys still belongs to a story (at least)
_LATE_WINDOW = dt.timedelta(hours=1)
#: the states an op_id can be in, as ``OperationStory.state`` says, besides its outcome's status
PENDING, REJECTED_STATE, UNKNOWN = "pending", "rejected", "unknown"


@dataclass
class OperationStory:
    """Where one op_id is, and what happened to the events of its keys.

    Attributes:
        op_id: the operation asked about.
        state: ``pending``, ``completed``, ``expired``, ``cancelled``, ``rejected`` or ``unknown``.
        pending: its ``pending_operations`` row (progress, time left), if pending.
        outcome: its ``outcomes`` row, if resolved.
        rejected: its ``rejected`` rows other than duplicates (reason, raw, batch_id).
        duplicates: the rejected second operations with its op_id (``duplicate_op_id``).
        unmatched_events: ``unmatched_events`` rows of its keys or targeted at it, in its window.
        late_events: events of its keys (or targeted at it) rejected ``late``, in its window.
        keys: the keys it watches (from whichever row told them).
        notes: what could not be looked at, and why an ``unknown`` op_id may be so.
        staged: its outcome or rejection is staged in the accumulator, not yet in the table.
    """

    op_id: str
    state: str = UNKNOWN
    pending: dict | None = None
    outcome: dict | None = None
    rejected: list[dict] = field(default_factory=list)
    duplicates: list[dict] = field(default_factory=list)
    unmatched_events: list[dict] = field(default_factory=list)
    late_events: list[dict] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    staged: bool = False

    def summary(self) -> str:
        """One line: where it is, and the figure that matters there."""
        line = self._where()
        return f"{line} (staged: in the table within accumulator.linger.ms)" if self.staged else line

    def _where(self) -> str:
        if self.pending is not None:
            p = self.pending
            left, words = p["time_left_ms"] / 1000, p.get("progress_text") or _progress_words(p)
            return (
                f"{self.op_id}: pending in shard {p['shard']}, {words}, "
                f"deadline {_iso(p['deadline'])} ({left:g} s left by the operator's watermark "
                f"{_iso(p['watermark'])}; state of batch {p['batch_id']})"
            )
        if self.outcome is not None:
            o = self.outcome
            return (
                f"{self.op_id}: {o['status']} at {_iso(o['resolved_at'])} (latency {o['latency_ms']} ms, "
                f"{o['matched_events']} matched events, progress {o['progress']:g}), batch {o['batch_id']}"
            )
        if self.rejected:
            r = self.rejected[0]
            return f"{self.op_id}: rejected ({r['reason']}) in batch {r['batch_id']}"
        extra = f", {len(self.duplicates)} duplicate(s) rejected" if self.duplicates else ""
        return f"{self.op_id}: unknown: not pending, no outcome, not rejected{extra}"

    def answered(self) -> str | None:
        """Who answered its outcome, when the outcome names them (``all``, ``quorum``: the
        members who reported and those missing; ``count``: the sources counted); None for the
        other conditions, and for an outcome written before the table had the columns."""
        o = self.outcome or {}
        named = [(what, o.get(what)) for what in ("reported", "missing")]
        parts = [f"{what} {', '.join(names) or 'nobody'}" for what, names in named if names is not None]
        return "; ".join(parts) or None

    def to_dict(self) -> dict:
        """JSON-ready (times as ISO-8601 strings)."""
        return json.loads(json.dumps({**asdict(self), "summary": self.summary()}, default=_json_value))


def explain(
    op_ids: list[str],
    *,
    output: str,
    checkpoint: str | None = None,
    spark: SparkSession | None = None,
    config: PurgatoryConfig | None = None,
    state: bool = True,
    reader: TableReader | None = None,
) -> list[OperationStory]:
    """The story of each op_id (in the order given): pending, resolved, rejected, duplicates,
    and the events of its keys that matched nothing or came late.

    Args:
        op_ids: the operations to look for.
        output: where the query's tables are.
        checkpoint: the query's checkpoint, to look for pending operations.
        spark: the session for a state only Spark reads (RocksDB ...; the active one when
            None) and, when Delta's classes are on its classpath, for the tables.
        config: the query's ``PurgatoryConfig`` (state path, ``storage.*`` settings).
        state: look in the checkpoint's state for op_ids that have no outcome.
        reader: the tables' reader (``table_reader`` when None).

    Example::

        for story in explain(["pay-000042"], output="/data/tables", checkpoint="/data/chk"):
            print(story.summary())
            print(story.rejected, story.unmatched_events)
    """
    ids = list(dict.fromkeys(op_ids))
    cfg = inspect_config(checkpoint or "", config) if checkpoint else (config or PurgatoryConfig())
    tables = reader or table_reader(output, spark=spark, storage=Storage.of(cfg))
    stories = {op_id: OperationStory(op_id) for op_id in ids}
    _outcomes(tables, stories)
    _rejections(tables, stories)
    if checkpoint:
        _staged(cfg, stories)
    if checkpoint and state:  # resolved ones too: an op_id re-sent past the dedup retention
        _pending(checkpoint, spark, cfg, stories, ids)
    else:
        for story in stories.values():
            if story.outcome is None:
                story.notes.append("the pending state was not read (no checkpoint given)")
    for story in stories.values():
        story.state = _state_of(story)
        if story.pending is not None and story.outcome is not None:
            story.notes.append(
                f"an earlier operation with this op_id was {story.outcome['status']} at "
                f"{_iso(story.outcome['resolved_at'])}: this one was sent again after "
                "purgatory.dedup.retention.ms, a new operation"
            )
    _events(tables, list(stories.values()))
    for story in stories.values():
        if story.state == UNKNOWN:
            story.notes.append(
                "not found: it may not have been read yet"
                + ("" if checkpoint else ", its outcome may still be staged (give the checkpoint)")
                + ", or the op_id is misspelled"
            )
    return [stories[op_id] for op_id in ids]


# -- where the operation is ------------------------------------------------------------------------


def _outcomes(tables: TableReader, stories: dict[str, OperationStory]) -> None:
    for row in tables.rows_with(OUTCOMES.name, "op_id", list(stories)).to_pylist():
        _resolved(stories[row["op_id"]], row)


def _rejections(tables: TableReader, stories: dict[str, OperationStory]) -> None:
    """The operations rejected under these op_ids (the events targeted at them come later)."""
    for row in _rejected_rows(tables, list(stories), "op_id", SOURCE_OPERATIONS):
        story = stories[row["_match"]]
        _refused(story, {k: v for k, v in row.items() if not k.startswith("_")})
        if not story.keys:
            story.keys = _keys_of(row.get("_parsed") or {})


def _resolved(story: OperationStory, row: dict) -> None:
    """Its ``outcomes`` row, from the table or the staging."""
    story.outcome = row
    story.keys = story.keys or list(row.get("keys") or [])


def _refused(story: OperationStory, row: dict) -> None:
    """A ``rejected`` row of an operation under its op_id, from the table or the staging."""
    (story.duplicates if row["reason"] == DUPLICATE_OP_ID else story.rejected).append(row)


def _staged(config: PurgatoryConfig, stories: dict[str, OperationStory]) -> None:
    """The outcomes and rejected operations of these op_ids that the sink has staged and the
    tables do not hold yet (the accumulator's recorded files, read, never changed; rows an
    earlier version staged read with the columns added since as nulls)."""
    wanted = [op_id for op_id, story in stories.items() if story.outcome is None and not story.rejected]
    if not wanted:
        return
    storage = Storage.of(config)
    try:
        accumulator = RecordAccumulator(
            config.accumulator_staging_path,
            app_id="explain",
            batch_size=1,
            linger_ms=0,
            buffer_memory=1,
            storage=storage,
        )
        batches = accumulator.staged_files(-1, [OUTCOMES.name, REJECTED.name])
    except FileNotFoundError:  # nothing staged yet
        return
    ids = pa.array(wanted, pa.string())
    for _, files in batches:
        for table, uri in files:
            fs, path = storage.filesystem(uri)
            try:
                rows = TABLES[table].conformed(pq.read_table(path, filesystem=fs))
            except FileNotFoundError:  # drained since it was listed: the table holds it now
                continue
            rows = rows.filter(pc.is_in(rows.column("op_id"), ids))
            if table == REJECTED.name:
                rows = rows.filter(pc.equal(rows.column("source"), SOURCE_OPERATIONS))
            for row in rows.to_pylist():
                story = stories[row["op_id"]]
                story.staged = True
                (_resolved if table == OUTCOMES.name else _refused)(story, row)


def _pending(
    checkpoint: str, spark: Any, config: PurgatoryConfig, stories: dict[str, OperationStory], ids: list[str]
) -> None:
    """The pending rows of ``ids``: from the state's files (no JVM), or with Spark where only
    Spark reads them (said in each story's notes)."""
    try:
        table = pending_table(checkpoint, config=config)
        found = with_progress(table.filter(pc.is_in(table.column("op_id"), pa.array(ids, pa.string()))))
        rows = found.to_pylist()
    except StateNeedsSpark as why:
        from pyspark.sql import functions as F

        from .pending_view import at_risk

        pending = pending_operations(checkpoint, spark=spark, config=config)
        rows = at_risk(checkpoint, within=2**62, pending=pending.filter(F.col("op_id").isin(ids)))
        rows = rows.toArrow().to_pylist()
        for op_id in ids:
            stories[op_id].notes.append(f"the state was read with Spark: {why}")
    for row in rows:
        story = stories[row["op_id"]]
        story.pending = row
        story.keys = list(row["keys"] or [])


def _state_of(story: OperationStory) -> str:
    if story.pending is not None:
        return PENDING
    if story.outcome is not None:
        return str(story.outcome["status"])  # contract.STATUSES: completed, expired, cancelled
    if story.rejected:
        return REJECTED_STATE
    return UNKNOWN


# -- what happened to its events -----------------------------------------------------------------


def _events(tables: TableReader, stories: list[OperationStory]) -> None:
    """Each story's unmatched and late events: targeted at it, or on its keys in its window."""
    keys = sorted({k for s in stories for k in s.keys})
    ids = [s.op_id for s in stories]
    unmatched = tables.rows_with(UNMATCHED_EVENTS.name, "key", keys).to_pylist() if keys else []
    targeted = tables.rows_with(UNMATCHED_EVENTS.name, "op_id", ids).to_pylist()
    late_keyed = _rejected_rows(tables, keys, "key", SOURCE_EVENTS, reason=LATE) if keys else []
    late_targeted = _rejected_rows(tables, ids, "op_id", SOURCE_EVENTS, reason=LATE)
    for story in stories:
        window = _window(story)
        story.unmatched_events = _mine(
            story, window, unmatched + targeted, lambda r: (r["key"], r["op_id"], r["ts"])
        )
        story.late_events = _mine(
            story,
            window,
            late_keyed + late_targeted,
            lambda r: (_field(r, "key"), _field(r, "op_id"), _event_time(r)),
        )


def _mine(story: OperationStory, window: tuple[Any, Any] | None, rows: list[dict], fields: Any) -> list[dict]:
    """The rows about ``story``'s operation: targeted at it, or untargeted on one of its keys
    with an event time in its window; each once, by event time."""
    chosen: dict[str, dict] = {}  # by content: a row targeted at it on its key is read twice
    for row in rows:
        key, op_id, ts = fields(row)
        if op_id is not None and op_id != story.op_id:
            continue
        if op_id is None and (key not in story.keys or not _inside(ts, window)):
            continue
        kept = {k: v for k, v in row.items() if not k.startswith("_")}
        chosen[repr(sorted(kept.items()))] = kept
    return sorted(chosen.values(), key=lambda r: str(r.get("ts") or r.get("raw")))


def _window(story: OperationStory) -> tuple[Any, Any] | None:
    """From the operation's ts to one timeout (at least an hour) past its deadline (None:
    unknown, keep all)."""
    row = story.pending or story.outcome
    if row is None:
        return None
    start = row.get("ts") or row.get("op_ts")
    deadline = row["deadline"]
    return start, deadline + max(deadline - start, _LATE_WINDOW)


def _inside(ts: Any, window: tuple[Any, Any] | None) -> bool:
    if window is None or ts is None:
        return True
    return window[0] <= ts < window[1]


# -- the rejected table, with or without its op_id and key columns ----------------------------


def _rejected_rows(
    tables: TableReader, values: list[str], column: str, source: str, *, reason: str | None = None
) -> list[dict]:
    """``rejected`` rows from ``source`` whose ``column`` (``op_id`` or ``key``) is one of
    ``values``: by the column when the table has it, else by searching and parsing ``raw``.
    Each row gets ``_match`` (the value it matched) and ``_parsed`` (its raw record)."""
    if not values:
        return []
    where = {"source": source, **({"reason": reason} if reason else {})}
    searched = _searched(tables, values, column, where)
    if column in tables.columns(REJECTED.name):
        rows = tables.rows_with(REJECTED.name, column, values).to_pylist()
        rows = [r for r in rows if all(r.get(k) == v for k, v in where.items())]
        # rows written before the table had the column read it as null: found in their raw
        older = [r for r in searched if r.get(column) is None]
        return [{**r, "_match": r[column], "_parsed": _parse(r["raw"])} for r in rows] + older
    return searched


def _searched(tables: TableReader, values: list[str], column: str, where: dict) -> list[dict]:
    """``rejected`` rows whose raw record holds one of ``values`` as its ``column``."""
    wanted = set(values)
    needles = [json.dumps(v) for v in values]  # the quoted value, as it stands in JSON text
    found = []
    for row in tables.rows_containing(REJECTED.name, "raw", needles, where).to_pylist():
        parsed = _parse(row["raw"])
        if parsed is None:  # malformed JSON: the quoted value is there, that is all we know
            hits = [v for v in values if json.dumps(v) in (row["raw"] or "")]
        elif column == "key":
            hits = [k for k in _keys_of(parsed) if k in wanted]
        else:
            hits = [parsed.get("op_id")] if parsed.get("op_id") in wanted else []
        found += [{**row, "_match": hit, "_parsed": parsed} for hit in hits]
    return found


def _parse(raw: str | None) -> dict | None:
    try:
        value = json.loads(raw or "")
    except (json.JSONDecodeError, TypeError):
        return None
    return value if isinstance(value, dict) else None


def _keys_of(record: dict) -> list[str]:
    keys = record.get("keys")
    if isinstance(keys, list):
        return [k for k in keys if isinstance(k, str)]
    return [record["key"]] if isinstance(record.get("key"), str) else []


def _field(row: dict, name: str) -> Any:
    if row.get(name) is not None:
        return row[name]
    return (row.get("_parsed") or {}).get(name)


def _event_time(row: dict) -> dt.datetime | None:
    """A late event's time, from its raw record (ISO text or epoch ms)."""
    value = (row.get("_parsed") or {}).get("ts")
    try:
        if isinstance(value, (int, float)):
            return dt.datetime.fromtimestamp(value / 1000, tz=dt.timezone.utc)
        if isinstance(value, str):
            parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.timezone.utc)
    except (ValueError, OverflowError):
        return None
    return None


def _progress_words(row: dict) -> str:
    return f"progress {row.get('progress') or 0:g} of {row.get('goal') or 0:g}"


def _iso(value: Any) -> str:
    return value.isoformat() if isinstance(value, (dt.datetime, dt.date)) else str(value)


def _json_value(value: Any) -> Any:
    if isinstance(value, pa.Scalar):
        return value.as_py()
    return list(value) if isinstance(value, (list, tuple)) else _iso(value)
