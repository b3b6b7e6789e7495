"""The driver JVM's class-data archive: used only for what it was made for, made on first use
in the user's cache, one dump at a time, a dump counted once its JVM has exited whole.  No JVM
starts here: a dump is a file these tests write (``tests/docs/test_wheel_install.py`` has a
real JVM dump one at exit)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from spark_purgatory.runtime import class_data

A, B = "/a.jar", "/b.jar"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """The archives' folder: the user's cache under ``XDG_CACHE_HOME``."""
    monkeypatch.delenv(class_data.SWITCH, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "spark-purgatory" / "class-data"


def _archive_made_for(classpath: list[str]) -> str:
    archive = class_data.archive_path(classpath)
    archive.parent.mkdir(parents=True, exist_ok=True)
    archive.write_bytes(class_data._MAGIC + b"archive")
    archive.with_suffix(".json").write_text(json.dumps(class_data._key(classpath)))
    return str(archive)


def _dead_pid() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    return int(done.stdout)


class _Session:  # what FirstUse.started reads of a session: the JVM process Spark launched
    def __init__(self, pid: int | None) -> None:
        proc = None if pid is None else type("Popen", (), {"pid": pid})
        self.sparkContext = type("Context", (), {"_gateway": type("Gateway", (), {"proc": proc})})


def test_the_archive_is_used_only_with_the_class_path_it_was_dumped_with(cache):
    assert class_data.archive_path([A]).parent == cache
    assert class_data.java_options("-Xbase", [A]) == "-Xbase"  # none made
    archive = _archive_made_for([A, B])
    used = class_data.java_options("-Xbase", [A, B])
    assert used.startswith(f"-Xbase -XX:SharedArchiveFile={archive} ")
    assert "-Xlog:cds=off" in used  # a JVM that cannot map it starts quietly without it
    assert class_data.java_options("-Xbase", [B, A]) == "-Xbase"  # another order
    assert class_data.java_options("-Xbase", []) == "-Xbase"  # a session without the extras


def test_a_jar_rebuilt_at_the_same_path_makes_the_archive_out_of_date(cache, tmp_path, monkeypatch):
    """``make checks-jar`` rebuilds its JAR in place; the JVM would then not map the archive
    (it checks each JAR's size and time), so a new one must be made."""
    from spark_purgatory.runtime import jars

    jar = tmp_path / "checks.jar"
    jar.write_bytes(b"first build")
    monkeypatch.setattr(jars, "spark_jars", lambda: [str(jar)])
    _archive_made_for([str(jar)])
    assert class_data.up_to_date()
    jar.write_bytes(b"a second, longer build")
    assert not class_data.up_to_date()
    assert "-XX:SharedArchiveFile" not in class_data.java_options("-Xbase", [str(jar)])


def test_the_first_session_of_a_class_path_dumps_at_exit_and_the_next_maps_the_dump(cache):
    options, first_use = class_data.session_options("-Xbase", [A])
    dump = first_use.record.with_suffix(".dump")
    assert options == f"-Xbase -XX:ArchiveClassesAtExit={dump} {class_data.QUIET}"
    assert class_data.session_options("-Xbase", [A]) == ("-Xbase", None)  # one dump at a time
    first_use.started(_Session(os.getpid()))  # its JVM runs: the dump is still to come
    assert class_data.session_options("-Xbase", [A]) == ("-Xbase", None)
    dump.write_bytes(class_data._MAGIC + b"classes")  # what the JVM wrote as it exited
    first_use.started(_Session(_dead_pid()))
    archive = class_data.archive_path([A])
    assert class_data.session_options("-Xbase", [A]) == (
        f"-Xbase -XX:SharedArchiveFile={archive} {class_data.QUIET}",
        None,
    )
    assert sorted(p.name for p in cache.iterdir()) == [archive.name, archive.with_suffix(".json").name]


def test_an_archive_whose_jars_are_gone_is_dropped_when_another_is_made(cache, tmp_path):
    """Each checkout or venv has its own class path, so its own archive (about 200 MB): once a
    JAR it names is gone, no session can map it, and the next archive made takes its place."""
    kept_jar, gone_jar = tmp_path / "kept.jar", tmp_path / "gone.jar"
    kept_jar.write_bytes(b"kept")
    gone_jar.write_bytes(b"gone")
    kept, gone = _archive_made_for([str(kept_jar)]), _archive_made_for([str(gone_jar)])
    gone_jar.unlink()
    _, first_use = class_data.session_options("-Xbase", [A])
    first_use.record.with_suffix(".dump").write_bytes(class_data._MAGIC + b"classes")
    first_use.started(_Session(_dead_pid()))
    class_data.session_options("-Xbase", [A])  # puts the dump in place
    names = sorted(p.name for p in cache.iterdir())
    made = class_data.archive_path([A]).name
    assert names == sorted(
        [
            os.path.basename(kept),
            os.path.basename(kept).replace(".jsa", ".json"),
            made,
            made.replace(".jsa", ".json"),
        ]
    )
    assert not os.path.exists(gone)


def test_a_dump_its_jvm_never_finished_is_dropped_and_made_again(cache):
    _, first_use = class_data.session_options("-Xbase", [A])
    first_use.record.with_suffix(".dump").write_bytes(b"\0" * 64)  # killed before its header
    first_use.started(_Session(_dead_pid()))
    options, again = class_data.session_options("-Xbase", [A])
    assert "-XX:ArchiveClassesAtExit" in options and again.record != first_use.record
    assert not class_data.archive_path([A]).exists() and not first_use.record.exists()


def test_a_session_on_a_running_jvm_dumps_nothing(cache):
    _, first_use = class_data.session_options("-Xbase", [A])
    first_use.started(_Session(None))  # no JVM process of its own: Spark's was running already
    assert not first_use.record.exists()


def test_use_maps_an_archive_made_and_makes_none(cache, monkeypatch):
    monkeypatch.setenv(class_data.SWITCH, "use")
    assert class_data.session_options("-Xbase", [A]) == ("-Xbase", None)  # none made, none to make
    archive = _archive_made_for([A])
    assert archive.startswith(str(cache))  # the user's cache still
    assert class_data.session_options("-Xbase", [A])[0].startswith(f"-Xbase -XX:SharedArchiveFile={archive}")


def test_off_uses_and_makes_nothing(cache, monkeypatch):
    monkeypatch.setenv(class_data.SWITCH, "off")
    assert class_data.session_options("-Xbase", [A]) == ("-Xbase", None)
    assert class_data.archive_path([A]) is None and not cache.exists()


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
