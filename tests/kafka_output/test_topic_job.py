"""The job with an output topic, as users run it (``job.main`` in this process, files in):
the topic deleted mid-run, then the output's login revoked over ``SASL_SSL``: each ends the
job in one line naming it, exit 1, without restarts; fixed, a start continues from the
checkpoint and the topic holds each outcome once (``read_committed``).
"""

from __future__ import annotations

import uuid

import pytest
from deltalake import DeltaTable

from spark_purgatory.job import main as job_main
from spark_purgatory.workload import generate, write_json_lines
from tests.support.clean_stops import after_a_commit
from tests.support.topic_reader import outcomes_of, read_topic

pytestmark = [pytest.mark.spark, pytest.mark.jars("kafka-broker")]

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
STOPPED = "; the query stopped: fix it, then start the job again (it continues from its checkpoint)"


def _job_args(tmp_path, topic: str, output: dict[str, str], trigger: str) -> list[str]:
    settings = {
        "source.max.files.per.trigger": "1",  # a micro-batch per file: the run goes on after the fault
        "job.restart.backoff.ms": "100",
        "output.kafka.topic": topic,
        "output.kafka.statuses": "expired,completed",
        **{f"output.kafka.{k}": v for k, v in output.items()},
    }
    args = ["--ops-path", f"{tmp_path}/in/ops", "--events-path", f"{tmp_path}/in/events"]
    args += ["--output-path", f"{tmp_path}/out", "--checkpoint-path", f"{tmp_path}/chk", "--trigger", trigger]
    return args + [arg for key, value in settings.items() for arg in ("--set", f"{key}={value}")]


def _run_until(fault, tmp_path, topic, output, capfd) -> tuple[int, list[str]]:
    with after_a_commit(f"{tmp_path}/chk", fault):
        code = job_main(_job_args(tmp_path, topic, output, "processing-time=1s"))
    err = capfd.readouterr().err
    return code, [line for line in err.splitlines() if line.startswith("error:")]


def _then_a_start_continues(tmp_path, topic, output, bootstrap: str) -> None:
    assert job_main(_job_args(tmp_path, topic, output, "available-now")) == 0
    records = outcomes_of(read_topic(bootstrap, topic))
    op_ids = [op_id for op_id, _, _ in records]
    assert op_ids and len(op_ids) == len(set(op_ids))
    table = DeltaTable(f"{tmp_path}/out/outcomes").to_pandas()
    assert table["op_id"].is_unique and set(op_ids) <= set(table["op_id"])


@pytest.fixture
def input_files(tmp_path):
    work = generate(400, seed=66, ops_per_second=40)
    write_json_lines(work, f"{tmp_path}/in/ops", f"{tmp_path}/in/events", files=4)


def test_the_output_topic_deleted_mid_run_ends_the_job_in_one_line(
    kafka_broker, tmp_path, capfd, input_files
):
    topic = kafka_broker.create_topic(f"gone-{uuid.uuid4().hex[:8]}")
    servers = kafka_broker.bootstrap_servers
    output = {"bootstrap.servers": servers}
    code, said = _run_until(lambda: kafka_broker.delete_topic(topic), tmp_path, topic, output, capfd)
    assert code == 1 and said == [
        f"error: the output topic {topic!r} is gone from {servers} (deleted, or never created){STOPPED}"
    ]
    kafka_broker.create_topic(topic)  # made again: it starts from the checkpoint's next micro-batch
    _then_a_start_continues(tmp_path, topic, output, servers)


def test_the_output_login_revoked_over_sasl_ssl_ends_the_job_in_one_line(
    kafka_broker, tmp_path, capfd, input_files
):
    topic = kafka_broker.create_topic(f"login-{uuid.uuid4().hex[:8]}")
    user, password = f"out-{uuid.uuid4().hex[:6]}", "Sekr1t-OUT-6601"
    kafka_broker.add_scram_user(user, password)
    servers = kafka_broker.sasl_ssl_bootstrap_servers
    output = {  # the inputs' Java keys, as a user copies them
        "bootstrap.servers": servers,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.jaas.config": f'{SCRAM} required username="{user}" password="{password}";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(kafka_broker.certificates.ca_file),
    }
    code, said = _run_until(lambda: kafka_broker.remove_scram_user(user), tmp_path, topic, output, capfd)
    assert code == 1 and len(said) == 1, said
    assert said[0].startswith(
        f"error: Kafka at {servers} refuses the output topic's login as {user!r} (SCRAM-SHA-256)"
    )
    assert said[0].endswith(STOPPED) and password not in said[0]
    kafka_broker.add_scram_user(user, password)
    _then_a_start_continues(tmp_path, topic, output, kafka_broker.bootstrap_servers)
