"""The broker the Kafka tests and ``make demo-kafka`` start: clear errors, nothing left behind.

No Spark here: a Kafka broker is a JVM of its own (``spark_purgatory.kafka_broker``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from spark_purgatory.kafka_broker import KafkaBroker, KafkaBrokerError


def test_missing_jars_or_java_are_one_error_saying_what_to_do(tmp_path):
    with pytest.raises(KafkaBrokerError, match="no Kafka broker JARs"):
        KafkaBroker([str(tmp_path / "nothing.jar")], data_dir=tmp_path).start()
    with pytest.raises(KafkaBrokerError, match="needs Java 17"):
        KafkaBroker(["kafka_2.13-4.1.1.jar"], java=str(tmp_path / "no-java"), data_dir=tmp_path).start()
    assert not (tmp_path / "logs").exists()  # nothing was formatted


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is gone for our purposes
        return f.read().split()[2] != "Z"


@pytest.mark.jars("kafka-broker")
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_the_broker_dies_with_the_process_that_started_it_even_on_kill_minus_nine(tmp_path):
    """A test worker killed (a timeout, kill -9) leaves no broker JVM behind."""
    owner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from spark_purgatory.kafka_broker import KafkaBroker\n"
            f"b = KafkaBroker(data_dir={str(tmp_path)!r}).start()\n"
            "b.create_topic('t', partitions=2)\n"
            "print(b._process.pid, flush=True)\n"
            "time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    broker_pid = int(owner.stdout.readline())
    assert _alive(broker_pid)
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    owner.stdout.close()
    deadline = time.monotonic() + 30
    while _alive(broker_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(broker_pid), "the broker outlived its owner"


@pytest.mark.jars("kafka-broker")
def test_a_broker_started_from_the_command_line_outlives_it_and_restarts_on_its_data(tmp_path, capsys):
    """``python -m spark_purgatory.kafka_broker start|topic|stop|status --data DIR``: the
    broker runs after the command returns, and a second start serves the topics and records
    of the first."""
    from confluent_kafka import Consumer

    from spark_purgatory.kafka_broker import main, running_at, stop_at

    data = str(tmp_path / "kafka")
    try:
        assert main(["start", "--data", data]) == 0
        servers = capsys.readouterr().out.strip()
        assert main(["topic", "--data", data, "ops", "--partitions", "2"]) == 0
        broker = KafkaBroker(data_dir=data)
        broker.port = int(servers.rsplit(":", 1)[1])
        broker.produce("ops", ["a", "b"], partitions=0)
        pid = running_at(data)[0]
        assert main(["stop", "--data", data]) == 0 and not _alive(pid)
        assert main(["status", "--data", data]) == 1
        assert main(["start", "--data", data]) == 0
        assert capsys.readouterr().out.strip().splitlines()[-1] == servers  # the same ports
        consumer = Consumer({"bootstrap.servers": servers, "group.id": "g", "auto.offset.reset": "earliest"})
        consumer.subscribe(["ops"])
        values, deadline = [], time.monotonic() + 60
        while len(values) < 2 and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is not None and message.error() is None:
                values.append(message.value())
        consumer.close()
        assert values == [b"a", b"b"]
    finally:
        stop_at(data)
    assert running_at(data) is None
