"""The driver JVM's class-data archive is used only for the class path it was made for."""

from __future__ import annotations

import json
import os

import pytest

from spark_purgatory.runtime import class_data


def test_the_archive_is_used_only_with_the_class_path_it_was_dumped_with(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARK_PURGATORY_JARS", str(tmp_path))
    archive = class_data.archive_path()
    assert archive == tmp_path / "class-data" / "spark.jsa"
    assert class_data.java_options("-Xbase", ["/a.jar"]) == "-Xbase"  # none made
    archive.parent.mkdir()
    archive.write_bytes(b"archive")
    archive.with_suffix(".classpath.json").write_text(json.dumps({"classpath": ["/a.jar", "/b.jar"]}))
    used = class_data.java_options("-Xbase", ["/a.jar", "/b.jar"])
    assert used.startswith(f"-Xbase -XX:SharedArchiveFile={archive} ")
    assert "-Xlog:cds=off" in used  # a JVM that cannot map it starts quietly without it
    assert class_data.java_options("-Xbase", ["/b.jar", "/a.jar"]) == "-Xbase"  # another order
    assert class_data.java_options("-Xbase", []) == "-Xbase"  # a session without the extras
    assert not class_data.up_to_date()  # recorded without pyspark's and java's versions


def test_a_jar_rebuilt_at_the_same_path_makes_the_archive_out_of_date(tmp_path, monkeypatch):
    """``make checks-jar`` rebuilds its JAR in place; the JVM would then not map the archive
    (it checks each JAR's size and time), so ``make class-data`` must make it again."""
    from spark_purgatory.runtime import jars

    monkeypatch.setenv("SPARK_PURGATORY_JARS", str(tmp_path))
    jar = tmp_path / "checks.jar"
    jar.write_bytes(b"first build")
    monkeypatch.setattr(jars, "spark_jars", lambda: [str(jar)])
    archive = class_data.archive_path()
    archive.parent.mkdir()
    archive.write_bytes(b"archive")
    archive.with_suffix(".classpath.json").write_text(json.dumps(class_data._key([str(jar)])))
    assert class_data.up_to_date()
    jar.write_bytes(b"a second, longer build")
    assert not class_data.up_to_date()


def test_make_test_made_an_archive_for_this_class_path():
    """``make test`` runs ``make class-data`` first, which never fails the make (an archive only
    saves time): in CI a missing or stale archive would only show as a slower run, so it is
    checked here.  Elsewhere (pytest without make) it is skipped with the reason."""
    if not class_data.up_to_date():
        message = f"no class-data archive for this class path at {class_data.archive_path()}"
        if os.environ.get("CI"):
            pytest.fail(message + ": `make class-data` says why", pytrace=False)
        pytest.skip(message + " (`make class-data`)")
    assert class_data.archive_path().stat().st_size > 50 << 20  # Spark's classes, not a stub
