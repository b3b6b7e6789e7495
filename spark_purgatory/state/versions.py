"""A checkpoint's version record: the spark-purgatory that wrote it and the formats it holds.

``<checkpoint>/purgatory-version`` is one small JSON file, written by every ``start`` whose
check passed and by ``spark-purgatory upgrade``:

    {"record": 1, "written_by": "0.2.0", "formats": {"state-schema": 1, "shard-state": 3, ...},
     "history": [{"version": "0.2.0", "since": "2026-12-01T09:00:00+00:00"}]}

A format's version (``FORMATS``) changes only when old and new can no longer read each
other's files.  ``check_formats`` refuses a checkpoint with a newer format, an older one that
needs ``upgrade``, or an upgrade under way.  No record means the first version of each.

Invariant: a query starts only on a checkpoint whose every format this version reads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..checkpoint_paths import OpenCheckpoint, open_checkpoint
from ..storage import Storage, read_bytes, write_whole
from ..version import __version__
from .layout import now_text


def package_version() -> str:
    """This spark-purgatory's version (``spark_purgatory.version``, its one place)."""
    return __version__


@dataclass(frozen=True)
class Format:
    """One persisted format: the version this spark-purgatory writes, and the oldest version
    of it that it reads as it is (older ones need ``upgrade``'s migration steps)."""

    name: str
    version: int
    reads_since: int
    what: str


#: the formats a checkpoint holds, as this version writes them (docs/upgrading.md lists them)
FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format(
            "state-schema",
            1,
            1,
            "Spark's state schemas of the operator: key shard integer NOT NULL, value "
            "groupState<shard_state string or binary> and timeoutTimestamp",
        ),
        Format(
            "shard-state",
            3,
            1,
            "a shard's value: 1 whole in the group state (with segment files), 2 a pointer to "
            "its delta files (state.increments), 3 as 2, its operations' conditions possibly "
            "quorum (engine.conditions), which 2 does not know; the value's own format is "
            "state.shard_state's",
        ),
        Format(
            "checkpoint-files",
            1,
            1,
            "the project's files under the checkpoint and the state path: id, layout, rescale "
            "journal, lease, pending record, end of input, wake, mailbox, verdicts, partition "
            "watermarks",
        ),
        Format(
            "tables",
            1,
            1,
            "the output tables' schemas and properties, and the rows staged for them under "
            "the checkpoint (columns are only added, nullable)",
        ),
    )
}
#: the formats of a checkpoint written before the record
BEFORE_RECORD: dict[str, int] = dict.fromkeys(FORMATS, 1)


class IncompatibleCheckpointError(RuntimeError):
    """A checkpoint this version cannot start on: one line, with what to run."""


def read_record(checkpoint: str | OpenCheckpoint, storage: Storage | None = None) -> dict | None:
    """The checkpoint's version record, None when it has none."""
    chk = open_checkpoint(checkpoint, storage)
    return _read(chk, chk.files.version_record)


def read_journal(checkpoint: str | OpenCheckpoint, storage: Storage | None = None) -> dict | None:
    """The journal of an upgrade under way, None when none is."""
    chk = open_checkpoint(checkpoint, storage)
    return _read(chk, chk.files.upgrade_journal)


def _read(chk: OpenCheckpoint, path: str) -> dict | None:
    try:
        return json.loads(read_bytes(chk.fs, path))
    except (FileNotFoundError, NotADirectoryError):
        return None


def current_formats() -> dict[str, int]:
    """The formats this version writes: name -> version."""
    return {name: f.version for name, f in FORMATS.items()}


def is_current(record: dict | None) -> bool:
    """Does ``record`` name this version and its formats already?"""
    return (
        record is not None
        and record.get("written_by") == package_version()
        and record.get("formats") == current_formats()
    )


def write_record(
    checkpoint: str | OpenCheckpoint, storage: Storage | None = None, *, known: dict | None = None
) -> dict:
    """Record this version and its formats (``known``: the record read before, if it was);
    nothing is written when the record says so already.  Returns the record."""
    chk = open_checkpoint(checkpoint, storage)
    before = known if known is not None else read_record(chk)
    if is_current(before):
        return before  # type: ignore[return-value]
    current, formats = package_version(), current_formats()
    history = list((before or {}).get("history", []))
    if not history or history[-1].get("version") != current:
        history.append({"version": current, "since": now_text()})
    record = {"record": 1, "written_by": current, "formats": formats, "history": history}
    body = json.dumps(record, indent=1).encode()
    write_whole(chk.fs, chk.files.version_record, lambda out: out.write(body))
    return record


def check_formats(checkpoint: str | OpenCheckpoint, storage: Storage | None = None) -> dict | None:
    """Refuse a checkpoint this version cannot start on; its record (None: no record)."""
    chk = open_checkpoint(checkpoint, storage)
    checkpoint = chk.path
    record, journal = read_record(chk), read_journal(chk)
    if journal is not None:
        raise IncompatibleCheckpointError(
            f"an upgrade of checkpoint {checkpoint} by spark-purgatory {journal.get('by', '?')} was "
            f"interrupted: run `spark-purgatory upgrade --checkpoint {checkpoint}` to finish it, "
            "then start again (docs/upgrading.md)"
        )
    refuse_newer(checkpoint, record)
    if needed_steps(record):
        raise IncompatibleCheckpointError(
            f"checkpoint {checkpoint} was written by {_writer(record)}, whose "
            f"{_older(record)} this spark-purgatory {package_version()} does not read as it is: stop "
            f"every query on it and run `spark-purgatory upgrade --checkpoint {checkpoint}`, then "
            "start again (docs/upgrading.md)"
        )
    return record


def refuse_newer(checkpoint: str, record: dict | None) -> None:
    """Raise ``IncompatibleCheckpointError`` when ``record`` names a format newer than this
    version knows, or one it does not know: a newer version wrote the checkpoint."""
    newer = _newer(record)
    if newer:
        raise IncompatibleCheckpointError(
            f"checkpoint {checkpoint} was written by {_writer(record)}, newer than this "
            f"spark-purgatory {package_version()} ({newer}): start it with {_writer(record)} or "
            "later (docs/upgrading.md, rolling back)"
        )


def needed_steps(record: dict | None) -> list[tuple[str, int]]:
    """The migration steps a checkpoint with ``record`` needs, in order: ``(format, from)``
    for each format older than this version reads as it is, one step per version."""
    recorded = recorded_formats(record)
    steps = []
    for name, f in FORMATS.items():
        steps += [(name, v) for v in range(recorded.get(name, 1), f.reads_since)]
    return steps


def recorded_formats(record: dict | None) -> dict[str, int]:
    """The formats a record names (``BEFORE_RECORD`` for a checkpoint without one)."""
    return dict(BEFORE_RECORD) if record is None else {k: int(v) for k, v in record["formats"].items()}


def _newer(record: dict | None) -> str:
    """What in ``record`` is newer than this version knows ("" when nothing is)."""
    found = []
    for name, version in recorded_formats(record).items():
        if name not in FORMATS:
            found.append(f"a format it does not know, {name} {version}")
        elif version > FORMATS[name].version:
            found.append(f"{name} format {version}, this version reads up to {FORMATS[name].version}")
    return "; ".join(found)


def _older(record: dict | None) -> str:
    recorded = recorded_formats(record)
    return ", ".join(
        f"{name} format {recorded.get(name, 1)} (it reads {f.reads_since} and later)"
        for name, f in FORMATS.items()
        if recorded.get(name, 1) < f.reads_since
    )


def _writer(record: dict | None) -> str:
    """Who wrote the checkpoint, as the refusals name it."""
    if record is None:
        return "a spark-purgatory from before version records"
    return f"spark-purgatory {record['written_by']}"
