"""One shard's micro-batch, Spark-free: ``ShardStep``, what the operator runs for each shard group.

Spark calls the operator once per shard group per micro-batch (or timeout).  ``ShardStep``
does everything that call means, in named phases: **load**, **read**, **receive** what other
shards posted, **process**, **post** what it owes others, **decide** what it keeps, **save**,
**emit**.  It owns every decision of the call, for the operator, the tester and ``rescale``.

Invariant: the call's outputs depend only on its inputs (rows, stored value, watermark, batch
time) and the files under the state path; a replayed micro-batch gives the same ones.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import pandas as pd

from ..checkpoint_paths import StatePath
from ..config import PurgatoryConfig
from ..delta.sent import as_sent
from ..engine.purgatory import BatchResult, Purgatory
from ..engine.wheel import NO_EXPIRATION
from ..handoff.clock import on_arrival
from ..handoff.end_of_input import end_watermark_ms
from ..handoff.partitions import cap_before
from ..handoff.shard_handoff import Received, ShardHandOff
from ..handoff.wake import is_end_watermark
from ..state import SegmentStore, load_state, loaded_by, save_state, saved_bytes
from ..state.increments import is_pointer, pointed
from ..state.read_ahead import read_ahead
from ..storage import Storage
from .input import (
    batch_watermark,
    claims_of,
    clock_of,
    marks_in,
    proposed_watermarks,
    roles_of,
    split_input,
)
from .output import output_parts, output_rows, shard_figures
from .roles import ROLE_END, ROLES

if TYPE_CHECKING:
    from ..delta.staging import ShardStaging

_END = ROLES.index(ROLE_END)


class ShardInput(NamedTuple):
    """A call's input as the engine takes it (``ShardStep.read``)."""

    operations: pd.DataFrame
    events: pd.DataFrame
    bad: pd.DataFrame  # rejected at parse
    claims: pd.DataFrame | None  # op_id claims for this shard's registry
    held_ms: int  # Spark's watermark, held back to the slowest Kafka partition's
    watermark_ms: int  # what the engine runs at
    expire_to_ms: int | None  # where it goes after the rows: the batch's own watermark or the clock
    proposed: dict[str, int | None]  # the watermark each input's rows propose


class Decision(NamedTuple):
    """What a shard keeps after a call (``decide``): ``keep`` its state (else Spark drops it),
    the ``watermark_ms`` its output reports, the event-time ``timeout_ms`` to set (None: none)."""

    keep: bool
    watermark_ms: int
    timeout_ms: int | None


@dataclass(frozen=True)
class ShardResult:
    """What one shard call gives its host.

    ``output``: the call's output rows (``contract.OPERATOR_OUTPUT``, or staged its ``STAGED``
    rows); ``value``: the state to store, None to drop it; ``timeout_ms``: the event-time
    timeout to set, None for none; ``result`` and ``bad``: the engine's rows and the rows
    rejected at parse, for a host that keeps them; ``timings``: seconds per phase.
    """

    shard: int
    output: pd.DataFrame
    value: bytes | None
    timeout_ms: int | None
    result: BatchResult
    bad: pd.DataFrame
    relayed: int
    timings: dict[str, float]
    loaded_by: str | None = None
    pending: int = 0
    written_bytes: int = 0


class ShardStep:
    """One shard's micro-batch, for a host that keeps each shard's state value between calls.

    ``staging``: stage the output rows where they are made and return their ``STAGED`` rows;
    ``partitioned``: an input comes from Kafka, whose partitions hold the watermark back
    (``handoff.partitions``).  ``batch_watermark``: move, once the rows are admitted, to the
    watermark they bring, so an expiry they make due comes in their micro-batch; a host whose
    watermark does not follow the rows (a hand-moved one) turns it off.

    Example (no Spark: two events and an operation for shard 0 of one, at watermark 0)::

        step = ShardStep(PurgatoryConfig(shards=1))
        done = step(0, routed, None, watermark_ms=0, batch_time_ms=1_000)
        stored = done.value  # what the host keeps for the next call
    """

    def __init__(
        self,
        config: PurgatoryConfig,
        staging: ShardStaging | None = None,
        *,
        partitioned: bool = False,
        batch_watermark: bool = True,
    ) -> None:
        self.config = config
        self.staging = staging
        self.store = SegmentStore.of(config)
        kafka = partitioned and config.state_path
        self._watermarks = StatePath(config.state_path).watermarks if kafka else None
        self._storage = Storage.of(config) if self._watermarks else None
        self.handoff = ShardHandOff.of(config)
        self._delays = config.input_delays_ms()
        self._processing = config.deadline_clock == "processing"
        # the rows' own watermark needs Spark's to follow them; a Kafka partition's hold may be
        # below what a shard's rows propose (another shard may hold its slow partition's rows)
        self._batch_watermark = batch_watermark and self._watermarks is None

    def __call__(
        self,
        shard: int,
        rows: pd.DataFrame,
        stored: bytes | None,
        *,
        watermark_ms: int,
        batch_time_ms: int,
    ) -> ShardResult:
        """Run the shard's call: ``rows`` its routed rows, ``stored`` the value the last call
        gave (None: no state yet), ``watermark_ms`` Spark's watermark, ``batch_time_ms`` the
        micro-batch's time (larger in each later micro-batch, the same on a replay)."""
        clock = [time.perf_counter()]
        p = self.load(shard, stored)
        clock.append(time.perf_counter())
        wm, now = int(watermark_ms), int(batch_time_ms)
        given = self.read(p, rows, wm, now)
        batch = self._batch_key(now) if self.handoff.active else None
        received = self.handoff.receive(p, shard, batch, given.claims)
        result = self.process(p, given, received)
        posted = self.handoff.post(p, shard, batch, result)
        handled = len(rows) - marks_in(rows) + received.rows  # relayed rows are work too, marks not
        figures = shard_figures(
            p,
            rows,
            self._delays,
            batch_time_ms=now,
            group_rows=handled,
            relayed=posted,
            proposed=given.proposed,
        )
        keep, out_wm, timeout = self.decide(p, shard, wm, given.held_ms)
        clock.append(time.perf_counter())
        how, pending = loaded_by(p), p.pending
        value, written = self.save(p, now) if keep else (None, 0)
        clock.append(time.perf_counter())
        output = self.emit(shard, result, given.bad, figures, out_wm, written)
        clock.append(time.perf_counter())
        phases = ("load", "process", "save", "output")
        timings = {name: clock[i + 1] - clock[i] for i, name in enumerate(phases)}
        return ShardResult(
            shard, output, value, timeout, result, given.bad, posted, timings, how, pending, written
        )

    def replay(self, shard: int, rows: pd.DataFrame, *, final_watermark_ms: int) -> pd.DataFrame:
        """Batch mode: a new shard processes every row at once, then its watermark moves to
        ``final_watermark_ms``; its output rows."""
        p = self.load(shard, None)
        ops, events, bad = split_input(rows)
        result = p.replay(ops, events, final_watermark_ms=final_watermark_ms, validated=True)
        now = int(time.time() * 1000)
        figures = shard_figures(p, rows, self._delays, batch_time_ms=now, group_rows=len(rows))
        return output_rows(shard, result, bad, figures, final_watermark_ms)

    # -- the phases -------------------------------------------------------------------------------

    def load(self, shard: int, stored: bytes | None) -> Purgatory:
        """The shard's engine from its stored value (a new one without), checked to be its own."""
        p = load_state(stored, self.config, self.store) if stored is not None else Purgatory(self.config)
        if p.shard not in (None, shard):  # the shard layout changed under this checkpoint
            raise ValueError(
                f"the state under shard group {shard} belongs to shard {p.shard}: the checkpoint "
                "was written with another shard layout; start a new checkpoint"
            )
        p.shard = shard
        return p

    def read(self, p: Purgatory, rows: pd.DataFrame, wm: int, now: int) -> ShardInput:
        """The call's input split for the engine, the watermark it runs at and the operator's
        clock it brings."""
        held = wm if self._watermarks is None else _held(wm, cap_before(self._watermarks, now, self._storage))
        ops, events, bad = split_input(rows, self.handoff.registers)
        claims = claims_of(rows) if self.handoff.registers else None
        # the end of input (handoff.end_of_input): past every deadline, kept from now on by the engine
        ending = bool((roles_of(rows) == _END).any())
        cfg = self.config
        engine_wm = end_watermark_ms(cfg.max_timeout_ms, cfg.tick_ms, p.latest_deadline()) if ending else held
        # the watermark after this batch's rows are admitted: the one they bring (Spark applies
        # it in the next micro-batch) or the operator's clock (handoff.reaper), the further
        proposed = proposed_watermarks(rows, self._delays)
        brought = batch_watermark(proposed) if self._batch_watermark else None
        expire_to = None if ending else _further(clock_of(rows), brought)
        if self._processing:  # deadline.clock=processing: rows at their arrival, the batch's time the clock
            ops, events, claims = on_arrival(ops, events, claims, now)
            engine_wm, expire_to = engine_wm if ending else now, None
        return ShardInput(ops, events, bad, claims, held, engine_wm, expire_to, proposed)

    def process(self, p: Purgatory, given: ShardInput, received: Received) -> BatchResult:
        """The engine's call over the rows and what the shard received."""
        return p.process(
            given.operations,
            given.events,
            watermark_ms=given.watermark_ms,
            validated=True,
            relayed=received.relayed,
            claims=received.claims,
            verdicts=received.verdicts,
            expire_to_ms=given.expire_to_ms,
        )

    def decide(self, p: Purgatory, shard: int, wm: int, held_ms: int) -> Decision:
        """After the engine's call: what the shard keeps (``decide``)."""
        return decide(p, shard, wm, held_ms, self.handoff)

    def save(self, p: Purgatory, now: int) -> tuple[bytes, int]:
        """The state's value and the bytes its save wrote; the engine is parked by it: no use
        of ``p`` after this."""
        value = save_state(p, self.store, park=self.store is not None, version=now)
        return value, saved_bytes(p)

    def emit(
        self, shard: int, result: BatchResult, bad: pd.DataFrame, figures: dict, wm: int, written: int
    ) -> pd.DataFrame:
        """The call's output rows; staged: written where they were made, their ``STAGED`` rows."""
        out = (shard, result, bad, figures, wm)
        if self.staging is None:
            return output_rows(*out, state_bytes=written)
        # straight to Arrow, by kind: the rows never become one pandas frame
        return as_sent(self.staging.stage(output_parts(*out, state_bytes=written), shard))

    def read_ahead(self, done: ShardResult) -> None:
        """After the host stored the value: forward the other shards' state parked under the
        same lineage while the worker waits (``state.read_ahead``)."""
        if done.value is not None and is_pointer(done.value):
            saved_as = pointed(done.value)
            read_ahead(self.store, self.config, saved_as.lineage, saved_as.version)

    @staticmethod
    def log(done: ShardResult) -> None:
        """One JSON line on the worker's stderr (the executor log): how the state was loaded
        and what each phase cost (``PURGATORY_STATE_LOG=1``)."""
        figures = {
            "shard": done.shard,
            "loaded_by": done.loaded_by,
            **{f"{name}_ms": round(seconds * 1000) for name, seconds in done.timings.items()},
            "value_bytes": len(done.value or b""),
            "written_bytes": done.written_bytes,
            "pending": done.pending,
        }
        print("purgatory-state " + json.dumps(figures), file=sys.stderr, flush=True)

    @staticmethod
    def _batch_key(now_ms: int) -> int:
        """What names this micro-batch in the mailbox: its timestamp (the same in every task and
        on its replay, larger in each later one); the batch id is not seen over Spark Connect."""
        if now_ms < 0:
            raise RuntimeError("the mailbox hand-off runs only inside a streaming micro-batch")
        return now_ms


def _further(a: int | None, b: int | None) -> int | None:
    """The larger of two optional watermarks."""
    return b if a is None else a if b is None else max(a, b)


def _held(wm: int, cap: int | None) -> int:
    """Spark's watermark, held back to the slowest Kafka partition's (``handoff.partitions``)."""
    return wm if cap is None else min(wm, cap)


def decide(p: Purgatory, shard: int, wm: int, held_ms: int, handoff: ShardHandOff) -> Decision:
    """What shard ``shard`` keeps after the engine's call, the one owner of that decision;
    ``wm`` Spark's watermark, ``held_ms`` it held back by the Kafka partitions.

    An empty primary shard goes, unless its input ended (it keeps the end watermark, so a row
    that comes afterwards is ``late``) or the operator's clock moved it past Spark's
    (``handoff.reaper``: it keeps that watermark); the cross-shard group stays while it relays
    (its ``relays_through`` names the mailbox files it received).  Spark fires the timeout
    once its watermark is *past* it: the shard is due at its next wake-up, or in the next
    micro-batch while hand-off files are owed to it (``ShardHandOff.awaits``).
    """
    ended = is_end_watermark(p.watermark)
    clocked = p.watermark > wm  # the operator's clock is ahead of Spark's watermark (reaper)
    # read before p is saved (and parked); behind Spark's when a partition holds it back
    out_wm = p.watermark if ended or clocked or held_ms < wm else wm
    if p.is_empty() and not ended and not clocked and not handoff.keeps(shard):
        return Decision(False, out_wm, None)
    wake = p.next_wakeup()
    if handoff.awaits(p, shard):  # Spark wants a timeout > 0
        wake = min(wake, max(wm, 1) + 1)
    return Decision(True, out_wm, max(wake - 1, wm) if wake < NO_EXPIRATION else None)
