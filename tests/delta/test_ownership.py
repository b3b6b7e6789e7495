"""One writer per output: the tables record the checkpoint that owns them (``delta.ownership``)."""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

from spark_purgatory.contract import TABLES
from spark_purgatory.delta.ownership import OWNER, OutputOwnedError, claim_tables, owner_of
from spark_purgatory.delta.writers import DeltaRsWriter


def test_new_tables_are_claimed_and_another_checkpoint_is_refused_in_one_line_unless_it_takes_over(tmp_path):
    writer = DeltaRsWriter(str(tmp_path / "out"))
    writer.create_tables()
    claim_tables(writer, app_id="app-a", checkpoint="/chk/a")
    assert {owner_of(writer, t) for t in TABLES} == {("app-a", "/chk/a")}
    version = DeltaTable(writer.path("outcomes")).version()
    claim_tables(writer, app_id="app-a", checkpoint="/chk/a")  # its own: nothing written
    assert DeltaTable(writer.path("outcomes")).version() == version
    with pytest.raises(OutputOwnedError, match="belongs to the query of checkpoint /chk/a, not /chk/b") as e:
        claim_tables(writer, app_id="app-b", checkpoint="/chk/b")
    assert "\n" not in str(e.value) and "--take-over-output" in str(e.value)
    assert {owner_of(writer, t) for t in TABLES} == {("app-a", "/chk/a")}  # refused: unchanged
    claim_tables(writer, app_id="app-b", checkpoint="/chk/b", take_over=True)
    assert {owner_of(writer, t) for t in TABLES} == {("app-b", "/chk/b")}
    assert DeltaTable(writer.path("outcomes")).metadata().configuration[OWNER] == "app-b"


def test_tables_from_before_owners_were_recorded_are_claimed(tmp_path):
    writer = DeltaRsWriter(str(tmp_path / "out"))
    writer.create_tables()  # no owner recorded
    assert owner_of(writer, "rejected") is None
    claim_tables(writer, app_id="app-a", checkpoint="/chk/a")
    assert owner_of(writer, "rejected") == ("app-a", "/chk/a")
