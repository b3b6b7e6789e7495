"""The checkpoint corpus: what each entry is, how its inputs are made, how it is restored and compared.

Each entry of ``tests/upgrades/corpus/`` is a real checkpoint written by an earlier version of
the job (``make_corpus.py`` runs that version's own checkout), with everything needed to
continue it and to know what continuing it must give (``corpus/README.md``):

* ``entry.json``: the plan (``Entry`` as JSON), the version and commit that wrote it, the root
  it was written under (``recorded_root``), each Kafka record's partition and timestamp;
* ``checkpoint/`` and ``tables/``: the checkpoint and the output tables after the plan's runs;
* ``inputs/`` and ``continuation/``: what those runs consumed, and what the continuation adds
  (files, or for Kafka the records of each topic in produce order, ``records.jsonl``);
* ``reference/``: the outcomes, unmatched events, rejected rows and warnings after the
  continuation, by the same version that wrote the entry (a run never upgraded), without the
  columns that differ from run to run (``RUN_COLUMNS``), one JSON object a line, sorted (an
  entry written before warnings, issue 79, has no ``warnings.jsonl``: it wrote none);
* ``mtimes.json``: every file's modification time (ns) as it was written.  Spark's file
  source forgets files older than its newest by ``maxFileAge`` (7 days) and reads a file it
  forgot again if its time is newer: a checkout gives every file today's time, so
  ``restore`` puts the recorded ones back (git keeps no times).

Paths.  A checkpoint records absolute paths: Spark's file source log (``sources/<n>/<batch>``)
keeps every input file's ``file://`` URI (the wake directory's, under the checkpoint, too),
and the tables' first commit their location (for information only).  ``restore`` relocates
an entry explicitly: it copies it under a directory of the test's, rewrites ``recorded_root``
to it in every text file of the checkpoint that holds it, and drops those files' Hadoop
``.crc`` checksums (a missing checksum is not checked; a stale one fails the read).  A binary
file naming the root would make relocation impossible: ``make_corpus.py`` refuses to record
such an entry.  Kafka offsets name no broker, only topics and partitions: the test produces
the entry's records again, in the same order, to the same partitions with the same
timestamps, on topics of the same names, so every offset means the same record.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
#: where make_corpus.py writes an entry while an old version runs on it (restore relocates it)
RECORDED_ROOT = "/tmp/spark-purgatory-corpus"
TABLES = ("outcomes", "unmatched_events", "rejected", "warnings")
#: columns that differ from run to run (when a row was emitted, in which micro-batch, on which
#: day it was rejected; ``warned_date`` is ``warned_at``'s, event time): left out of the reference
RUN_COLUMNS = {
    "outcomes": ("batch_id", "emitted_at"),
    "unmatched_events": ("batch_id",),
    "rejected": ("batch_id", "rejected_date"),
    "warnings": ("batch_id", "emitted_at"),
}
#: the Kafka record timestamp of an entry's first record (later ones a millisecond apart)
KAFKA_EPOCH_MS = 1_767_225_600_000


@dataclass(frozen=True)
class Run:
    """One run of the job: the input slices it adds first (``Entry.slices``' numbers), and
    how it ends: ``clean`` (an available-now run to its end, flushed), or ``kill`` (SIGKILL to
    the driver as soon as the first Spark run of it ends: no second run for relays owed, no
    flush of what the accumulator holds: staged rows and relays left in flight)."""

    slices: tuple[int, ...]
    stop: str = "clean"
    end_input: bool = False


@dataclass(frozen=True)
class Entry:
    """One checkpoint of the corpus: its inputs, its settings and the runs that wrote it."""

    name: str
    description: str
    #: the commit whose job writes the entry (a prefix of its hash): make_corpus.py writes an
    #: entry only with that checkout (``entry.json``'s ``written_by`` says what it was)
    writer: str
    source: str  # json | kafka
    settings: dict[str, str]
    #: the runs that write the checkpoint, then the continuation (every later version's run)
    runs: tuple[Run, ...]
    continuation: Run
    seed: int = 0
    n_ops: int = 300
    slices: int = 6
    malformed: int = 6
    duplicates: int = 12
    #: the share of operations given a ``warn_ms``, and the share a cancel event withdraws
    #: (``workload.generate``'s ``warned`` and ``withdrawn``; 0 in entries written before them)
    warned: float = 0.0
    withdrawn: float = 0.0
    #: what the runs must have left: ``relays`` (owed to the cross-shard group), ``staged``
    #: (rows the accumulator holds, uncommitted), ``pending``, ``segments``, ``warned``
    #: (pending operations that asked for a warning, some warned already and some not; the
    #: continuation warns), ``cancels`` (cancel events buffered, at or after the watermark;
    #: the continuation cancels)
    expects: tuple[str, ...] = ("pending",)
    topics: dict[str, str] = field(default_factory=dict)  # kafka: operations/events -> topic

    def job_args(self, root: str) -> list[str]:
        """The job's arguments for a run on ``root`` (without the trigger's own)."""
        args = [
            "--checkpoint-path", f"{root}/chk", "--output-path", f"{root}/out",
            "--source-format", self.source,
        ]  # fmt: skip
        if self.source == "kafka":
            args += ["--ops-path", self.topics["operations"], "--events-path", self.topics["events"]]
        else:
            args += ["--ops-path", f"{root}/ops", "--events-path", f"{root}/events"]
        for key, value in self.settings.items():
            args += ["--set", f"{key}={value}"]
        return args

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Entry:
        data = dict(data)
        data["runs"] = tuple(Run(tuple(r["slices"]), r["stop"], r["end_input"]) for r in data["runs"])
        c = data["continuation"]
        data["continuation"] = Run(tuple(c["slices"]), c["stop"], c["end_input"])
        data["expects"] = tuple(data["expects"])
        return cls(**data)


_COMMON = {
    "purgatory.shards": "2",
    "watermark.delay": "5 seconds",
    # a shard value with segment files (``state.segments``) from the first run on
    "purgatory.state.segment.rows": "32",
}

#: the entries, as make_corpus.py writes them (their plans are recorded in each entry.json)
ENTRIES: tuple[Entry, ...] = (
    Entry(
        name="files-two-runs",
        writer="6e49991",
        description=(
            "JSON files, 2 shards, two available-now runs (issue 63's case): single- and multi-key "
            "operations across shards, repeated op_ids (the registry), malformed lines; operations "
            "pending at the stop, shard values with segment files"
        ),
        source="json",
        settings=dict(_COMMON),
        runs=(Run((0, 1)), Run((2, 3))),
        continuation=Run((4, 5), end_input=True),
        seed=11,
        expects=("pending", "segments"),
    ),
    Entry(
        name="files-killed-in-flight",
        writer="6e49991",
        description=(
            "JSON files, 2 shards, accumulator.linger.ms of an hour: a clean run, then a run killed "
            "(SIGKILL) as its first Spark run ended: rows staged and not committed (mid-linger), "
            "relays to the cross-shard group and registry verdicts not yet received, operations parked"
        ),
        source="json",
        settings={**_COMMON, "accumulator.linger.ms": "3600000"},
        runs=(Run((0, 1)), Run((2, 3), stop="kill")),
        continuation=Run((4, 5), end_input=True),
        seed=23,
        expects=("pending", "relays", "staged"),
    ),
    Entry(
        name="kafka-two-runs",
        writer="6e49991",
        description=(
            "Kafka topics of 2 partitions each, 2 shards, two available-now runs: single- and "
            "multi-key operations across shards, repeated op_ids, malformed records; operations "
            "pending at the stop"
        ),
        source="kafka",
        settings={**_COMMON, "source.kafka.startingOffsets": "earliest"},
        runs=(Run((0, 1)), Run((2, 3))),
        continuation=Run((4, 5), end_input=True),
        seed=37,
        topics={"operations": "corpus-kafka-two-runs-ops", "events": "corpus-kafka-two-runs-events"},
    ),
    Entry(
        name="files-nullable-key",
        writer="2d99de0",
        description=(
            "JSON files, 2 shards, two available-now runs, written by main at 2d99de0: its state key "
            "shard was recorded nullable (the break of issue 63), which a non-nullable key continues"
        ),
        source="json",
        settings=dict(_COMMON),
        runs=(Run((0, 1)), Run((2, 3))),
        continuation=Run((4, 5), end_input=True),
        seed=53,
    ),
    Entry(
        name="files-lz4-chains",
        writer="d1d93c8",
        description=(
            "JSON files, 2 shards, three available-now runs, written by main at d1d93c8: the state "
            "files of issue 65's save (LZ4 parts, their count in the metadata, change segments "
            "spliced from the chain, a chain's first file naming its change segment), several "
            "compactions a shard; operations pending at the stop"
        ),
        source="json",
        settings=dict(_COMMON),
        runs=(Run((0, 1)), Run((2,)), Run((3,))),
        continuation=Run((4, 5), end_input=True),
        seed=71,
        expects=("pending", "segments"),
    ),
    Entry(
        name="files-warnings-cancels",
        writer="d5bf03e",
        description=(
            "JSON files, 2 shards, two available-now runs, written by corpus at d5bf03e (issue 79): "
            "operations with warn_ms pending at the stop, some warned already (their warn_at behind "
            "the watermark) and some not, their warn_at in the state; cancel events by op_id and by "
            "key buffered; the continuation warns the rest once and cancels"
        ),
        source="json",
        settings=dict(_COMMON),
        runs=(Run((0, 1)), Run((2, 3))),
        continuation=Run((4, 5), end_input=True),
        seed=97,
        warned=0.3,
        withdrawn=0.1,
        expects=("pending", "segments", "warned", "cancels"),
    ),
)


def entry_named(name: str) -> Entry:
    for entry in ENTRIES:
        if entry.name == name:
            return entry
    raise KeyError(f"no corpus entry {name!r}: {', '.join(e.name for e in ENTRIES)}")


# -- inputs ------------------------------------------------------------------------------------------


def write_slices(entry: Entry, directory: Path) -> None:
    """The entry's input as ``entry.slices`` time slices of JSON lines, ``ops/slice-<i>.json``
    and ``events/slice-<i>.json``: a random workload with multi-key operations, repeated op_ids
    (a repeat in a later slice, with another key: decided by the op_id's registry shard),
    malformed lines, and the ``warn_ms`` and cancel events ``entry.warned`` and
    ``entry.withdrawn`` ask (none asked: the input of the entries written before them)."""
    from spark_purgatory.workload import Workload, generate, write_json_lines

    work = generate(
        entry.n_ops,
        seed=entry.seed,
        ops_per_second=8,
        multi_key=0.3,
        partitions=16,
        warned=entry.warned,
        withdrawn=entry.withdrawn,
    )
    rng = np.random.default_rng(entry.seed)
    ops = work.operations
    picked = ops.iloc[rng.choice(len(ops), entry.duplicates, replace=False)].copy()
    later = rng.integers(500, 12_000, len(picked))
    picked["ts"] = np.minimum(picked["ts"].to_numpy() + later, ops["ts"].max())
    picked["keys"] = [[f"repeat-{i % 5}"] for i in range(len(picked))]
    ops = pd.concat([ops, picked], ignore_index=True).sort_values("ts", kind="stable", ignore_index=True)
    staging = directory / "_slices"
    write_json_lines(
        Workload(ops, work.events, 0),
        str(staging / "ops"),
        str(staging / "events"),
        files=entry.slices,
        malformed=entry.malformed,
        seed=entry.seed,
    )
    for kind in ("ops", "events"):
        (directory / kind).mkdir(parents=True, exist_ok=True)
        for i in range(entry.slices):
            shutil.move(staging / kind / f"part-{i:05d}.json", directory / kind / f"slice-{i}.json")
    shutil.rmtree(staging)


def kafka_records(entry: Entry, slices: Path) -> dict[str, list[dict]]:
    """Each slice's lines as Kafka records of the entry's topics: ``{kind: [{"slice", "partition",
    "timestamp", "value"}]}``, in produce order (partitions alternate; timestamps a ms apart)."""
    out: dict[str, list[dict]] = {}
    for kind, directory in (("operations", "ops"), ("events", "events")):
        records = []
        for i in range(entry.slices):
            for line in (slices / directory / f"slice-{i}.json").read_text(encoding="utf-8").splitlines():
                n = len(records)
                records.append(
                    {"slice": i, "partition": n % 2, "timestamp": KAFKA_EPOCH_MS + n, "value": line}
                )
        out[kind] = records
    return out


#: the entries' topics keep every record: their timestamps are the entry's, months old by the
#: time a test produces them again, and the broker's retention (7 days) would delete them
TOPIC_CONFIG = {"retention.ms": "-1"}


def produce(bootstrap: str, topic: str, records: list[dict]) -> None:
    """``records`` to ``topic`` in order, each to its partition with its timestamp."""
    from confluent_kafka import Producer

    # one request in flight: each partition gets its records in order, with no idempotence handshake
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "max.in.flight.requests.per.connection": 1}
    )
    failed: list[str] = []
    for r in records:
        producer.produce(
            topic,
            r["value"].encode("utf-8"),
            partition=r["partition"],
            timestamp=r["timestamp"],
            on_delivery=lambda error, _m: failed.append(str(error)) if error else None,
        )
        producer.poll(0)
    if producer.flush(60) or failed:
        raise RuntimeError(f"producing to {topic}: {failed[:3]}")


def place_files(entry: Entry, slices: Path, root: Path, numbers: tuple[int, ...]) -> list[Path]:
    """Copy the input slices ``numbers`` into ``root``'s ``ops`` and ``events`` (the job's
    input directories); returns the files placed."""
    placed = []
    for kind in ("ops", "events"):
        (root / kind).mkdir(parents=True, exist_ok=True)
        for i in numbers:
            target = root / kind / f"slice-{i}.json"
            shutil.copy2(slices / kind / f"slice-{i}.json", target)
            placed.append(target)
    return placed


# -- restoring an entry ---------------------------------------------------------------------------------


def restore(entry_dir: Path, root: Path) -> dict:
    """Entry ``entry_dir`` as its runs left it, relocated to ``root`` (module docstring):
    ``root/chk``, ``root/out`` and, for files, the inputs consumed so far in ``root/ops`` and
    ``root/events``.  Returns the entry's ``entry.json``."""
    recorded = json.loads((entry_dir / "entry.json").read_text())
    shutil.copytree(entry_dir / "checkpoint", root / "chk")
    shutil.copytree(entry_dir / "tables", root / "out")
    if (entry_dir / "inputs" / "ops").is_dir():
        shutil.copytree(entry_dir / "inputs" / "ops", root / "ops")
        shutil.copytree(entry_dir / "inputs" / "events", root / "events")
    relocate(root / "chk", recorded["recorded_root"], str(root))
    mtimes = json.loads((entry_dir / "mtimes.json").read_text())
    set_mtimes(root, {_restored(p): t for p, t in mtimes.items() if _restored(p) is not None})
    return recorded


def add_continuation(entry_dir: Path, root: Path) -> list[Path]:
    """The continuation's input files in ``root``'s input directories, with their recorded times."""
    placed = []
    mtimes = json.loads((entry_dir / "mtimes.json").read_text())
    for kind in ("ops", "events"):
        for source in sorted((entry_dir / "continuation" / kind).glob("*.json")):
            target = root / kind / source.name
            shutil.copyfile(source, target)
            placed.append(target)
            ns = mtimes[f"continuation/{kind}/{source.name}"]
            os.utime(target, ns=(ns, ns))
    return placed


def _restored(stored: str) -> str | None:
    """Where a file of the entry (its path in the entry) goes under the restored root."""
    top, _, rest = stored.partition("/")
    if top == "checkpoint":
        return f"chk/{rest}"
    if top == "tables":
        return f"out/{rest}"
    if top == "inputs" and rest.split("/", 1)[0] in ("ops", "events"):
        return rest
    return None


def relocate(checkpoint: Path, recorded_root: str, root: str) -> list[Path]:
    """Rewrite ``recorded_root`` to ``root`` in the checkpoint's text files that name it, and
    drop their ``.crc`` checksums; returns the files rewritten."""
    old, new = recorded_root.encode(), root.encode()
    rewritten = []
    for path in files_under(checkpoint):
        if path.name.endswith(".crc"):
            continue
        data = path.read_bytes()
        if old not in data:
            continue
        stat = path.stat()
        path.write_bytes(data.replace(old, new))
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        crc = path.with_name(f".{path.name}.crc")
        if crc.exists():
            crc.unlink()
        rewritten.append(path)
    return rewritten


def files_under(directory: Path) -> Iterator[Path]:
    for folder, _dirs, names in os.walk(directory):
        for name in sorted(names):
            yield Path(folder) / name


def set_mtimes(root: Path, mtimes: dict[str, int]) -> None:
    for relative, ns in mtimes.items():
        path = root / relative
        if path.exists():
            os.utime(path, ns=(ns, ns))


# -- outputs ----------------------------------------------------------------------------------------


def outputs(tables: Path) -> dict[str, list[str]]:
    """Each compared table of an output directory as sorted JSON lines, without ``RUN_COLUMNS``
    (a table a version did not write, ``warnings`` before issue 79, as no rows)."""
    from deltalake import DeltaTable

    found = {}
    for name in TABLES:
        if not (tables / name / "_delta_log").is_dir():
            found[name] = []
            continue
        frame = DeltaTable(str(tables / name)).to_pandas()
        frame = frame.drop(columns=[c for c in RUN_COLUMNS[name] if c in frame.columns])
        found[name] = sorted(_line(row) for row in frame.to_dict("records"))
    return found


def raw_as_fields(tables: dict[str, list[str]]) -> dict[str, list[str]]:
    """Outputs as ``outputs`` gives them (or a reference), each ``raw`` read as its fields."""
    out = {}
    for name, lines in tables.items():
        rows = [json.loads(line) for line in lines]
        for row in rows:
            if "raw" in row:
                row["raw"] = _fields(row["raw"])
        out[name] = sorted(_line(row) for row in rows)
    return out


def _fields(raw: object) -> object:
    """A rejected row's ``raw`` that is a JSON object as its fields with a value, keys sorted
    (how a version renders the fields of a row rejected after it was read, ``duplicate_op_id``
    and ``late``, changed in ed2332f: from sorted keys with nulls to the contract's order
    without them); any other ``raw`` as it is."""
    try:
        parsed = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return raw
    if not isinstance(parsed, dict):
        return raw
    return json.dumps({k: v for k, v in parsed.items() if v is not None}, sort_keys=True)


def _line(row: dict) -> str:
    return json.dumps({k: _plain(v) for k, v in sorted(row.items())}, sort_keys=True)


def _plain(value: object) -> object:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    if hasattr(value, "isoformat"):
        return value.isoformat()  # type: ignore[union-attr]
    if isinstance(value, np.ndarray | list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def on_reference_columns(found: dict[str, list[str]], expected: dict[str, list[str]]) -> dict[str, list[str]]:
    """``found`` (``outputs``) with only the columns each table of the reference has: a version
    that wrote a reference before a column existed (``outcomes``' ``reported`` and ``missing``)
    has none of it; those columns are checked against the engine instead (``replayed``)."""
    out = {}
    for name, lines in found.items():
        if not expected[name]:
            out[name] = lines
            continue
        kept = set(json.loads(expected[name][0]))
        out[name] = sorted(_line({k: v for k, v in json.loads(line).items() if k in kept}) for line in lines)
    return out


def last_batch(checkpoint: Path) -> int:
    """The last micro-batch the entry's runs began (its offsets log): a later batch's rows were
    decided by the version that continues it (the rows of a batch begun, and staged, earlier
    stay the earlier version's: the accumulator keeps the first staging it recorded)."""
    return max(int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())


def input_lines(entry_dir: Path, kind: str, parts: tuple[str, ...] = ("inputs", "continuation")) -> list[str]:
    """The entry's input lines of ``kind`` (``ops`` or ``events``), of its runs (``inputs``)
    then of its continuation, as files or as the Kafka records' values."""
    lines: list[str] = []
    for part in parts:
        folder = entry_dir / part
        if (folder / kind).is_dir():
            for path in sorted((folder / kind).glob("*.json")):
                lines += path.read_text(encoding="utf-8").splitlines()
        else:
            records = (folder / f"{'operations' if kind == 'ops' else kind}.jsonl").read_text(
                encoding="utf-8"
            )
            lines += [json.loads(r)["value"] for r in records.splitlines()]
    return lines


def replayed(entry_dir: Path) -> pd.DataFrame:
    """The engine's outcomes for the entry's whole input at once (``PurgatoryTester``, the
    entry's ``purgatory.*`` settings, the input ended), by ``op_id``, times in ms."""
    from spark_purgatory.testing import PurgatoryTester

    settings = json.loads((entry_dir / "entry.json").read_text())["settings"]
    t = PurgatoryTester({k: v for k, v in settings.items() if k.startswith("purgatory.")})
    t.add_operations("\n".join(input_lines(entry_dir, "ops")))
    t.add_events("\n".join(input_lines(entry_dir, "events")))
    t.end_input()
    return t.outcomes(times="ms").set_index("op_id")


def read_reference(entry_dir: Path) -> dict[str, list[str]]:
    """The entry's reference, table by table; a table it has none of (``warnings``, in an entry
    written before issue 79) as no rows: that version wrote none, and a continuation of its
    input, which asks for no warning, writes none."""
    found = {}
    for name in TABLES:
        path = entry_dir / "reference" / f"{name}.jsonl"
        found[name] = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    return found


def differences(found: dict[str, list[str]], expected: dict[str, list[str]]) -> list[str]:
    """What differs, table by table: rows only in one of the two, or more often (a row written
    twice, a warning repeated after a restart), a few of each; or []."""
    out = []
    for name in TABLES:
        have, want = Counter(found[name]), Counter(expected[name])
        if have == want:
            continue
        out.append(
            f"{name}: {len(found[name])} rows, the reference {len(expected[name])}; "
            f"only (or more often) here {sorted((have - want).elements())[:3]}, "
            f"only (or more often) in the reference {sorted((want - have).elements())[:3]}"
        )
    return out
