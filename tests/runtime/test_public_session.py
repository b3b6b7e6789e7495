"""``spark_purgatory.session()``: a session for Kafka and Delta's writer from Python, not a
test helper, whose errors say what is missing (no JVM starts for them); Kafka's sets are
resolved on first use (``tests/runtime/test_maven.py``)."""

from __future__ import annotations

import pytest

import spark_purgatory
from spark_purgatory.config import ConfigError


def test_a_set_never_fetched_is_named_with_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARK_PURGATORY_JARS", str(tmp_path))  # no set fetched here
    with pytest.raises(ConfigError, match=r"^the JARs of delta are not in .*: run `make jars` in a checkout"):
        spark_purgatory.session(require=["delta"])


def test_a_kafka_source_that_cannot_be_resolved_says_why(tmp_path, monkeypatch):
    from spark_purgatory.runtime import maven

    monkeypatch.setenv("SPARK_PURGATORY_JARS", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(maven, "_with_mvn", lambda *_: "[ERROR] Could not transfer artifact (offline)")
    monkeypatch.setattr(maven.shutil, "which", lambda name: name)
    said = r"^could not resolve org.apache.spark:spark-sql-kafka.* mvn: \[ERROR"
    with pytest.raises(ConfigError, match=said):
        spark_purgatory.session(require=["kafka"])


def test_an_unknown_set_lists_the_known_ones():
    with pytest.raises(ConfigError, match="unknown \\['kafak'\\]; one of kafka, delta, s3a"):
        spark_purgatory.session(require=["kafak"])


def test_the_session_is_public_beside_start():
    assert "session" in spark_purgatory.__all__
    assert spark_purgatory.session.__module__ == "spark_purgatory.runtime.session"
