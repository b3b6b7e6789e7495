"""The shard state in Spark's group state: base64 text for new checkpoints, bytes kept for a
checkpoint that began with them (``spark.group_state``)."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from deltalake import DeltaTable

from spark_purgatory import PurgatoryConfig, query, start
from spark_purgatory.handoff.wake import wake_first
from spark_purgatory.spark import group_state
from spark_purgatory.spark.group_state import encoding_of, shard_bytes, state_schema, to_group_state
from spark_purgatory.workload import generate, write_json_lines


@pytest.mark.parametrize("value", [b"", b"\x00", bytes(range(256)) * 3, os.urandom(100_003)])
@pytest.mark.parametrize("encoding", ["text", "binary"])
def test_a_value_comes_back_as_it_went_in(value, encoding):
    stored = to_group_state(value, encoding)
    assert isinstance(stored, str if encoding == "text" else bytes)
    if encoding == "text":
        assert stored.isascii()  # Pyrolite pickles it as UTF-8 in one copy
    assert shard_bytes(stored) == value
    assert shard_bytes(bytearray(value)) == value  # what PySpark hands over for a binary field


def test_the_schema_names_the_encoding_and_anything_else_is_refused():
    assert state_schema("text").simpleString() == "struct<shard_state:string>"
    assert state_schema("binary").simpleString() == "struct<shard_state:binary>"
    with pytest.raises(ValueError, match="text, binary.*'base64'"):
        state_schema("base64")  # type: ignore[arg-type]


def _record_schema(checkpoint, kind: str) -> None:
    """The schema file as Spark 4 writes it (a version line, then key and value schemas)."""
    folder = checkpoint / "state" / "0" / "0" / "_metadata"
    folder.mkdir(parents=True)
    value = (
        '{"type":"struct","fields":[{"name":"groupState","type":{"type":"struct","fields":'
        f'[{{"name":"shard_state","type":"{kind}","nullable":true,"metadata":{{}}}}]}}'
    )
    (folder / "schema").write_bytes(b"v2\n\x00\x00\x00]" + value.encode())


def test_the_encoding_follows_what_the_checkpoint_recorded(tmp_path):
    assert encoding_of(str(tmp_path / "new")) == "text"
    for kind, expected in (("binary", "binary"), ("string", "text")):
        checkpoint = tmp_path / kind
        _record_schema(checkpoint, kind)
        assert encoding_of(str(checkpoint)) == expected
        assert encoding_of(checkpoint.as_uri()) == expected


def _outcomes(output: str) -> set[tuple[str, str]]:
    table = DeltaTable(os.path.join(output, "outcomes")).to_pyarrow_table(columns=["op_id", "status"])
    rows = list(zip(table["op_id"].to_pylist(), table["status"].to_pylist(), strict=True))
    assert len(rows) == len(set(rows))  # exactly once across the restart
    return set(rows)


@pytest.mark.spark
def test_a_checkpoint_begun_with_bytes_keeps_them_and_ends_as_a_new_one_does(spark, tmp_path, monkeypatch):
    """A checkpoint whose group state is binary (started by 0.1.0; here forced) restarts with
    binary (Spark refuses another schema) and carries its pending operations over; a new
    checkpoint is text.  The old one also began with the wake as the stream's last source
    (Spark keeps sources' offsets by number) and keeps it.  Both give the same outcomes on
    the same two files per stream: the old one over two runs, the second ending the input;
    the new one in one run ending the input (a new checkpoint's restarts are every other
    restart test's)."""
    work = generate(300, seed=5, ops_per_second=50)
    staged = {kind: tmp_path / f"all-{kind}" for kind in ("ops", "events")}
    write_json_lines(work, str(staged["ops"]), str(staged["events"]), files=2)
    config = PurgatoryConfig(shards=2, watermark_delay="2 seconds")
    results = {}
    first_ops = _op_ids(staged["ops"] / sorted(os.listdir(staged["ops"]))[0])
    for began, runs in (("binary", ([0], [1])), ("text", ([0, 1],))):
        root = tmp_path / began
        seen: list[set[tuple[str, str]]] = []
        for run, parts in enumerate(runs):
            for kind, source in staged.items():  # the run's files of each stream
                os.makedirs(root / kind, exist_ok=True)
                for part in parts:
                    name = sorted(os.listdir(source))[part]
                    shutil.copy(source / name, root / kind / name)
            with monkeypatch.context() as patch:
                if run == 0 and began == "binary":
                    patch.setattr(group_state, "encoding_of", lambda *_a, **_k: "binary")
                    patch.setattr(query, "wake_first", lambda *_a, **_k: False)  # and no record
                with start(
                    str(root / "ops"),
                    str(root / "events"),
                    output=str(root / "out"),
                    checkpoint=str(root / "chk"),
                    config=config,
                    spark=spark,
                    end_of_input=run == len(runs) - 1,
                ) as q:
                    q.await_termination()
            seen.append(_outcomes(str(root / "out")))
            assert encoding_of(str(root / "chk")) == began
            assert wake_first(str(root / "chk")) == (began == "text")
        if began == "binary":
            # operations of the first run's file resolved by the second: kept in the state over the restart
            carried = {op_id for op_id, _status in seen[1] - seen[0]} & first_ops
            assert carried
        results[began] = seen[-1]
    assert results["binary"] == results["text"]
    assert len(results["text"]) == len(work.operations)  # the end of input resolved every one
    assert {status for _op, status in results["text"]} == {"completed", "expired"}


def _op_ids(path) -> set[str]:
    with open(path, encoding="utf-8") as f:
        return {json.loads(line)["op_id"] for line in f if line.strip()}
