"""Write the checkpoint corpus (``tests/upgrades/corpus/``) with the job of a given checkout.

    python tests/upgrades/make_corpus.py --checkout /work/old [--entry NAME ...]
    python tests/upgrades/make_corpus.py --checkout . --verify [--entry NAME ...]

The checkout is a commit of this project with its own ``make setup`` done (its ``.venv`` and
``.jars``): its ``jobs/purgatory_job.py`` runs, with its own Python, the runs of each entry
that commit writes (``entries.ENTRIES``, ``Entry.writer``) on inputs this script makes, under
``entries.RECORDED_ROOT/<entry>``; then the entry is recorded (checkpoint, tables, inputs,
times), the same checkout runs the continuation, and its outputs become the entry's
reference (``corpus/README.md``).  A run
whose plan says ``kill`` is the checkout's own job with one change: its driver kills itself
(SIGKILL) as the first Spark run of that job ends.  Kafka entries run on a broker this
script starts (``spark_purgatory.kafka_broker``, this checkout's).

``--verify`` writes nothing: it runs each entry's whole plan (its runs, then the continuation)
with the checkout's job alone on the entry's recorded inputs, and compares the outputs with
the entry's reference: what ``test_corpus.py`` checks of a continued checkpoint, checked of a
run that was never anything but that version.

Run from this checkout (its Python needs pandas, deltalake and confluent-kafka: ``make setup``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))
from spark_purgatory.inspect.checkpoint import read_checkpoint  # noqa: E402
from tests.upgrades import entries as corpus  # noqa: E402
from tests.upgrades.entries import Entry, Run  # noqa: E402

#: runs the checkout's job file; with CORPUS_STOP=kill its driver kills itself (SIGKILL) as the
#: first Spark run of the job ends (``PurgatoryQuery.await_termination``, public in every version)
DRIVER = r"""
import os, runpy, signal, sys
job_file = sys.argv[1]
sys.argv = [job_file, *sys.argv[2:]]
if os.environ.get("CORPUS_STOP") == "kill":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(job_file))))
    import spark_purgatory
    def await_then_kill(self, timeout=None):
        self.query.awaitTermination()
        owes = getattr(self, "_owes_wake", None)
        print(f"corpus: killed as the first Spark run ended; relays owed: {owes() if owes else 'unknown'}",
              flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    spark_purgatory.PurgatoryQuery.await_termination = await_then_kill
runpy.run_path(job_file, run_name="__main__")
"""


class Checkout:
    """A checkout of the project with its own venv: its version, commit, and its job."""

    def __init__(self, path: Path) -> None:
        self.path = path.resolve()
        self.python = self.path / ".venv" / "bin" / "python"
        if not self.python.exists():
            raise SystemExit(f"{self.path} has no .venv: run `make setup` there first")
        self.commit = _git(self.path, "rev-parse", "HEAD")
        self.version = subprocess.run(
            [str(self.python), "-c", "import importlib.metadata as m; print(m.version('spark-purgatory'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()

    def run_job(self, args: list[str], *, stop: str, log: Path) -> str:
        """Run the checkout's job with ``args``; its output is appended to ``log`` and returned."""
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["CORPUS_STOP"] = stop
        command = [str(self.python), "-c", DRIVER, str(self.path / "jobs" / "purgatory_job.py"), *args]
        began = time.perf_counter()
        done = subprocess.run(command, cwd=self.path, env=env, capture_output=True, text=True, timeout=1800)
        output = done.stdout + done.stderr
        with log.open("a", encoding="utf-8") as out:
            out.write(f"\n$ {' '.join(args)}  (stop={stop}, exit {done.returncode})\n{output}")
        expected = -9 if stop == "kill" else 0
        if done.returncode != expected:
            raise SystemExit(
                f"the job exited {done.returncode}, not {expected} (log: {log}):\n{output[-3000:]}"
            )
        ending = " with --end-input" if "--end-input" in args else ""
        print(f"  a run{ending} ({stop}): {time.perf_counter() - began:.0f} s")
        return output


def _git(path: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(path), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


class Inputs:
    """An entry's input slices, placed for each run as files in the root or records on the broker."""

    def __init__(self, entry: Entry, slices: Path, root: Path, broker=None) -> None:
        self.entry, self.slices, self.root = entry, slices, root
        self.broker = broker if entry.source == "kafka" else None
        self.records = corpus.kafka_records(entry, slices) if entry.source == "kafka" else {}
        self.placed: dict[str, int] = {}  # a file placed -> its mtime (ns)
        if self.broker is not None:
            for topic in entry.topics.values():
                broker.create_topic(topic, partitions=2, config=corpus.TOPIC_CONFIG)

    def add(self, numbers: tuple[int, ...]) -> None:
        if self.broker is None:
            for path in corpus.place_files(self.entry, self.slices, self.root, numbers):
                self.placed[str(path.relative_to(self.root))] = path.stat().st_mtime_ns
            return
        for kind, topic in self.entry.topics.items():
            corpus.produce(
                self.broker.bootstrap_servers, topic, [r for r in self.records[kind] if r["slice"] in numbers]
            )

    def kafka_args(self) -> list[str]:
        return (
            []
            if self.broker is None
            else ["--set", f"kafka.bootstrap.servers={self.broker.bootstrap_servers}"]
        )

    def records_of(self, numbers: tuple[int, ...]) -> dict[str, list[dict]]:
        return {kind: [r for r in rs if r["slice"] in numbers] for kind, rs in self.records.items()}


def _run(checkout: Checkout, entry: Entry, inputs: Inputs, run: Run, log: Path) -> str:
    inputs.add(run.slices)
    args = [*entry.job_args(str(inputs.root)), *inputs.kafka_args(), "--trigger", "available-now"]
    if run.end_input:
        args.append("--end-input")
    return checkout.run_job(args, stop=run.stop, log=log)


def _left(entry: Entry, root: Path, slices: Path, said: str) -> list[str]:
    """What ``entry.expects`` the runs to have left that they did not (``slices``: the input)."""
    chk = root / "chk"
    missing = []
    if "pending" in entry.expects:
        record = json.loads((chk / "purgatory-pending").read_text())
        if not sum(record["pending"].values()):
            missing.append("pending operations")
    if "relays" in entry.expects and "relays owed: True" not in said:
        missing.append("relays owed to the cross-shard group")
    if "staged" in entry.expects:
        staged = [
            p
            for p in corpus.files_under(chk / "accumulator")
            if p.name != "staged_through" and not p.name.endswith(".crc")
        ]
        if not staged:
            missing.append("rows staged in the accumulator")
    if "segments" in entry.expects and not any((chk / "purgatory-state").rglob("*.arrow")):
        missing.append("segment files")
    consumed = tuple(i for run in entry.runs for i in run.slices)
    if "warned" in entry.expects:
        asked = {o["op_id"] for o in _parsed(slices, "ops", consumed) if o.get("warn_ms") is not None}
        pending = asked - set(_column(root / "out", "outcomes", "op_id"))
        warned = pending & set(_column(root / "out", "warnings", "op_id"))
        if not warned:
            missing.append("pending operations warned already")
        if not pending - warned:
            missing.append("pending operations that asked for a warning not given yet")
    if "cancels" in entry.expects:
        watermark = read_checkpoint(str(chk)).watermark_ms or 0
        buffered = [
            e for e in _parsed(slices, "events", consumed) if e.get("cancel") and _ms(e["ts"]) >= watermark
        ]
        if not any(e.get("op_id") for e in buffered) or not any(not e.get("op_id") for e in buffered):
            missing.append("cancel events buffered, by op_id and by key")
    return missing


def _continued(entry: Entry, root: Path, last: int) -> list[str]:
    """What ``entry.expects`` the continuation (the batches after ``last``) to write that it did not."""

    def decided(name: str, column: str) -> list:
        values, batches = _column(root / "out", name, column), _column(root / "out", name, "batch_id")
        return [value for value, batch in zip(values, batches, strict=True) if batch > last]

    missing = []
    if "warned" in entry.expects and not decided("warnings", "op_id"):
        missing.append("warnings")
    if "cancels" in entry.expects and "cancelled" not in decided("outcomes", "status"):
        missing.append("cancelled outcomes")
    return missing


def _parsed(slices: Path, kind: str, numbers: tuple[int, ...]) -> list[dict]:
    """The JSON objects of the input slices ``numbers`` of ``kind`` (malformed lines left out)."""
    found = []
    for i in numbers:
        for line in (slices / kind / f"slice-{i}.json").read_text(encoding="utf-8").splitlines():
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict) and isinstance(value.get("ts"), str | int):
                found.append(value)
    return found


def _ms(ts: str | int) -> int:
    if isinstance(ts, int):
        return ts
    return int(datetime.datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() * 1000)


def _column(tables: Path, name: str, column: str) -> list:
    """A column of an output table (none: the table does not exist)."""
    from deltalake import DeltaTable

    if not (tables / name / "_delta_log").is_dir():
        return []
    return DeltaTable(str(tables / name)).to_pyarrow_table(columns=[column]).column(column).to_pylist()


def _binary_naming(root: Path, directory: Path) -> list[str]:
    """Files under ``directory`` that name ``root`` and are not text: relocation cannot rewrite them."""
    found = []
    for path in corpus.files_under(directory):
        data = path.read_bytes()
        if str(root).encode() in data:
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                found.append(str(path))
    return found


def write_entry(checkout: Checkout, entry: Entry, corpus_dir: Path, broker=None) -> None:
    """Run ``entry``'s plan with ``checkout`` and record it in ``corpus_dir/<name>``."""
    root = Path(corpus.RECORDED_ROOT) / entry.name
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    target = corpus_dir / entry.name
    log = Path(tempfile.gettempdir()) / f"corpus-{entry.name}.log"
    log.write_text("")
    print(f"{entry.name}: written by {checkout.version} ({checkout.commit[:7]}) under {root}; log {log}")
    with tempfile.TemporaryDirectory(prefix="corpus-slices-") as slices:
        corpus.write_slices(entry, Path(slices))
        inputs = Inputs(entry, Path(slices), root, broker)
        said = "".join(_run(checkout, entry, inputs, run, log) for run in entry.runs)
        missing = _left(entry, root, Path(slices), said)
        if missing:
            raise SystemExit(
                f"{entry.name}: the runs left no {', '.join(missing)}: change the plan (log {log})"
            )
        naming = _binary_naming(root, root / "chk") + _binary_naming(root, root / "out")
        if naming:
            raise SystemExit(
                f"{entry.name}: binary files name {root}, so the entry cannot be relocated: {naming}"
            )
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        shutil.copytree(root / "chk", target / "checkpoint")
        shutil.copytree(root / "out", target / "tables")
        mtimes = {}
        for stored, where in (("checkpoint", "chk"), ("tables", "out")):
            for path in corpus.files_under(root / where):
                mtimes[f"{stored}/{path.relative_to(root / where)}"] = path.stat().st_mtime_ns
        consumed = tuple(i for run in entry.runs for i in run.slices)
        _keep_inputs(inputs, target / "inputs", consumed, mtimes, "inputs")
        last = corpus.last_batch(root / "chk")
        _run(checkout, entry, inputs, entry.continuation, log)
        missing = _continued(entry, root, last)
        if missing:
            raise SystemExit(f"{entry.name}: the continuation wrote no {', '.join(missing)} (log {log})")
        _keep_inputs(inputs, target / "continuation", entry.continuation.slices, mtimes, "continuation")
    (target / "mtimes.json").write_text(json.dumps(mtimes, indent=0, sort_keys=True) + "\n")
    recorded = {
        **entry.to_json(),
        "written_by": {"version": checkout.version, "commit": checkout.commit},
        "recorded_root": str(root),
        "written_at": time.strftime("%Y-%m-%d", time.gmtime()),
    }
    (target / "entry.json").write_text(json.dumps(recorded, indent=2) + "\n")
    (target / "reference").mkdir()
    for name, lines in corpus.outputs(root / "out").items():
        (target / "reference" / f"{name}.jsonl").write_text("".join(f"{line}\n" for line in lines))
    shutil.rmtree(root)
    size = sum(p.stat().st_size for p in corpus.files_under(target))
    print(f"{entry.name}: recorded in {target} ({size / 1024:.0f} KB)")


def _keep_inputs(
    inputs: Inputs, directory: Path, numbers: tuple[int, ...], mtimes: dict, stored: str
) -> None:
    """The input slices ``numbers`` as the entry keeps them: the files (their times in
    ``mtimes``), or each topic's records (``<kind>.jsonl``)."""
    directory.mkdir(parents=True)
    if inputs.broker is not None:
        for kind, records in inputs.records_of(numbers).items():
            (directory / f"{kind}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        return
    for kind in ("ops", "events"):
        (directory / kind).mkdir()
        for i in numbers:
            relative = f"{kind}/slice-{i}.json"
            shutil.copyfile(inputs.root / relative, directory / relative)
            mtimes[f"{stored}/{relative}"] = inputs.placed[relative]


def verify_entry(checkout: Checkout, entry_dir: Path, broker=None) -> list[str]:
    """Run the recorded entry's whole plan with ``checkout`` alone; its outputs' differences
    from the entry's reference ([] when equal)."""
    recorded = json.loads((entry_dir / "entry.json").read_text())
    entry = Entry.from_json({k: v for k, v in recorded.items() if k in Entry.__dataclass_fields__})
    root = Path(tempfile.mkdtemp(prefix=f"corpus-verify-{entry.name}-"))
    log = root / "job.log"
    with tempfile.TemporaryDirectory(prefix="corpus-slices-") as slices:
        _recorded_slices(entry_dir, Path(slices), entry)
        inputs = Inputs(entry, Path(slices), root / "run", broker)
        (root / "run").mkdir()
        for run in (*entry.runs, entry.continuation):
            _run(checkout, entry, inputs, run, log)
    found, reference = corpus.outputs(root / "run" / "out"), corpus.read_reference(entry_dir)
    differences = corpus.differences(found, reference)
    if differences and not corpus.differences(corpus.raw_as_fields(found), corpus.raw_as_fields(reference)):
        differences.append("the same rows once each rejected row's raw is read as its fields")
    print(
        f"{entry.name}: {checkout.version} ({checkout.commit[:7]}) alone: "
        + ("the reference's outputs" if not differences else "; ".join(differences))
    )
    return differences


def _recorded_slices(entry_dir: Path, slices: Path, entry: Entry) -> None:
    """The entry's recorded inputs back as slice files (Kafka entries: the records' values)."""
    for stored in ("inputs", "continuation"):
        if entry.source == "kafka":
            for kind, directory in (("operations", "ops"), ("events", "events")):
                (slices / directory).mkdir(parents=True, exist_ok=True)
                by_slice: dict[int, list[str]] = {}
                for line in (entry_dir / stored / f"{kind}.jsonl").read_text().splitlines():
                    r = json.loads(line)
                    by_slice.setdefault(r["slice"], []).append(r["value"])
                for i, values in by_slice.items():
                    (slices / directory / f"slice-{i}.json").write_text("".join(v + "\n" for v in values))
        else:
            shutil.copytree(entry_dir / stored, slices, dirs_exist_ok=True)
    for directory in ("ops", "events"):  # slices with no line at all
        for i in range(entry.slices):
            (slices / directory / f"slice-{i}.json").touch()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", required=True, type=Path, help="a checkout with its own `make setup`")
    parser.add_argument("--entry", action="append", help="only this entry (repeatable); default: all")
    parser.add_argument("--corpus", type=Path, default=corpus.CORPUS, help="where the entries are")
    parser.add_argument(
        "--verify", action="store_true", help="run each plan with the checkout alone; compare"
    )
    args = parser.parse_args(argv)
    checkout = Checkout(args.checkout)
    chosen = [corpus.entry_named(name) for name in args.entry] if args.entry else list(corpus.ENTRIES)
    if not args.verify:  # an entry is written by its own commit's job
        mine = [e for e in chosen if checkout.commit.startswith(e.writer)]
        for entry in chosen:
            if entry not in mine:
                print(f"{entry.name}: written by {entry.writer}, not {checkout.commit[:7]}: skipped")
        chosen = mine
    broker = None
    if any(e.source == "kafka" for e in chosen):
        from spark_purgatory.kafka_broker import KafkaBroker

        broker = KafkaBroker(data_dir=Path(tempfile.mkdtemp(prefix="corpus-kafka-"))).start()
    try:
        if args.verify:
            failed = [e.name for e in chosen if verify_entry(checkout, args.corpus / e.name, broker)]
            return 1 if failed else 0
        for entry in chosen:
            write_entry(checkout, entry, args.corpus, broker)
    finally:
        if broker is not None:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
