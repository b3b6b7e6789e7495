"""The Databricks Asset Bundle example (``deploy/databricks/databricks.yml``) as Databricks reads it.

Spark-free, and nothing is built.  Checked:

* every key is one Databricks documents at its place, every required key is there and every
  value of a documented set is one of it: against ``tests/docs/databricks_bundle_keys.json``,
  the keys the Databricks CLI's JSON schema of ``databricks.yml`` allows at each mapping this
  bundle writes (databricks/cli, ``bundle/schema/jsonschema.json``, at the commit the file
  names; the schema's descriptions are Databricks' configuration reference,
  https://docs.databricks.com/dev-tools/bundles/reference.html), made from it by
  ``tests/support/bundle_schema.py``;
* every local path the bundle names exists, resolved as the CLI resolves it (relative to the
  bundle's folder; ``${workspace.file_path}`` is where the sync root, here the repository,
  lands).  A glob matches a file, except under the folders the bundle's own build writes at
  each deploy (``artifacts``' ``build``): ``dist/`` (``make dist``: the wheel) and
  ``deploy/databricks/jars/`` (``wheel_jars.py``: the JARs out of that wheel).  Those are build
  outputs that git ignores: this test builds nothing, so there they may match nothing, and the
  build command must be the one that makes them;
* the wheel task calls an entry point the installed distribution declares (``[project.scripts]``),
  the job's, with parameters the job accepts and a conf file it reads without error;
* the notebook task's parameters are widgets the notebook defines;
* ``wheel_jars.py`` takes the JARs out of a wheel (a zip made here) and refuses a wheel without.
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from tests.support.bundle_schema import REFERENCE, check

ROOT = Path(__file__).resolve().parents[2]
BUNDLE_DIR = ROOT / "deploy" / "databricks"
BUNDLE = yaml.safe_load((BUNDLE_DIR / "databricks.yml").read_text(encoding="utf-8"))
KEYS = json.loads((Path(__file__).parent / "databricks_bundle_keys.json").read_text(encoding="utf-8"))
#: the folders the bundle's build writes (repository-relative), with the command that does
BUILT = {"dist": "make dist", "deploy/databricks/jars": "wheel_jars.py dist deploy/databricks/jars"}


def _tasks() -> dict[str, dict]:
    return {t["task_key"]: t for job in BUNDLE["resources"]["jobs"].values() for t in job["tasks"]}


def _sync_root() -> Path:
    """Where the CLI roots the synced files: the innermost folder holding the bundle's folder
    and every ``sync.paths`` entry (databricks/cli, ``SyncInferRoot``)."""
    paths = [BUNDLE_DIR, *((BUNDLE_DIR / p).resolve() for p in BUNDLE.get("sync", {}).get("paths", ["."]))]
    return Path(os.path.commonpath(paths))


def _resolved(value: str) -> str:
    """``value`` with the bundle's references replaced as a deploy would: a variable by its
    default (or a stand-in), ``${workspace.file_path}`` by the local sync root."""

    def one(match: re.Match) -> str:
        name = match.group(0)[2:-1]
        if name == "workspace.file_path":
            return str(_sync_root())
        if name.startswith("var."):
            return str(BUNDLE["variables"][name[4:]].get("default", f"<{name[4:]}>"))
        raise AssertionError(f"unexpected reference {match.group(0)}")

    return REFERENCE.sub(one, value)


def _local_paths() -> list[str]:
    """Every local path the bundle names, relative to its folder (or to the sync root)."""
    paths = [*BUNDLE["sync"]["paths"], *BUNDLE["sync"].get("include", [])]
    for artifact in BUNDLE.get("artifacts", {}).values():
        paths.append(artifact["path"])
        paths += [f["source"] for f in artifact.get("files", [])]
    for task in _tasks().values():
        for library in task.get("libraries", []):
            paths += [library[kind] for kind in ("whl", "jar") if "://" not in library.get(kind, "://")]
        if "notebook_task" in task:
            paths.append(task["notebook_task"]["notebook_path"])
    return [p for p in paths if not p.startswith(("/Volumes/", "/Workspace/"))]


def test_the_bundle_uses_only_keys_databricks_documents():
    assert KEYS["source"]["repository"] == "databricks/cli" and len(KEYS["source"]["commit"]) == 40
    assert check(KEYS["keys"], BUNDLE) == []


def test_the_key_check_finds_an_undocumented_key_a_missing_one_and_a_bad_value():
    """The check above could fail: the same bundle, spoiled three ways."""
    spoiled = yaml.safe_load((BUNDLE_DIR / "databricks.yml").read_text(encoding="utf-8"))
    job = spoiled["resources"]["jobs"]["spark_purgatory"]
    job["tasks"][0]["python_wheel_task"]["entrypoint"] = "typo"
    del job["tasks"][0]["task_key"]
    job["job_clusters"][0]["new_cluster"]["data_security_mode"] = "SHARED"
    findings = check(KEYS["keys"], spoiled)
    assert any("'entrypoint' is not a key" in f for f in findings)
    assert any("'task_key' is required" in f for f in findings)
    assert any("'SHARED' is not one of" in f for f in findings)


def test_every_local_path_exists_or_is_made_by_the_bundles_build():
    (artifact,) = BUNDLE["artifacts"].values()
    assert artifact["type"] == "whl" and (BUNDLE_DIR / artifact["path"]).resolve() == ROOT
    for folder, command in BUILT.items():
        assert command in artifact["build"], f"the build must make {folder}/"
    outputs = [f"{folder}/x" for folder in BUILT]
    ignored = subprocess.run(["git", "check-ignore", *outputs], cwd=ROOT, capture_output=True, text=True)
    assert ignored.stdout.split() == outputs, "the build's outputs must be ignored by git"
    for path in _local_paths():
        full = (BUNDLE_DIR / path).resolve()
        relative = full.relative_to(ROOT).as_posix()
        if glob.has_magic(path):
            built = any(relative.startswith(f"{folder}/") for folder in BUILT)
            assert glob.glob(str(full)) or built, f"{path}: matches nothing and no build makes it"
        else:
            assert full.exists() or relative in BUILT, f"{path}: no such file or folder"
    parameters = BUNDLE["resources"]["jobs"]["quickstart"]["tasks"][0]["notebook_task"]["base_parameters"]
    assert Path(_resolved(parameters["wheel"])).relative_to(ROOT).as_posix() in BUILT


def test_the_wheel_task_runs_the_job_with_parameters_it_accepts():
    from spark_purgatory import job
    from spark_purgatory.job import parse_args

    task = _tasks()["purgatory"]["python_wheel_task"]
    # found as Databricks finds it: by name among the installed distribution's entry points
    # (databricks/cli's wheel wrapper does the same for runtimes without wheel tasks)
    entry_points = metadata.distribution(task["package_name"]).entry_points
    (entry,) = [ep for ep in entry_points if ep.name == task["entry_point"]]
    assert entry.load() is job.entry
    settings = parse_args([_resolved(p) for p in task["parameters"]])  # reads the conf file too
    assert settings.output_tables is not None and settings.checkpoint_path.endswith("/checkpoint")
    assert settings.trigger.startswith("processing-time")  # conf/databricks.conf: a streaming job


def test_the_wheel_tasks_entry_point_fails_a_failed_run_by_raising(monkeypatch):
    """A caller that ignores the entry point's return value (a wheel task) sees the exit code."""
    from spark_purgatory import job

    monkeypatch.setattr(job, "console", lambda: 2)
    with pytest.raises(SystemExit) as raised:
        job.entry()
    assert raised.value.code == 2
    monkeypatch.setattr(job, "console", lambda: 0)
    assert job.entry() is None


def test_the_notebook_tasks_parameters_are_its_widgets():
    notebook = _tasks()["quickstart"]["notebook_task"]
    source = (BUNDLE_DIR / notebook["notebook_path"]).read_text(encoding="utf-8")
    widgets = set(re.findall(r'dbutils\.widgets\.\w+\(\s*"(\w+)"', source))
    assert set(notebook["base_parameters"]) <= widgets


def _wheel(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in members.items():
            wheel.writestr(name, data)
    return path


def _wheel_jars(*args: str) -> subprocess.CompletedProcess:
    script = BUNDLE_DIR / "wheel_jars.py"
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True)


def test_wheel_jars_takes_the_wheels_jars_and_replaces_earlier_ones(tmp_path):
    dist, out = tmp_path / "dist", tmp_path / "jars"
    dist.mkdir()
    out.mkdir()
    (out / "spark-purgatory-old.jar").write_bytes(b"earlier deploy")
    members = {
        "spark_purgatory/__init__.py": b"",
        "spark_purgatory/jars/spark-purgatory-checks.jar": b"checks",
        "spark_purgatory/jars/spark-purgatory-sink.jar": b"sink",
        "spark_purgatory/jars/manifest.json": b"{}",
    }
    _wheel(dist / "spark_purgatory-0.2.0-py3-none-any.whl", members)
    done = _wheel_jars(str(dist), str(out))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["spark-purgatory-checks.jar", "spark-purgatory-sink.jar"]
    assert (out / "spark-purgatory-sink.jar").read_bytes() == b"sink"


@pytest.mark.parametrize("case", ["no wheel", "two wheels", "no jar"])
def test_wheel_jars_refuses_in_one_line(tmp_path, case):
    dist = tmp_path / "dist"
    dist.mkdir()
    if case != "no wheel":
        _wheel(dist / "spark_purgatory-0.2.0-py3-none-any.whl", {"spark_purgatory/__init__.py": b""})
    if case == "two wheels":
        _wheel(dist / "spark_purgatory-0.1.0-py3-none-any.whl", {"spark_purgatory/__init__.py": b""})
    done = _wheel_jars(str(dist), str(tmp_path / "jars"))
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1
    assert ("carries no JAR" in done.stderr) == (case == "no jar")
