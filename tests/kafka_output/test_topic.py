"""The output topic on a real broker (loopback, KRaft), without Spark: the sink's send of each
recorded micro-batch, read back by ``isolation.level=read_committed`` consumers.

Exactly once is the producer's argument (``kafka_output.producer``): a recorded batch's rows
never change, a send skips what the marker says the topic has, and each send fences the
checkpoint's earlier producers.  Here: a replayed micro-batch and a retried send add nothing;
a producer killed with an open transaction (``kill -9``) leaves nothing a read_committed
consumer sees, and the next send fences it; a kept producer another worker's send fenced
starts afresh; a zombie's commit fails; a topic configured on a
checkpoint that already ran starts after its last recorded micro-batch; the drains into the
Delta tables never take rows the topic has not had.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import subprocess
import sys
import textwrap
import uuid

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from spark_purgatory.config import ConfigError, PurgatoryConfig
from spark_purgatory.contract import OPERATOR_OUTPUT
from spark_purgatory.delta.accumulator import RecordAccumulator
from spark_purgatory.delta.sink import PurgatorySink
from spark_purgatory.delta.writers import DeltaRsWriter
from spark_purgatory.kafka_output import TopicOutput, committed_batch, settings_of
from spark_purgatory.kafka_output.producer import Send, send
from spark_purgatory.kafka_output.records import HEADER_BATCH, HEADER_CHECKPOINT, HEADER_STATUS
from spark_purgatory.storage import Storage
from tests.support.topic_reader import read_topic as read_records
from tests.support.topic_reader import status_of

pytestmark = pytest.mark.jars("kafka-broker")

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


#: who answered outcome ``a`` (a quorum, as ``rows`` makes it)
VOTES = {"condition": "quorum", "target": 2.0, "reported": ["bo"], "missing": ["ana", "chen"]}


def rows(batch: int, outcomes: list[tuple[str, str]], rejected: int = 0) -> pa.Table:
    """Operator output rows: one outcome per (op_id, status), ``a`` a quorum that names who
    answered (``VOTES``), ``rejected`` bad lines."""
    out = [
        {
            "kind": "outcome",
            "op_id": op_id,
            "keys": [f"k-{op_id}"],
            "status": status,
            "op_ts_ms": T0,
            "deadline_ms": T0 + 1000,
            "resolved_at_ms": T0 + 1000 + batch,
            "latency_ms": 1000,
            "matched_events": 0,
            "condition": "any",
            "payload": '{"amount": 3}',
            **(VOTES if op_id == "a" else {}),
        }
        for op_id, status in outcomes
    ]
    out += [
        {"kind": "rejected", "source": "operations", "raw": f"{{bad {i}", "reason": "malformed_json"}
        for i in range(rejected)
    ]
    return pa.Table.from_pylist(out, schema=OPERATOR_OUTPUT)


def topic_config(broker, topic: str, statuses: str = "expired,completed,rejected") -> PurgatoryConfig:
    return PurgatoryConfig.from_mapping(
        {
            "output.kafka.topic": topic,
            "output.kafka.statuses": statuses,
            "output.kafka.bootstrap.servers": broker.bootstrap_servers,
            "output.kafka.linger.ms": "5",
        }
    )


def make_sink(tmp_path, broker, topic: str, *, statuses: str = "expired,completed,rejected", app: str = "q1"):
    config = topic_config(broker, topic, statuses)
    accumulator = RecordAccumulator(
        str(tmp_path / "staging"),
        app_id=app,
        batch_size=1,
        linger_ms=0,
        buffer_memory=1,
        clock=lambda: T0 / 1000,
    )
    writer = DeltaRsWriter(str(tmp_path / "out"))
    return PurgatorySink(accumulator, writer, topic=TopicOutput(settings_of(config, app), Storage()))


def read_topic(broker, topic: str, *, committed: bool = True) -> list:
    return read_records(broker.bootstrap_servers, topic, committed=committed)


def summary(messages) -> list[tuple]:
    return sorted((m.key() or b"", status_of(m)) for m in messages)


def test_each_outcome_of_a_recorded_micro_batch_reaches_read_committed_consumers_once(kafka_broker, tmp_path):
    topic = kafka_broker.create_topic(f"out-{uuid.uuid4().hex[:8]}")
    sink = make_sink(tmp_path, kafka_broker, topic)
    sink.process(rows(0, [("a", "expired"), ("b", "completed")], rejected=1), 0)
    sink.process(rows(0, [("a", "expired"), ("b", "completed")], rejected=1), 0)  # a replay
    sink.process(rows(1, [("c", "expired")]), 1)
    got = read_topic(kafka_broker, topic)
    assert summary(got) == [(b"", "rejected"), (b"a", "expired"), (b"b", "completed"), (b"c", "expired")]
    first = next(m for m in got if m.key() == b"a")
    headers = dict(first.headers())
    assert headers[HEADER_STATUS] == b"expired" and headers[HEADER_CHECKPOINT] == b"q1"
    assert headers[HEADER_BATCH] == b"0"
    value = json.loads(first.value())
    assert value["deadline"] == "2026-01-01T00:00:01.000Z" and value["resolved_date"] == "2026-01-01"
    assert value["keys"] == ["k-a"] and value["payload"] == '{"amount": 3}' and value["batch_id"] == 0
    assert set(value) == set(DeltaTable(str(tmp_path / "out" / "outcomes")).schema().to_arrow().names)
    assert (value["condition"], value["reported"], value["missing"]) == ("quorum", ["bo"], ["ana", "chen"])
    assert committed_batch(sink.topic.settings) == 1
    # the Delta tables got the same rows, drained after the topic had them
    assert sorted(DeltaTable(str(tmp_path / "out" / "outcomes")).to_pandas()["op_id"]) == ["a", "b", "c"]


def test_only_the_statuses_asked_for_go_to_the_topic(kafka_broker, tmp_path):
    topic = kafka_broker.create_topic(f"out-{uuid.uuid4().hex[:8]}")
    sink = make_sink(tmp_path, kafka_broker, topic, statuses="expired,cancelled")
    sink.process(rows(0, [("a", "expired"), ("b", "completed"), ("c", "cancelled")], rejected=2), 0)
    assert summary(read_topic(kafka_broker, topic)) == [(b"a", "expired"), (b"c", "cancelled")]


def test_a_retried_send_after_its_commit_sends_nothing(kafka_broker, tmp_path):
    topic = kafka_broker.create_topic(f"out-{uuid.uuid4().hex[:8]}")
    sink = make_sink(tmp_path, kafka_broker, topic)
    sink.accumulator.batch_size = 1 << 30  # nothing drains: the staged files stay
    sink.accumulator.linger_ms = 1 << 30
    sink.process(rows(0, [("a", "expired")]), 0)
    files = sink.accumulator.staged_files(-1, sink.topic.tables)
    again = send(Send(sink.topic.settings, tuple((b, tuple(f)) for b, f in files), Storage()))
    assert again.to_pylist() == [{"through": 0, "batches": 0, "records": 0}]
    assert summary(read_topic(kafka_broker, topic)) == [(b"a", "expired")]


KILLED_MID_TRANSACTION = textwrap.dedent(
    """
    import sys
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": sys.argv[1], "transactional.id": sys.argv[3]})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(50):
        producer.produce(sys.argv[2], key=b"half-%d" % i, value=b"{}")
    producer.flush(30)
    print("produced", flush=True)
    sys.stdin.read()
    """
)


def test_a_send_killed_mid_transaction_leaves_nothing_committed_and_is_fenced_by_the_next(
    kafka_broker, tmp_path
):
    topic = kafka_broker.create_topic(f"out-{uuid.uuid4().hex[:8]}")
    sink = make_sink(tmp_path, kafka_broker, topic, app="killed")
    sink.process(rows(0, [("a", "expired")]), 0)
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            KILLED_MID_TRANSACTION,
            kafka_broker.bootstrap_servers,
            topic,
            sink.topic.settings.transactional_id,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "produced"
        child.kill()  # kill -9 with its transaction open: its 50 records are in the log
    finally:
        child.wait(30)
        child.stdout.close()
        child.stdin.close()
    sink.process(rows(1, [("b", "expired")]), 1)  # init_transactions aborts the dead one's
    assert summary(read_topic(kafka_broker, topic)) == [(b"a", "expired"), (b"b", "expired")]
    uncommitted = read_topic(kafka_broker, topic, committed=False)
    assert (
        len([m for m in uncommitted if m.key().startswith(b"half-")]) == 50
    )  # read_uncommitted: at least once


def test_a_kept_producer_fenced_by_another_workers_send_sends_afresh_before_producing_anything(
    kafka_broker, tmp_path, caplog
):
    """Each process keeps its producer between sends; the send task may land on another
    Python worker, whose producer of the same ``transactional.id`` fences the kept one."""
    from spark_purgatory.kafka_output import producer

    caplog.set_level(logging.DEBUG, logger=producer.log.name)
    topic = kafka_broker.create_topic(f"out-{uuid.uuid4().hex[:8]}")
    sink = make_sink(tmp_path, kafka_broker, topic, app="workers")
    sink.process(rows(0, [("a", "expired")]), 0)
    kept = producer._KEPT[sink.topic.settings.transactional_id]
    other = producer._Clients(sink.topic.settings)  # another worker's send: it fences the kept one
    other.start()
    other.close()
    sink.process(rows(1, [("b", "expired")]), 1)
    assert producer._KEPT[sink.topic.settings.transactional_id] is not kept  # started afresh
    assert summary(read_topic(kafka_broker, topic)) == [(b"a", "expired"), (b"b", "expired")]
    # the marker goes first: the fenced producer learnt it before it produced a record
    assert summary(read_topic(kafka_broker, topic, committed=False)) == [(b"a", "expired"), (b"b", "expired")]
    fenced = [r for r in caplog.records if "fenced" in r.getMessage()]
    assert fenced and all(r.levelno <= logging.INFO for r in fenced)


def test_a_zombie_producer_cannot_commit_once_a_newer_send_began(kafka_broker, tmp_path):
    from confluent_kafka import KafkaException, Producer

    topic = kafka_broker.create_topic(f"out-{uuid.uuid4().hex[:8]}")
    sink = make_sink(tmp_path, kafka_broker, topic, app="zombie")
    zombie = Producer(sink.topic.settings.producer_config())
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, key=b"zombie", value=b"{}")
    sink.process(rows(0, [("a", "expired")]), 0)  # its init_transactions fences the zombie
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(30)
    assert raised.value.args[0].fatal() or raised.value.args[0].txn_requires_abort()
    assert summary(read_topic(kafka_broker, topic)) == [(b"a", "expired")]


def test_a_topic_configured_on_a_checkpoint_that_ran_starts_after_its_last_recorded_batch(
    kafka_broker, tmp_path
):
    topic = kafka_broker.create_topic(f"out-{uuid.uuid4().hex[:8]}")
    sink = make_sink(tmp_path, kafka_broker, topic, app="late")
    topic_output, sink.topic = sink.topic, None
    sink.accumulator.batch_size = 1 << 30  # batch 0 stays staged: still, it was decided before the topic
    sink.accumulator.linger_ms = 1 << 30
    sink.process(rows(0, [("before", "expired")]), 0)
    sink.topic = topic_output
    sink.process(rows(1, [("after", "expired")]), 1)
    sink.close()
    assert summary(read_topic(kafka_broker, topic)) == [(b"after", "expired")]
    assert committed_batch(topic_output.settings) == 1


def test_a_drain_never_takes_rows_the_topic_has_not_had(kafka_broker, tmp_path):
    """A run that recorded a batch and died before its send: the next run's first drain (a
    linger drain, the close's flush) sends it first."""
    topic = kafka_broker.create_topic(f"out-{uuid.uuid4().hex[:8]}")
    sink = make_sink(tmp_path, kafka_broker, topic, app="died")
    sink.accumulator.batch_size = 1 << 30
    sink.accumulator.linger_ms = 1 << 30
    sink.process(rows(0, [("a", "expired")]), 0)
    staged = sink.accumulator.stage_rows(rows(1, [("b", "expired")]), 1, dt.datetime.now(dt.timezone.utc))
    sink.accumulator.record(1, staged)  # recorded, then the driver died: never sent
    restarted = make_sink(tmp_path, kafka_broker, topic, app="died")
    restarted.last_batch_id = 1
    restarted.close()  # flushes every staged row into the tables
    assert summary(read_topic(kafka_broker, topic)) == [(b"a", "expired"), (b"b", "expired")]
    assert sorted(DeltaTable(str(tmp_path / "out" / "outcomes")).to_pandas()["op_id"]) == ["a", "b"]


def test_the_output_topic_keys_are_checked_at_start():
    with pytest.raises(ConfigError, match="output.kafka.topic is not"):
        PurgatoryConfig.from_mapping({"output.kafka.bootstrap.servers": "h:9092"})
    with pytest.raises(ConfigError, match="bootstrap.servers is not"):
        PurgatoryConfig.from_mapping({"output.kafka.topic": "t"})
    with pytest.raises(ConfigError, match="statuses must name some of"):
        PurgatoryConfig.from_mapping(
            {
                "output.kafka.topic": "t",
                "output.kafka.bootstrap.servers": "h:9092",
                "output.kafka.statuses": "late",
            }
        )
    with pytest.raises(ConfigError, match="transactional.id is the project's own"):
        PurgatoryConfig.from_mapping(
            {
                "output.kafka.topic": "t",
                "output.kafka.bootstrap.servers": "h:9092",
                "output.kafka.transactional.id": "x",
            }
        )
    config = PurgatoryConfig.from_mapping(
        {
            "output.kafka.topic": "t",
            "output.kafka.bootstrap.servers": "h:9092",
            "output.kafka.linger.ms": "20",
        }
    )
    assert config.output_kafka_settings == (("bootstrap.servers", "h:9092"), ("linger.ms", "20"))
    assert config.output_kafka_status_list == ("expired",)


def test_an_outcome_with_a_1_mb_payload_reaches_the_topic_without_it_and_the_table_with_it(
    kafka_broker, tmp_path
):
    topic = kafka_broker.create_topic(f"out-{uuid.uuid4().hex[:8]}")
    sink = make_sink(tmp_path, kafka_broker, topic, app="big")
    big = rows(0, [("big", "expired"), ("small", "expired")])
    payloads = pa.array(["p" * 1_040_000, '{"amount": 3}'])
    sink.process(big.set_column(big.schema.get_field_index("payload"), "payload", payloads), 0)
    got = {m.key(): m for m in read_topic(kafka_broker, topic)}
    assert json.loads(got[b"big"].value())["payload"] is None
    assert dict(got[b"big"].headers())["purgatory.omitted"] == b"payload=1040002"
    assert json.loads(got[b"small"].value())["payload"] == '{"amount": 3}'
    table = DeltaTable(str(tmp_path / "out" / "outcomes")).to_pandas().set_index("op_id")
    assert len(table.loc["big", "payload"]) == 1_040_000


def test_a_deleted_topic_and_a_refused_login_are_said_in_one_line_a_broker_away_is_not(kafka_broker):
    from spark_purgatory.kafka_broker import free_port
    from spark_purgatory.kafka_output.health import topic_fault

    topic = kafka_broker.create_topic(f"out-{uuid.uuid4().hex[:8]}")
    plain = {"bootstrap.servers": kafka_broker.bootstrap_servers}
    assert topic_fault(topic, plain) is None
    kafka_broker.delete_topic(topic)
    servers = kafka_broker.bootstrap_servers
    assert (
        topic_fault(topic, plain)
        == f"the output topic {topic!r} is gone from {servers} (deleted, or never created)"
    )
    user = f"out-{uuid.uuid4().hex[:6]}"
    kafka_broker.add_scram_user(user, "pw-out-1")
    kept = kafka_broker.create_topic(f"out-{uuid.uuid4().hex[:8]}")
    login = {
        "bootstrap.servers": kafka_broker.sasl_bootstrap_servers,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.jaas.config": f'{SCRAM} required username="{user}" password="pw-out-1";',
    }
    assert topic_fault(kept, login) is None  # the inputs' Java keys, read as librdkafka's
    kafka_broker.remove_scram_user(user)
    refused = topic_fault(kept, login, timeout_s=300)  # said when refused, not after the timeout
    where = kafka_broker.sasl_bootstrap_servers
    assert refused.startswith(
        f"Kafka at {where} refuses the output topic's login as {user!r} (SCRAM-SHA-256)"
    )
    assert "pw-out-1" not in refused and "\n" not in refused
    assert (
        topic_fault(kept, {"bootstrap.servers": f"127.0.0.1:{free_port()}"}, timeout_s=3) is None
    )  # no answer: may pass
