"""The version record and ``spark-purgatory upgrade``: refusals in one line, a resumable migration.

The checkpoint is a real one, written by 6e49991 (``tests/upgrades/corpus``: restored, no JVM).
No format needs a migration today, so the migration is a synthetic format change
(``tests.support.format_bump``: ``checkpoint-files`` 1 -> 2 with one step); the refusals,
the journal and the resume are the real ones.  No test here starts a Spark session: the job
refuses before its own (``_session`` fails the test if it is called).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest

from spark_purgatory import cli, job
from spark_purgatory.checkpoint_paths import Checkpoint
from spark_purgatory.state import versions
from spark_purgatory.state.layout import RunLease
from spark_purgatory.upgrade import FAULT
from tests.support import format_bump
from tests.upgrades import entries as corpus

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENTRY = corpus.CORPUS / "files-two-runs"


@pytest.fixture
def checkpoint(tmp_path):
    """A checkpoint of 6e49991 (written before the version record), and its job's arguments."""
    corpus.restore(ENTRY, tmp_path)
    return str(tmp_path / "chk"), corpus.entry_named(ENTRY.name).job_args(str(tmp_path))


@pytest.fixture
def no_session(monkeypatch):
    def refused(_settings):
        raise AssertionError("the job started a Spark session: it should have refused before")

    monkeypatch.setattr(job, "_session", refused)


def _record(chk: str) -> dict | None:
    return versions.read_record(chk)


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_a_checkpoint_from_before_the_record_is_recognised_and_needs_nothing(checkpoint):
    chk, _ = checkpoint
    assert _record(chk) is None
    assert versions.check_formats(chk) is None  # recognised: no refusal
    assert versions.needed_steps(None) == []


def test_upgrade_of_a_checkpoint_from_before_the_record_writes_the_record(checkpoint, capsys):
    chk, _ = checkpoint
    assert cli.main(["upgrade", "--checkpoint", chk]) == 0
    assert "-> " + versions.package_version() + " (record)" in capsys.readouterr().out
    record = _record(chk)
    assert record["written_by"] == versions.package_version()
    assert record["formats"] == versions.current_formats()
    assert cli.main(["upgrade", "--checkpoint", chk]) == 0
    assert "is up to date" in capsys.readouterr().out
    assert not os.path.exists(Checkpoint(chk).upgrade_journal)


def test_a_newer_versions_checkpoint_is_refused_in_one_line_exit_2(checkpoint, capsys, no_session):
    chk, args = checkpoint
    newer = {**versions.current_formats(), "shard-state": 99}
    with open(Checkpoint(chk).version_record, "w") as out:
        json.dump({"record": 1, "written_by": "9.9.9", "formats": newer, "history": []}, out)
    assert job.main(args) == 2
    line = _one_line(capsys)
    assert "written by spark-purgatory 9.9.9, newer than this spark-purgatory " in line
    assert versions.package_version() in line and "shard-state format 99" in line
    assert cli.main(["upgrade", "--checkpoint", chk]) == 1  # nor does upgrade touch it
    assert "newer than this" in _one_line(capsys)


def test_a_checkpoint_this_version_recorded_is_refused_by_a_version_that_knows_no_quorum(
    checkpoint, monkeypatch
):
    """shard-state 3: a shard's value may hold a ``quorum`` operation, which a version of
    shard-state 2 (0.2.0) cannot decide: its check refuses the checkpoint in one line rather
    than its workers failing on the condition.  A checkpoint of shard-state 2 is read here as
    it is: no migration."""
    chk, _ = checkpoint
    record = versions.write_record(chk)
    assert record["formats"]["shard-state"] == 3
    before_quorum = replace(versions.FORMATS["shard-state"], version=2)
    with monkeypatch.context() as patched:
        patched.setitem(versions.FORMATS, "shard-state", before_quorum)
        with pytest.raises(
            versions.IncompatibleCheckpointError, match="shard-state format 3, this version reads up to 2"
        ):
            versions.check_formats(chk)
    assert versions.needed_steps({**record, "formats": {**record["formats"], "shard-state": 2}}) == []
    assert versions.check_formats(chk) == record


def test_a_checkpoint_that_needs_a_migration_is_refused_until_upgraded(
    checkpoint, capsys, tmp_path, no_session
):
    chk, args = checkpoint
    ran = tmp_path / "ran"
    with format_bump.bumped(ran):
        assert job.main(args) == 2
        line = _one_line(capsys)
        assert "written by a spark-purgatory from before version records" in line
        assert f"this spark-purgatory {versions.package_version()} does not read" in line
        assert f"`spark-purgatory upgrade --checkpoint {chk}`" in line
        assert cli.main(["upgrade", "--checkpoint", chk]) == 0
        assert "(checkpoint-files-1-2, record)" in capsys.readouterr().out
        assert _record(chk)["formats"]["checkpoint-files"] == 2
        assert versions.check_formats(chk) is not None  # the job would start now
    assert ran.read_text() == "migrated\n"


@pytest.mark.parametrize("killed_at", ["checkpoint-files-1-2", "record", "finish"])
def test_an_upgrade_killed_at_any_step_is_refused_at_start_then_resumed(
    checkpoint, capsys, tmp_path, no_session, killed_at
):
    chk, args = checkpoint
    ran = tmp_path / "ran"
    env = {**os.environ, FAULT: killed_at, "PYTHONPATH": ROOT}
    killed = subprocess.run(
        [sys.executable, "-m", "tests.support.format_bump", chk, str(ran)], env=env, cwd=ROOT, timeout=120
    )
    assert killed.returncode == -9
    with format_bump.bumped(ran):
        assert job.main(args) == 2  # a half-upgraded checkpoint: no query starts on it
        line = _one_line(capsys)
        assert "was interrupted: run `spark-purgatory upgrade --checkpoint" in line
        recorded = (_record(chk) or {}).get("formats", {}).get("checkpoint-files")
        assert recorded == (2 if killed_at == "finish" else None)  # the record is the switch
        assert cli.main(["upgrade", "--checkpoint", chk]) == 0
        assert "resumed the upgrade of" in capsys.readouterr().out
        assert _record(chk)["formats"]["checkpoint-files"] == 2
        assert versions.check_formats(chk) is not None
    # the step ran once: killed before it, by the resume alone; killed after it, not again
    assert ran.read_text() == "migrated\n"


def test_upgrade_is_refused_while_a_query_holds_the_lease(checkpoint, capsys):
    chk, _ = checkpoint
    lease = RunLease(chk)
    lease.take()
    try:
        assert cli.main(["upgrade", "--checkpoint", chk]) == 1
        assert f"a query runs on {chk}, started in this process: stop it first" in _one_line(capsys)
    finally:
        lease.release()
    assert _record(chk) is None
