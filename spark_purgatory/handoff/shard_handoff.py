"""The shard call's one door to the hand-off: ``receive`` before the engine runs, ``post`` after.

Invariant: a call receives everything posted for it before its micro-batch, and only that; a
replay of a micro-batch receives the same rows (files go only once a later call received them).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import pandas as pd

from ..checkpoint_paths import StatePath
from ..engine.tables import VERDICTS
from ..storage import Storage
from .mailbox import Mailbox

if TYPE_CHECKING:
    from ..config import PurgatoryConfig
    from ..engine.batch import BatchResult
    from ..engine.purgatory import Purgatory


def hands_off(config: PurgatoryConfig) -> bool:
    """Do cross-shard operations get their events through the mailbox (else: replicas)?  By
    default, when there is a state path to hold the mailbox."""
    return (
        config.cross_shard_operations
        and config.shards > 1
        and config.cross_shard_handoff == "mailbox"
        and bool(config.state_path)
    )


def registers(config: PurgatoryConfig) -> bool:
    """Is a repeated op_id one operation across shards (``purgatory.dedup.scope=global``)?  It
    needs several shards and a state path for the verdicts."""
    return config.dedup_scope == "global" and config.shards > 1 and bool(config.state_path)


@dataclass(frozen=True)
class Received:
    """``Purgatory.process``'s three hand-off arguments, each None when there is nothing."""

    relayed: pd.DataFrame | None = None
    claims: pd.DataFrame | None = None
    verdicts: pd.DataFrame | None = None

    @property
    def rows(self) -> int:
        """Relayed rows received: work of the call, as its input rows are."""
        return 0 if self.relayed is None else len(self.relayed)


class ShardHandOff:
    """The hand-off as one shard call sees it (built once per query, shipped to the executors).

    ``relays``: stubs relay to the cross-shard group; ``registers``: claims and verdicts.
    """

    @classmethod
    def of(cls, config: PurgatoryConfig) -> ShardHandOff:
        """The hand-off the configuration asks for (``hands_off``, ``registers``)."""
        return cls(config, relays=hands_off(config), registers=registers(config))

    def __init__(self, config: PurgatoryConfig, *, relays: bool, registers: bool) -> None:
        self.cross = config.shards
        self.relays = relays
        self.registers = registers
        self._config = config

    @cached_property
    def _mailbox(self) -> Mailbox:
        """The relays' mailbox, opened at first use."""
        return Mailbox.beside(self._config.state_path, Storage.of(self._config))

    @property
    def active(self) -> bool:
        """Does any shard call receive or post (then a call needs its micro-batch's key)?"""
        return self.relays or self.registers

    def receive(self, p: Purgatory, shard: int, batch: int | None, claims: pd.DataFrame | None) -> Received:
        """Before ``p.process``: the cross-shard group's relays not yet received, and a home's
        verdicts on what it parked in its last call; ``claims``: those routed to this shard."""
        relayed = None
        if self.relays and shard == self.cross and batch is not None:
            before = p.relays_through
            relayed = self._mailbox.collect(before, batch)
            self._mailbox.clean(before)  # received by an earlier call; a replay needs this one's
            p.relays_through = max(before, batch - 1)
        if not self.registers:
            return Received(relayed=relayed)
        return Received(relayed=relayed, claims=claims, verdicts=self._verdicts(p, shard))

    def post(self, p: Purgatory, shard: int, batch: int | None, result: BatchResult) -> int:
        """After ``p.process``: this shard's relay, its verdicts for each claiming home, and
        the micro-batch that parked what it parked; returns the rows posted (the metrics
        row's ``relayed``, which asks the driver for a wake), for the cross-shard group the
        operations it holds for the next call's relays."""
        posted = 0
        if self.relays and shard != self.cross and len(result.relay):
            self._mailbox.post(shard, batch, result.relay)  # type: ignore[arg-type]
            posted += len(result.relay)
        if len(result.verdicts):  # the homes that claimed receive them in their next call
            for home, rows in result.verdicts.groupby("home", sort=True):
                self._verdicts_box(int(home)).post(shard, batch, rows)  # type: ignore[arg-type]
            posted += len(result.verdicts)
        if p.parked:
            p.parked_in = batch  # type: ignore[assignment]
        if self.keeps(shard):
            # operations due on arrival wait for this micro-batch's relays: ask for the next
            # one as a relay does, also when no shard relayed and the watermark stalls
            posted += p.held
        return posted

    def keeps(self, shard: int) -> bool:
        """Must this shard keep its state although it holds nothing (its ``relays_through``)?"""
        return self.relays and shard == self.cross

    def awaits(self, p: Purgatory, shard: int) -> bool:
        """Must the shard be called in the next micro-batch although no row may come for it
        (relays or notices owed to the cross-shard group, operations parked at a home)?"""
        relays_owed = self.keeps(shard) and bool(p.pending or p.awaited_notices)
        return relays_owed or bool(p.parked)

    def _verdicts(self, p: Purgatory, shard: int) -> pd.DataFrame | None:
        """The verdicts on what this shard parked in micro-batch ``p.parked_in``."""
        if not p.parked:
            return None
        box = self._verdicts_box(shard)
        verdicts = box.collect(p.parked_in - 1, p.parked_in + 1)
        box.clean(p.parked_in - 1)
        return verdicts

    def _verdicts_box(self, home: int) -> Mailbox:
        """Where the registries post their verdicts for ``home`` (a directory per home)."""
        storage = Storage.of(self._config)
        return Mailbox(StatePath(self._config.state_path).verdicts_for(home), storage, columns=VERDICTS)
