"""The checkpoint's files are named in one module (``checkpoint_paths``), with the names earlier
versions wrote: every other module asks it, none spells a name of its own."""

from __future__ import annotations

import ast
from pathlib import Path

import pyarrow.fs as pafs

import spark_purgatory
from spark_purgatory.checkpoint_paths import Checkpoint, StatePath, WakeDirectory
from spark_purgatory.storage import Storage

PACKAGE = Path(spark_purgatory.__file__).parent
NAMING = PACKAGE / "checkpoint_paths.py"

#: every path, relative to its directory, as the versions before this module wrote it: a
#: change here is a change of format (``state.versions``), never a rename in passing
CHECKPOINT = {
    "app_id": "purgatory-id",
    "layout": "purgatory-layout",
    "rescale_journal": "purgatory-rescale",
    "lease": "purgatory-running",
    "pending_record": "purgatory-pending",
    "end_record": "purgatory-ended",
    "clock_record": "purgatory-clock",
    "version_record": "purgatory-version",
    "upgrade_journal": "purgatory-upgrade",
    "wake": "purgatory-wake",
    "wake_first": "purgatory-wake-first",
    "accumulator": "accumulator",
    "spark_metadata": "metadata",
    "offsets": "offsets",
    "commits": "commits",
    "spark_state": "state",
    "operator_state": "state/0",
    "state_schema": "state/0/0/_metadata/schema",
}
STATE = {"deltas": "deltas", "mailbox": "mailbox", "verdicts": "verdicts", "watermarks": "watermarks"}
WAKE = {"end_mark": "end.txt", "end_batch": "_end-batch"}
#: Spark's own names, which other words share (a JSON field ``offsets``, a counter ``commits``)
SPARK_OWN = {"spark_metadata", "offsets", "commits", "spark_state", "operator_state", "state_schema"}
#: the literals that spell a name with another meaning: the hand-off mode
#: ``cross_shard_handoff=mailbox``, the JSON field ``watermarks`` of a record or a report
OTHER_MEANINGS = {
    ("config.py", "mailbox"),
    ("handoff/shard_handoff.py", "mailbox"),
    ("spark/routing.py", "mailbox"),
    ("handoff/partitions.py", "watermarks"),
    ("inspect/status.py", "watermarks"),
}


def _paths(value: object) -> dict[str, str]:
    """Every path property of ``value`` (its directories' sub-values left out)."""
    found = {}
    for name, member in vars(type(value)).items():
        if isinstance(member, property) and isinstance(getattr(value, name), str):
            found[name] = getattr(value, name)
    return found


def _under(root: str, names: dict[str, str]) -> dict[str, str]:
    return {name: f"{root}/{path}" for name, path in names.items()}


def test_every_file_keeps_the_name_earlier_versions_wrote():
    chk = Checkpoint("s3a://bucket/chk/")
    assert _paths(chk) == _under("s3a://bucket/chk", CHECKPOINT)
    assert chk.state_path == "s3a://bucket/chk/purgatory-state"
    assert _paths(chk.state) == _under("s3a://bucket/chk/purgatory-state", STATE)
    assert chk.state.verdicts_for(3) == "s3a://bucket/chk/purgatory-state/verdicts/000003"
    assert StatePath.DELTAS == "deltas"
    assert _paths(WakeDirectory(chk.wake)) == _under("s3a://bucket/chk/purgatory-wake", WAKE)


def test_a_configured_state_path_is_kept_and_opened_names_paths_in_the_filesystem(tmp_path):
    assert Checkpoint("/chk", "gs://b/state").state.mailbox == "gs://b/state/mailbox"
    fs, files = Checkpoint(f"file://{tmp_path}/chk/").opened(Storage())
    assert isinstance(fs, pafs.LocalFileSystem)
    assert files.lease == f"{tmp_path}/chk/purgatory-running"
    # the state path stays the URI it was: its readers open it themselves
    assert files.state_path == f"file://{tmp_path}/chk/purgatory-state"


def _project_names() -> set[str]:
    """The project's names: the last part of each path, Spark's own left out."""
    names = {p for n, p in CHECKPOINT.items() if n not in SPARK_OWN}
    return names | set(STATE.values()) | set(WAKE.values()) | {"purgatory-state"}


def named_in(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, literal) of each string literal of ``source`` (documentation left out) that
    spells one of ``names`` whole or as a part of a path (``f"{root}/mailbox"``)."""
    tree = ast.parse(source)
    documentation = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in documentation:
            if names & set(node.value.split("/")):
                found.append((node.lineno, node.value))
    return sorted(found)


def test_the_search_finds_a_name_in_code_and_not_in_documentation():
    source = '''"""Writes <checkpoint>/purgatory-layout."""
def f(root, fs):
    """``purgatory-layout``"""
    print("purgatory-state " + root)  # a log line's tag, not the file
    return join(root, "purgatory-layout"), f"{root}/mailbox/{fs}", "verdicts"
'''
    names = _project_names()
    assert named_in(source, names) == [(5, "/mailbox/"), (5, "purgatory-layout"), (5, "verdicts")]


def test_each_checkpoint_file_is_named_in_checkpoint_paths_alone():
    names = _project_names()
    assert named_in(NAMING.read_text(), names), "the search finds nothing in the module that names them"
    elsewhere = []
    for module in sorted(PACKAGE.rglob("*.py")):
        if module == NAMING:
            continue
        where = module.relative_to(PACKAGE).as_posix()
        for line, literal in named_in(module.read_text(), names):
            if not any((where, name) in OTHER_MEANINGS for name in literal.split("/")):
                elsewhere.append(f"{where}:{line}: {literal!r}")
    assert elsewhere == [], "ask checkpoint_paths.Checkpoint instead:\n" + "\n".join(elsewhere)
