"""``PurgatoryTester``: the purgatory driven by hand in memory, a micro-batch per ``step()``,
through the production shard step and Spark's routing played in-process."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import weakref
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
import pandas as pd

from ..config import PurgatoryConfig
from ..contract import (
    OUTCOME_COLUMNS,
    OUTCOMES,
    REJECTED_COLUMNS,
    UNMATCHED_COLUMNS,
    UNMATCHED_EVENTS,
    WARNING_COLUMNS,
    WARNINGS,
)
from ..engine.batch import BatchResult
from ..engine.purgatory import Purgatory
from ..engine.validation import epoch_ms, validate_events, validate_operations
from ..handoff.end_of_input import end_watermark_ms
from ..shard.step import ShardResult
from ..state import load_state
from .inputs import Rows, Time, _check_readable, _collect, _input_frame, _with_raw, _with_timestamps
from .local_shards import LocalShards, routed

#: the wake's micro-batches after one step's at most (a relay's notice answered, a verdict
#: taken in: two are the most the hand-off asks for)
_MOST_WAKES = 4


class PurgatoryTester:
    """The purgatory driven by hand, one micro-batch per ``step()``, through the production
    shard step.

    As in a Spark micro-batch, input behind the batch's watermark is rejected as ``late``:
    ``step()`` before ``advance_watermark`` moves it past input you queued.  Like
    ``TwsTester``, the watermark does not follow the event times by itself.

    Each ``step()`` is what a stream's micro-batch does, without Spark: the input validated by
    the contract's rules, routed to the shard groups as Spark routes it, and each group's
    production shard step run, its state saved and loaded again between steps.  So what
    depends on shards comes out as on Spark: a cross-shard operation's completion by a
    relayed event is emitted one ``step()`` later.  What it does not show: the
    ``ts_in_future`` check, which needs processing time, the operator's clock on a quiet
    stream and the watermark a micro-batch's rows bring inside it: the watermark is the one
    moved by hand.

    Results accumulate across steps (``batch_id`` is the step's number, from 0), event times
    as UTC Timestamps as in the Delta tables; ``shard(n)`` shows what the harness does not
    (``t.shard(0).watched``).

    >>> t = PurgatoryTester({"purgatory.tick.ms": 10})
    >>> t.add_operations([{"op_id": "a", "key": "k", "ts": 0, "timeout_ms": 100}])
    >>> t.add_events([{"key": "k", "ts": 40}])
    >>> t.step().outcomes[["op_id", "status", "resolved_at"]].values.tolist()
    [['a', 'completed', 40]]
    >>> t.outcome("a")["resolved_at"]
    Timestamp('1970-01-01 00:00:00.040000+0000', tz='UTC')
    """

    def __init__(self, config: PurgatoryConfig | Mapping[str, object] | None = None) -> None:
        """``config``: a ``PurgatoryConfig`` or its dotted keys (``{"purgatory.tick.ms": 100}``);
        without ``purgatory.state.path`` the shards keep their state in a temporary directory,
        removed with the tester."""
        if config is None:
            config = PurgatoryConfig()
        elif not isinstance(config, PurgatoryConfig):
            config = PurgatoryConfig.from_mapping(config)
        if not config.state_path:
            # removed when the tester is (a finalizer: no ResourceWarning for a tester not closed,
            # as a TemporaryDirectory left to the collector gives)
            directory = tempfile.mkdtemp(prefix="purgatory-tester-")
            weakref.finalize(self, shutil.rmtree, directory, ignore_errors=True)
            config = dataclasses.replace(config, state_path=directory)
        self.config = config
        self._shards = LocalShards(config)  # the watermark moved by hand: not the rows' own
        self._none = Purgatory(config).process(None, None, watermark_ms=0)  # a call's empty rows
        self._watermark = 0  # Spark's first micro-batch runs at watermark 0
        self._operations: list[pd.DataFrame] = []
        self._events: list[pd.DataFrame] = []
        self._batches: list[BatchResult] = []

    # -- input -------------------------------------------------------------------------------------

    def add_operations(self, rows: Rows) -> None:
        """Queue operations for the next ``step()``: ``op_id``, ``key`` or ``keys``, ``ts``,
        ``timeout_ms``, optional ``condition``, ``target``, ``members``, ``payload``; as
        records (dicts, a frame) or as JSON lines (str or bytes, as the job reads them: a line
        that is no JSON object is rejected ``malformed_json`` with the line as ``raw``).

        >>> t = PurgatoryTester()
        >>> t.add_operations(['{"op_id": "a", "key": "k", "ts": 0, "timeout_ms": 10}', 'not json'])
        >>> t.step().rejected[["raw", "reason"]].values.tolist()
        [['not json', 'malformed_json']]
        """
        self._operations.append(_input_frame(rows, self.config.input_limits))

    def add_events(self, rows: Rows) -> None:
        """Queue completion events for the next ``step()``: ``key``, ``ts``, optional
        ``op_id``, ``source``, ``value``; as records or JSON lines (``add_operations``)."""
        self._events.append(_input_frame(rows, self.config.input_limits))

    def advance_watermark(self, to: Time) -> None:
        """Set the watermark of the next ``step()``; it never goes back (``ValueError``), and
        it is an event time the contract accepts (1970 up to ``contract.MAX_TS_MS``)."""
        ms = epoch_ms(pd.Series([to], dtype=object))
        if np.isnan(ms[0]):
            _check_readable(to)
            raise ValueError(f"not an event time: {to!r} (expected epoch ms, ISO-8601 or a datetime)")
        if int(ms[0]) < self._watermark:
            raise ValueError(
                f"the watermark never goes back: it is at {self._watermark} ms, asked for {to!r}"
            )
        self._watermark = int(ms[0])

    # -- running -----------------------------------------------------------------------------------

    def step(self) -> BatchResult:
        """Run the micro-batch of the queued input at the current watermark, then, as a stream
        does, the micro-batches with no input that take in what one shard posted for another.

        Returns their rows as the engine gives them (times in epoch ms), under the step's
        ``batch_id``.
        """
        return self._settled(self._run(len(self._batches), end=False))

    def _settled(self, first: BatchResult) -> BatchResult:
        """``first`` and the rows of the wake's micro-batches after it, stacked."""
        results = [first]
        while self._shards.owes_wake and len(results) <= _MOST_WAKES:
            results.append(self._run(len(self._batches), end=False))  # the same step
        # the shards' rows in an order a reader follows (each shard's came in its own)
        first = BatchResult(
            _ordered(_stacked([r.outcomes for r in results]), ["resolved_at", "op_id"]),
            _ordered(_stacked([r.unmatched for r in results]), ["ts", "key"]),
            _stacked([r.rejected for r in results]),
            warnings=_ordered(_stacked([r.warnings for r in results]), ["warned_at", "op_id"]),
        )
        self._batches.append(first)
        return first

    def _run(self, batch_id: int, *, end: bool) -> BatchResult:
        """One micro-batch of the queued input: validated, routed, each group's shard step;
        its rows carry ``batch_id``."""
        operations, events = _collect(_with_raw(self._operations)), _collect(_with_raw(self._events))
        self._operations, self._events = [], []
        config = self.config
        ops, bad_ops = validate_operations(
            operations, max_timeout_ms=config.max_timeout_ms, limits=config.input_limits
        )
        evs, bad_events = validate_events(events)
        rows = routed(ops, evs, pd.concat([bad_ops, bad_events], ignore_index=True), config)
        done = self._shards.run(rows, self._watermark, end=end)
        return self._stacked(done, batch_id)

    def end_input(self) -> BatchResult:
        """The end of input, as a stream's (``start(..., end_of_input=True)``): the queued
        input, if any, in a micro-batch at the current watermark, then one more micro-batch
        at a watermark past every deadline, so what is pending expires at its deadline and
        every buffered event is counted or reported.  Returns that last micro-batch's rows.

        >>> t = PurgatoryTester()
        >>> t.add_operations([{"op_id": "a", "key": "k", "ts": 0, "timeout_ms": 500}])
        >>> t.end_input().outcomes[["op_id", "status", "resolved_at"]].values.tolist()
        [['a', 'expired', 500]]
        """
        if self._operations or self._events:
            self.step()
        deadlines = [d for d in (p.latest_deadline() for p in self._engines()) if d is not None]
        result = self._settled(self._run(len(self._batches), end=True))
        config = self.config
        end = end_watermark_ms(config.max_timeout_ms, config.tick_ms, max(deadlines, default=None))
        self._watermark = max(self._watermark, end)
        return result

    def _stacked(self, done: list[ShardResult], batch_id: int) -> BatchResult:
        """The groups' rows of one micro-batch as one ``BatchResult``, with those rejected at
        parse."""
        none = self._none

        def stacked(frames: list[pd.DataFrame], empty: pd.DataFrame) -> pd.DataFrame:
            out = _stacked([*frames, empty])
            out["batch_id"] = batch_id
            return out[list(empty.columns)]

        rejected = [f for r in done for f in (r.bad, r.result.rejected[REJECTED_COLUMNS[:-1]])]
        return BatchResult(
            stacked([r.result.outcomes for r in done], none.outcomes),
            stacked([r.result.unmatched for r in done], none.unmatched),
            stacked(rejected, none.rejected),
            warnings=stacked([r.result.warnings for r in done], none.warnings),
        )

    # -- results -----------------------------------------------------------------------------------

    @property
    def watermark(self) -> int:
        """The watermark of the next ``step()``, in epoch ms."""
        return self._watermark

    @property
    def pending(self) -> int:
        """Operations waiting for their condition or their deadline (a cross-shard operation
        once, in the cross-shard group)."""
        return sum(p.pending for p in self._engines())

    def pending_operations(self) -> pd.DataFrame:
        """The pending operations of every shard (``tables.OPS`` columns; no stubs)."""
        frames = [p.pending_operations() for p in self._engines()]
        frames = [f.loc[~f["stub"]] if "stub" in f.columns else f for f in frames]
        return pd.concat(frames, ignore_index=True) if frames else Purgatory(self.config).pending_operations()

    def shard(self, number: int) -> Purgatory:
        """Shard ``number``'s engine as its last step stored it (``purgatory.shards``: the
        cross-shard group), loaded from its stored value: a copy to read, not to change."""
        value = self._shards.values.get(number)
        if value is None:
            return Purgatory(self.config)
        return load_state(value, self.config, self._shards.step.store)

    def _engines(self) -> list[Purgatory]:
        return [self.shard(n) for n in sorted(self._shards.values)]

    def outcomes(self, *, times: Literal["timestamp", "ms"] = "timestamp") -> pd.DataFrame:
        """Every outcome so far (the ``outcomes`` table's engine columns, ending with ``batch_id``;
        who answered in ``reported`` and ``missing``, lists of names or None: docs/testing.md)."""
        frame = _collect([r.outcomes for r in self._batches], OUTCOME_COLUMNS)
        return _with_timestamps(frame, OUTCOMES.time_columns) if times == "timestamp" else frame

    def unmatched(self, *, times: Literal["timestamp", "ms"] = "timestamp") -> pd.DataFrame:
        """Every event reported in ``unmatched_events`` so far, with its ``reason``."""
        frame = _collect([r.unmatched for r in self._batches], UNMATCHED_COLUMNS)
        return _with_timestamps(frame, UNMATCHED_EVENTS.time_columns) if times == "timestamp" else frame

    def warnings(self, *, times: Literal["timestamp", "ms"] = "timestamp") -> pd.DataFrame:
        """Every warning so far (the ``warnings`` table's engine columns): one per operation
        with ``warn_ms`` still pending at ``warned_at`` (``deadline - warn_ms``)."""
        frame = _collect([r.warnings for r in self._batches], WARNING_COLUMNS)
        return _with_timestamps(frame, WARNINGS.time_columns) if times == "timestamp" else frame

    def rejected(self) -> pd.DataFrame:
        """Every rejected row so far: ``source``, ``raw``, ``reason``, ``batch_id``."""
        return _collect([r.rejected for r in self._batches], REJECTED_COLUMNS)

    def outcome(self, op_id: str) -> dict[str, Any] | None:
        """The outcome of one operation as a dict, or None while it has none (or is unknown)."""
        rows = self.outcomes()
        rows = rows.loc[rows["op_id"] == op_id]
        return rows.iloc[0].to_dict() if len(rows) else None


def _stacked(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The frames' rows one after another; the last frame's (empty) columns when none has any."""
    filled = [f for f in frames if len(f)]
    if not filled:
        return frames[-1].copy()
    return filled[0].copy() if len(filled) == 1 else pd.concat(filled, ignore_index=True)


def _ordered(frame: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    return frame.sort_values(by, kind="stable").reset_index(drop=True)
