"""Every checkpoint of the corpus continues under this version with the outcomes of a run never upgraded.

Each entry of ``tests/upgrades/corpus/`` is a checkpoint an earlier version wrote, with its
tables and inputs (``entries``, ``corpus/README.md``).  Here it is restored (relocated under
the test's directory, its files' times put back), its continuation input is added, and the
job of this checkout runs once on it (``available-now``, ending the input so that everything
pending resolves; after ``spark-purgatory upgrade`` where the entry's formats need it).  The
outcomes, unmatched events, rejected rows and warnings must then be the reference: what the
version that wrote the entry gave when it continued the same checkpoint itself, on the
reference's columns, each row as many times (a warning given before the stop is not given
again, one due after it is given once); a column added since (``outcomes``' ``reported`` and
``missing``) must be, for the outcomes this version decided, what the engine gives for the
entry's whole input at once.  An entry written before warnings (issue 79) has none, and its
continuation, whose input asks for none, writes none.

A persisted format changed without compatibility or a migration fails here: Spark's state
schemas (issue 63: the state key ``shard`` became nullable), the group-state value, the
project's files under the checkpoint, the tables' schemas and properties.
"""

from __future__ import annotations

import json

import pytest
from deltalake import DeltaTable

from spark_purgatory.cli import main as cli_main
from spark_purgatory.job import main as job_main
from spark_purgatory.state.versions import current_formats, needed_steps, package_version, read_record
from tests.upgrades import entries as corpus
from tests.upgrades.entries import Entry

pytestmark = pytest.mark.spark

ENTRY_DIRS = sorted(d for d in corpus.CORPUS.iterdir() if (d / "entry.json").is_file())


def _entry(entry_dir) -> Entry:
    recorded = json.loads((entry_dir / "entry.json").read_text())
    return Entry.from_json({k: v for k, v in recorded.items() if k in Entry.__dataclass_fields__})


def _marks(entry_dir) -> list:
    return [pytest.mark.jars("kafka", "kafka-broker")] if _entry(entry_dir).source == "kafka" else []


def test_the_corpus_has_every_entry_the_generator_writes():
    assert [d.name for d in ENTRY_DIRS] == sorted(e.name for e in corpus.ENTRIES)


@pytest.mark.parametrize("entry_dir", [pytest.param(d, id=d.name, marks=_marks(d)) for d in ENTRY_DIRS])
def test_an_entry_continues_with_the_reference_outputs(entry_dir, tmp_path, spark, request, capsys):
    entry = _entry(entry_dir)
    corpus.restore(entry_dir, tmp_path)
    extra = ["--set", "job.restart.attempts=0"]
    if entry.source == "kafka":
        broker = request.getfixturevalue("kafka_broker")
        for kind, topic in entry.topics.items():
            broker.create_topic(topic, partitions=2, config=corpus.TOPIC_CONFIG)
            for stored in ("inputs", "continuation"):
                records = (entry_dir / stored / f"{kind}.jsonl").read_text().splitlines()
                corpus.produce(broker.bootstrap_servers, topic, [json.loads(r) for r in records])
        extra += ["--set", f"kafka.bootstrap.servers={broker.bootstrap_servers}"]
    else:
        corpus.add_continuation(entry_dir, tmp_path)
    args = [*entry.job_args(str(tmp_path)), *extra, "--trigger", "available-now", "--end-input"]
    chk = str(tmp_path / "chk")
    last = corpus.last_batch(tmp_path / "chk")
    if needed_steps(read_record(chk)):  # formats this version no longer reads as they are
        assert cli_main(["upgrade", "--checkpoint", chk]) == 0, capsys.readouterr().err
    assert job_main(args) == 0, capsys.readouterr().err[-3000:]
    reference = corpus.read_reference(entry_dir)
    found = corpus.on_reference_columns(corpus.outputs(tmp_path / "out"), reference)
    assert corpus.differences(found, reference) == []
    assert_who_answered(entry_dir, tmp_path / "out", last)
    record = read_record(chk)  # the start recorded this version and its formats
    assert (record["written_by"], record["formats"]) == (package_version(), current_formats())


def assert_who_answered(entry_dir, out, last: int) -> None:
    """The outcomes this version decided (after the entry's last batch) name who answered as
    the engine does on the whole input at once; among them ``all`` (and ``quorum``) operations
    the entry's runs read, pending when they stopped, name theirs."""
    rows = DeltaTable(str(out / "outcomes")).to_pyarrow_table().to_pylist()
    decided = [r for r in rows if r["batch_id"] > last]
    engine = corpus.replayed(entry_dir)
    found = {r["op_id"]: (r["status"], r["reported"], r["missing"]) for r in decided}
    assert found == {o: tuple(engine.loc[o, ["status", "reported", "missing"]]) for o in found}
    read_before = {_op_id(line) for line in corpus.input_lines(entry_dir, "ops", ("inputs",))}
    of_members = [r for r in decided if r["condition"] in ("all", "quorum") and r["op_id"] in read_before]
    assert of_members and all(r["reported"] is not None and r["missing"] is not None for r in of_members)


def _op_id(line: str) -> object:
    try:
        return json.loads(line).get("op_id")
    except (ValueError, AttributeError):  # a malformed line, or no JSON object
        return None
