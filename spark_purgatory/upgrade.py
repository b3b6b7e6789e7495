"""Upgrade a stopped checkpoint to this version's formats: ``spark-purgatory upgrade --checkpoint C``.

A checkpoint records its formats (``state.versions``); one this version no longer reads needs
a migration before a query starts on it.  ``upgrade`` applies them as ``rescale`` changes a
layout: with no JVM, on a stopped checkpoint, resumable after a crash at any point.

1. **Refuse** what it cannot do, each with one line (``UpgradeError``).
2. **Journal** the steps: one per migration (``MIGRATIONS``), then ``record``.
3. **Apply** each step not yet done, noting it in the journal after it; a step is
   idempotent, so a crash in one repeats it whole.
4. **Switch**: the ``record`` step writes the record; then the journal is removed.

While the journal is there ``start`` refuses the checkpoint; running ``upgrade`` again
resumes from it.

Invariant: the record names the new formats only once every migration step is done.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from .checkpoint_paths import Checkpoint
from .config import PurgatoryConfig
from .runtime.processes import kill_at
from .state.layout import RescaleError, RunLease, now_text, recover
from .state.versions import (
    IncompatibleCheckpointError,
    check_formats,
    current_formats,
    is_current,
    needed_steps,
    package_version,
    read_journal,
    read_record,
    recorded_formats,
    refuse_newer,
    write_record,
)
from .storage import Storage, remove, write_whole

#: PURGATORY_UPGRADE_FAULT=<step>: the process kills itself (SIGKILL) as it reaches that step
FAULT = "PURGATORY_UPGRADE_FAULT"
#: the step that writes the version record: always the last
RECORD_STEP = "record"

#: A migration: ``(format, version) -> step`` brings that format from ``version`` to
#: ``version + 1`` on a stopped checkpoint, idempotently.  None today: ``upgrade`` of a
#: checkpoint written before the version record writes the record, its one step.
Migration = Callable[[str, Storage, PurgatoryConfig], None]
MIGRATIONS: dict[tuple[str, int], Migration] = {}


class UpgradeError(RuntimeError):
    """``upgrade`` refused: one line saying why and what to do."""


@dataclass(frozen=True)
class UpgradeResult:
    """What ``upgrade`` did: the checkpoint written by ``from_version`` now recorded by
    ``to_version``, through ``steps`` (none: it was up to date), resuming an interrupted
    upgrade or not, in ``seconds``."""

    checkpoint: str
    from_version: str | None
    to_version: str
    steps: tuple[str, ...]
    resumed: bool
    seconds: float


def upgrade(
    checkpoint: str, *, config: PurgatoryConfig | None = None, storage: Storage | None = None
) -> UpgradeResult:
    """Bring the stopped checkpoint ``checkpoint`` to this version's formats (module docstring).

    Args:
        checkpoint: the query's checkpoint (a path or URI).
        config: the query's configuration (its state path, ``storage.*``).
        storage: the ``storage.*`` settings (``config``'s when None).

    Raises:
        UpgradeError: what it refuses, in one line.

    Example::

        from spark_purgatory.upgrade import upgrade
        done = upgrade("/chk/orders")          # every query on it stopped
        print(done.from_version, "->", done.to_version, done.steps)
    """
    began = time.perf_counter()
    config = config or PurgatoryConfig()
    storage = storage or Storage.of(config)
    fs, files = Checkpoint(checkpoint).opened(storage)
    if not fs.get_file_info(files.spark_metadata).is_file:
        raise UpgradeError(f"{checkpoint} is not a checkpoint a query ran on: nothing to upgrade")
    try:
        RunLease(checkpoint, storage).check_free()
    except RescaleError as busy:
        raise UpgradeError(str(busy)) from None
    record, journal = read_record(checkpoint, storage), read_journal(checkpoint, storage)
    written = None if record is None else record.get("written_by")
    current = current_formats()
    resumed = journal is not None
    if journal is None:
        try:
            refuse_newer(checkpoint, record)
        except IncompatibleCheckpointError as newer:
            raise UpgradeError(str(newer)) from None
        if is_current(record):
            return UpgradeResult(checkpoint, written, written, (), False, _since(began))
        steps = [_step_name(name, version) for name, version in needed_steps(record)] + [RECORD_STEP]
        journal = {
            "by": package_version(),
            "from": written,
            "from_formats": recorded_formats(record),
            "to_formats": current,
            "steps": steps,
            "done": [],
            "started_at": now_text(),
        }
        _write_journal(fs, files, journal)
    elif journal.get("to_formats") != current:
        raise UpgradeError(
            f"an upgrade of {checkpoint} to other formats ({journal.get('to_formats')}) by spark-purgatory "
            f"{journal.get('by')} was interrupted: finish it with that version"
        )
    recover(checkpoint, storage=storage, config=config)  # a rescale a crash interrupted, first
    for step in journal["steps"]:
        if step in journal["done"]:
            continue
        kill_at(FAULT, step)
        if step == RECORD_STEP:
            write_record(checkpoint, storage, known=record)
        else:
            name, version = _parsed(step)
            MIGRATIONS[(name, version)](checkpoint, storage, config)
        journal["done"].append(step)
        _write_journal(fs, files, journal)
    kill_at(FAULT, "finish")
    remove(fs, [files.upgrade_journal])
    check_formats(checkpoint, storage)  # the switch made: the checkpoint starts now
    return UpgradeResult(
        checkpoint, journal.get("from"), package_version(), tuple(journal["steps"]), resumed, _since(began)
    )


def _step_name(name: str, version: int) -> str:
    """A migration step's name in the journal (and for ``PURGATORY_UPGRADE_FAULT``)."""
    return f"{name}-{version}-{version + 1}"


def _parsed(step: str) -> tuple[str, int]:
    name, version, _next = step.rsplit("-", 2)
    return name, int(version)


def _write_journal(fs, files: Checkpoint, journal: dict) -> None:
    body = json.dumps(journal).encode()
    write_whole(fs, files.upgrade_journal, lambda out: out.write(body))


def _since(began: float) -> float:
    return round(time.perf_counter() - began, 3)
