"""The project's own JARs: found in the package's ``jars/`` folder through their manifest,
used only on the Spark feature release they were built for, printed by ``spark-purgatory jars``.
No JVM starts here (``tests/docs/test_wheel_install.py`` runs them from an installed wheel)."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import pyspark
import pytest

import spark_purgatory
from build_backend.spark_pin import pinned_spark
from spark_purgatory import cli
from spark_purgatory.runtime import jars


def _built(folder, spark: str, names=("spark-purgatory-checks.jar", "spark-purgatory-sink.jar")) -> None:
    folder.mkdir(exist_ok=True)
    for name in names:
        (folder / name).write_bytes(b"PK")
    (folder / "manifest.json").write_text(json.dumps({"jars": list(names), "spark": spark, "sources": "x"}))


def test_the_jars_are_what_their_manifest_names_and_a_folder_without_one_has_none(tmp_path, monkeypatch):
    monkeypatch.setattr(jars, "PACKAGE_JARS", tmp_path / "jars")
    _built(tmp_path / "jars", pyspark.__version__)
    (tmp_path / "jars" / "left-over.jar").write_bytes(b"PK")  # not this build's: not named
    expected = [
        str(tmp_path / "jars" / n) for n in ("spark-purgatory-checks.jar", "spark-purgatory-sink.jar")
    ]
    assert spark_purgatory.jar_files() == expected
    assert jars.jar_paths("checks") == expected and jars.built_for() == pyspark.__version__
    (tmp_path / "jars" / "manifest.json").unlink()  # an interrupted build: the manifest comes last
    assert spark_purgatory.jar_files() == [] and jars.built_for() is None


def test_a_patch_release_apart_the_jars_are_used_and_said_so_once_a_feature_release_apart_left_out(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(jars, "PACKAGE_JARS", tmp_path / "jars")
    _built(tmp_path / "jars", "4.2.0")
    assert jars.spark_notice("4.2.0") is None
    assert jars.fits("4.2.1") and jars.spark_notice("4.2.1") == (
        "spark-purgatory's JARs were built for Spark 4.2.0, this session runs Spark 4.2.1: they are "
        "used (the Spark APIs they call hold within Spark 4.2.x)"
    )
    assert not jars.fits("4.1.1")
    assert "4.1.1: spark-purgatory leaves them out" in jars.spark_notice("4.1.1")
    assert "SPARK_PURGATORY_SPARK_VERSION=4.1.1" in jars.spark_notice("4.1.1")
    monkeypatch.setattr(pyspark, "__version__", "4.1.1")
    assert jars.jar_paths("checks") == [] and len(spark_purgatory.jar_files()) == 2  # printed, not used


@pytest.mark.parametrize("session, level", [("4.2.1", logging.INFO), ("4.1.1", logging.WARNING)])
def test_the_spark_line_is_a_warning_only_when_the_jars_are_left_out(
    tmp_path, monkeypatch, caplog, session, level
):
    from spark_purgatory.spark import checks

    monkeypatch.setattr(jars, "PACKAGE_JARS", tmp_path / "jars")
    _built(tmp_path / "jars", "4.2.0")
    monkeypatch.setattr(checks, "_SAID", set())
    caplog.set_level(logging.DEBUG, logger=checks.log.name)
    for _ in range(2):  # the first start says it, the next ones do not
        checks._say_spark(SimpleNamespace(version=session))
    said = [(r.levelno, r.getMessage()) for r in caplog.records if "were built for Spark" in r.getMessage()]
    assert said == [(level, jars.spark_notice(session))]


def test_the_jars_command_prints_them_for_jars_spark_jars_and_cluster_libraries(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(jars, "PACKAGE_JARS", tmp_path / "jars")
    _built(tmp_path / "jars", "4.2.0")
    paths = spark_purgatory.jar_files()
    printed = {}
    for form in ("comma", "lines", "conf", "json"):
        assert cli.main(["jars", "--format", form]) == 0
        printed[form] = capsys.readouterr().out.rstrip("\n")
    assert cli.main(["jars"]) == 0 and capsys.readouterr().out.rstrip("\n") == printed["comma"]
    assert printed["comma"] == ",".join(paths)
    assert printed["lines"].splitlines() == paths
    assert printed["conf"] == "spark.jars=" + ",".join(paths)
    assert json.loads(printed["json"]) == {
        "jars": paths,
        "spark": "4.2.0",
        "version": spark_purgatory.__version__,
    }


def test_without_jars_the_command_says_in_one_line_what_to_do(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(jars, "PACKAGE_JARS", tmp_path / "site-packages" / "spark_purgatory" / "jars")
    assert cli.main(["jars"]) == 1
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 1 and "reinstall spark-purgatory from its wheel" in said[0]


def test_the_version_is_one_and_the_command_prints_it(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"spark-purgatory {spark_purgatory.__version__}\n"
    from importlib.metadata import version

    assert version("spark-purgatory") == spark_purgatory.__version__  # the metadata reads the same


def test_the_wheels_jars_are_built_for_the_spark_the_tests_pin(monkeypatch):
    monkeypatch.delenv("SPARK_PURGATORY_SPARK_VERSION", raising=False)
    assert pinned_spark() == pyspark.__version__  # the dev extra's pin, which this venv runs
    monkeypatch.setenv("SPARK_PURGATORY_SPARK_VERSION", "4.2.1")
    assert pinned_spark() == "4.2.1"
