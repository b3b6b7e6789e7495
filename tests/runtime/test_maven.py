"""The Kafka sets without a checkout: declared once in ``jvm/<set>/pom.xml`` (the wheel carries
the poms), resolved into the user cache on first use, with mvn or else Spark's
``spark.jars.packages``.  No JVM and no Maven run here: the resolvers are stand-ins; the
wheel's test (``tests/docs/test_wheel_install.py``) resolves for real, with mvn."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pyspark
import pytest

from build_backend.spark_purgatory_build import RESOLVED, pinned_spark
from spark_purgatory import cli
from spark_purgatory.config import ConfigError
from spark_purgatory.runtime import jars, maven
from spark_purgatory.spark.formats import check_kafka_source

KAFKA = "org.apache.spark:spark-sql-kafka-0-10_2.13"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty user cache, no set of ``make jars``, and ``mvn`` on the PATH."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("SPARK_PURGATORY_JARS", str(tmp_path / "no-jars"))
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    return tmp_path / "cache" / "spark-purgatory" / "jars"


def _maven(published: set[str], calls: list):
    """A stand-in for ``mvn copy-dependencies`` that knows ``published`` Spark versions."""

    def fetch(set_name: str, spark_version: str, out: Path) -> str:
        calls.append((set_name, spark_version))
        if set_name == "kafka" and spark_version not in published:
            return f"[ERROR] {KAFKA}:jar:{spark_version} was not found in https://repo.maven.apache.org"
        for coordinate in maven.coordinates(set_name, spark_version):
            (out / f"{coordinate.split(':')[1]}-{coordinate.split(':')[2]}.jar").write_bytes(b"PK")
        return ""

    return fetch


def test_the_kafka_source_follows_the_sessions_spark_and_its_pin_is_the_tests_pyspark():
    assert maven.coordinates("kafka", "4.2.1") == [f"{KAFKA}:4.2.1"]
    assert maven.coordinates("kafka") == [f"{KAFKA}:{pinned_spark()}"]  # pyproject's dev pin
    assert maven.coordinates("kafka-broker", "4.2.1") == maven.coordinates("kafka-broker")
    assert maven.coordinates("kafka-broker")[0].startswith("org.apache.kafka:kafka_2.13:4.")
    assert RESOLVED == maven.RESOLVED  # the poms the wheel carries are the ones resolved


def test_a_set_is_resolved_once_into_the_user_cache_for_the_sessions_spark(cache, monkeypatch):
    calls: list = []
    monkeypatch.setattr(maven, "_with_mvn", _maven({"4.2.0"}, calls))
    # Central has no connector for 4.2.1: the pin of the same feature release, kept for 4.2.1
    got = maven.resolve("kafka", "4.2.1")
    assert [Path(p).name for p in got] == ["spark-sql-kafka-0-10_2.13-4.2.0.jar"]
    assert calls == [("kafka", "4.2.1"), ("kafka", "4.2.0")]
    assert maven.resolve("kafka", "4.2.1") == got and len(calls) == 2  # from the cache
    assert (Path(got[0]).parent / ".stamp").read_text() == f"{KAFKA}:4.2.0\n"
    assert maven.resolved("kafka", "4.2.0") == []  # another Spark, another folder
    with pytest.raises(ConfigError) as error:  # another feature release: never the pin
        maven.resolve("kafka", "4.3.0")
    assert str(error.value) == (
        f"could not resolve {KAFKA}:4.3.0 from Maven Central with mvn: [ERROR] {KAFKA}:jar:4.3.0 was "
        "not found in https://repo.maven.apache.org"
    )
    broker = maven.resolve("kafka-broker", "4.2.1")
    assert broker and maven.resolved("kafka-broker", "4.3.0") == broker  # follows no Spark
    made = sorted(p.name.rsplit("-", 1)[0] for p in cache.iterdir())
    assert made == ["kafka", "kafka-broker"]  # nothing half made: each folder whole, or none


def test_without_mvn_spark_resolves_the_same_coordinates(cache, monkeypatch, tmp_path):
    from pyspark import java_gateway

    monkeypatch.setattr(shutil, "which", lambda name: None)
    given: list[str] = []
    ivy = tmp_path / "ivy"
    ivy.mkdir()

    def launch_gateway(conf, popen_kwargs):
        given.append(conf.get("spark.jars.packages"))
        # Ivy's names: group_artifact-version.jar
        files = [ivy / "{}_{}-{}.jar".format(*c.split(":")) for c in given[-1].split(",")]
        for file in files:
            file.write_bytes(b"PK")
        listed = ",".join(f"file://{f}" for f in files)
        system = SimpleNamespace(getProperty=lambda key: listed if key == "spark.jars" else None)
        proc = SimpleNamespace(communicate=lambda: None)
        return SimpleNamespace(jvm=SimpleNamespace(java=SimpleNamespace(lang=SimpleNamespace(System=system))),
                               shutdown=lambda: None, proc=proc)  # fmt: skip

    monkeypatch.setattr(java_gateway, "launch_gateway", launch_gateway)
    assert [Path(p).name for p in maven.resolve("kafka", "4.2.1")] == ["spark-sql-kafka-0-10_2.13-4.2.1.jar"]
    broker = maven.resolve("kafka-broker", "4.2.1")  # run by plain java: pyspark's Scala beside
    assert any(Path(p).name.startswith("kafka_2.13-") for p in broker)  # Maven's names, as the broker wants
    assert given == [f"{KAFKA}:4.2.1", ",".join(maven.coordinates("kafka-broker"))]
    assert any(Path(p).name.startswith("scala-library-") for p in broker)


def test_the_jars_command_prints_the_kafka_source_for_this_pyspark(cache, monkeypatch, capsys):
    monkeypatch.setattr(maven, "_with_mvn", _maven({pyspark.__version__}, []))
    assert cli.main(["jars", "--kafka"]) == 0
    printed = capsys.readouterr().out.strip().split(",")
    assert [Path(p).name for p in printed] == [f"spark-sql-kafka-0-10_2.13-{pyspark.__version__}.jar"]
    assert printed == jars.kafka_jars() == jars.jar_paths("kafka")
    monkeypatch.setattr(maven, "_with_mvn", _maven(set(), []))
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache / "other"))
    assert cli.main(["jars", "--kafka"]) == 1
    assert capsys.readouterr().err.startswith(f"spark-purgatory: could not resolve {KAFKA}:")


def test_a_session_without_the_kafka_source_is_told_the_one_command(monkeypatch):
    def missing(*_):
        raise RuntimeError("ClassNotFoundException: org.apache.spark.sql.kafka010.KafkaSourceProvider")

    thread = SimpleNamespace(currentThread=lambda: SimpleNamespace(getContextClassLoader=lambda: None))
    jvm = SimpleNamespace(java=SimpleNamespace(lang=SimpleNamespace(Class=SimpleNamespace(forName=missing))))
    spark = SimpleNamespace(sparkContext=SimpleNamespace(_jvm=SimpleNamespace(**vars(jvm), Thread=thread)))
    with pytest.raises(ConfigError) as error:
        check_kafka_source(spark, {"kafka.bootstrap.servers": "127.0.0.1:9092"})
    assert str(error.value) == (
        "source format kafka: Spark's Kafka source is not on this session's class path: start the "
        "session with what `spark-purgatory jars --kafka` prints as spark.jars (spark-submit --jars "
        '"$(spark-purgatory jars --kafka)"); a running JVM\'s class path is fixed'
    )
