"""The job on Kafka as users run it (``job.main`` in this process), on one broker (an idle
broker costs CPU, and each test file that asks for one starts its own).

With an output topic, files in: the topic deleted mid-run, then the output's login revoked over
``SASL_SSL``: each ends the job in one line naming it, exit 1, without restarts; fixed, a start
continues from the checkpoint and the topic holds each outcome once (``read_committed``).

Its secrets (``tests/spark/test_secrets.py``'s, as a user passes them: a ``--conf`` file,
``--set``, and keys that are no configuration at all, which are refused): the job reads Kafka
topics over ``SASL_SSL`` (SCRAM-SHA-256 over TLS, the broker's certificate signed by a CA made
for the test, ``kafka_broker.tls``; the job trusts it through a PKCS12 truststore whose password
is one of the secrets), logging in as a user made with the secret password (the start-up
check's Admin client, Spark's Kafka source on the driver and the executors).  The user is
revoked once the job has committed a micro-batch: the job ends in one line naming the login,
exit 1, without restarts; restored, a ``start()`` (a PEM truststore, no password) continues
from the checkpoint, and the tables then equal the engine's reference.  Then a wrong password
and a broker that does not answer; the command line reads the checkpoint.  Every output is
then searched for the secrets: the process's standard output and error (the JVM's included:
``capfd``), every file under the output tables and the checkpoints (the metrics and rejected
tables, Spark's offsets log), and the command line's output.
"""

from __future__ import annotations

import os
import uuid

import pytest
from deltalake import DeltaTable

from spark_purgatory.cli import main as cli_main
from spark_purgatory.job import main as job_main
from spark_purgatory.kafka_broker import free_port
from spark_purgatory.workload import generate, write_json_lines
from tests.spark.test_secrets import NEEDLES, PASSWORD, REFUSED, SECRETS
from tests.support.clean_stops import after_a_commit
from tests.support.topic_reader import outcomes_of, read_topic

pytestmark = [pytest.mark.spark, pytest.mark.jars("kafka-broker")]

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
STOPPED = "; the query stopped: fix it, then start the job again (it continues from its checkpoint)"


def _job_args(tmp_path, topic: str, output: dict[str, str], trigger: str) -> list[str]:
    # the run with the fault takes a micro-batch per file (it goes on after the fault); the
    # start after it reads the files left in one
    one_by_one = {"source.max.files.per.trigger": "1"} if trigger != "available-now" else {}
    settings = {
        **one_by_one,
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


def _files_holding(root: str, needle: bytes) -> list[str]:
    found = []
    for directory, _, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            with open(path, "rb") as f:
                if needle in f.read():
                    found.append(path)
    return found


@pytest.mark.jars("kafka")  # Spark's Kafka source
def test_no_output_of_the_job_or_the_command_line_shows_a_secret(spark, kafka_broker, tmp_path, capfd):
    from spark_purgatory import PurgatoryConfig, start
    from spark_purgatory.config import read_properties
    from tests.support.crash_harness import ROOT, SETTINGS, check, job_options, tables_and_reference

    work = generate(200, seed=31, ops_per_second=40)
    malformed = 2
    write_json_lines(work, f"{tmp_path}/in/ops", f"{tmp_path}/in/events", files=1, malformed=malformed)
    topics = [kafka_broker.create_topic(f"secret-{kind}") for kind in ("ops", "events")]
    for topic, kind in zip(topics, ("ops", "events"), strict=True):
        with open(
            os.path.join(tmp_path, "in", kind, sorted(os.listdir(f"{tmp_path}/in/{kind}"))[0]), "rb"
        ) as f:
            kafka_broker.produce(topic, f.read().splitlines())
    kafka_broker.add_scram_user("svc", PASSWORD)
    ca = kafka_broker.certificates
    truststore = ca.pkcs12_truststore(tmp_path / "truststore.p12", SECRETS["kafka.ssl.truststore.password"])
    conf = tmp_path / "secrets.conf"
    conf.write_text("".join(f"{k} = {v}\n" for k, v in list(SECRETS.items())[:2]))
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    servers = kafka_broker.sasl_ssl_bootstrap_servers
    settings = {
        **SETTINGS,
        "source.kafka.startingOffsets": "earliest",
        "source.kafka.maxOffsetsPerTrigger": "60",  # several micro-batches: revoked mid-way
        "job.restart.backoff.ms": "100",
    }
    common = [
        *("--ops-path", topics[0], "--events-path", topics[1], "--source-format", "kafka"),
        *job_options(settings),
        *("--conf", str(conf), "--set", f"{list(SECRETS)[2]}={list(SECRETS.values())[2]}"),
        *("--set", "kafka.security.protocol=SASL_SSL", "--set", "kafka.sasl.mechanism=SCRAM-SHA-256"),
        *(
            "--set",
            f"kafka.ssl.truststore.location={truststore}",
            "--set",
            "kafka.ssl.truststore.type=PKCS12",
        ),
    ]
    printed = []

    with after_a_commit(chk, lambda: kafka_broker.remove_scram_user("svc")):
        code = job_main(
            [
                *common,
                *("--output-path", out, "--checkpoint-path", chk),
                *("--set", f"kafka.bootstrap.servers={servers}", "--trigger", "processing-time=1s"),
            ]
        )
    printed.append(capfd.readouterr())
    said = [line for line in printed[-1].err.splitlines() if line.startswith("error:")]
    assert code == 1 and len(said) == 1, printed[-1].err[-3000:]
    assert said[0].startswith(
        f"error: Kafka at {servers} refuses this job's login as 'svc' (SCRAM-SHA-256)"
    ), said
    assert "restart 1 of" not in printed[-1].out + printed[-1].err

    kafka_broker.add_scram_user("svc", PASSWORD)  # restored: a start continues exactly once
    local = read_properties(os.path.join(ROOT, "conf", "local.conf"))  # what the job read
    config = PurgatoryConfig.from_mapping(
        {k: v for k, v in {**local, **SETTINGS}.items() if not k.startswith("job.")}
    )
    options = {
        "kafka.bootstrap.servers": servers,
        "startingOffsets": "earliest",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.jaas.config": SECRETS["kafka.sasl.jaas.config"],
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(ca.ca_file),
    }
    with start(
        *topics,
        output=out,
        checkpoint=chk,
        config=config,
        source_format="kafka",
        kafka_options=options,
        spark=spark,
    ) as purgatory:
        purgatory.await_termination()
    printed.append(capfd.readouterr())
    check(tables_and_reference(work, out, None, settings, malformed))

    wrong = SECRETS["kafka.sasl.jaas.config"].replace(PASSWORD, "Sekr1t-WRONG-4716")
    code = job_main(
        [
            *common,
            *("--output-path", str(tmp_path / "out-3"), "--checkpoint-path", str(tmp_path / "chk-3")),
            *("--set", f"kafka.bootstrap.servers={servers}"),
            *("--set", f"kafka.sasl.jaas.config={wrong}"),
        ]
    )
    printed.append(capfd.readouterr())
    assert code == 2 and "refuses this job's login (" in printed[-1].err, printed[-1].err[-3000:]
    nobody = f"127.0.0.1:{free_port()}"
    code = job_main(
        [
            *common,
            "--output-path",
            str(tmp_path / "out-2"),
            "--checkpoint-path",
            str(tmp_path / "chk-2"),
            "--set",
            f"kafka.bootstrap.servers={nobody}",
            "--set",
            "kafka.default.api.timeout.ms=3000",
        ]
    )
    printed.append(capfd.readouterr())
    assert code == 2
    for key, value in REFUSED.items():  # not a key of the job: refused, its value never shown
        code = job_main([*common, "--output-path", out, "--checkpoint-path", chk, "--set", f"{key}={value}"])
        printed.append(capfd.readouterr())
        assert code == 2 and key in printed[-1].err
    for command in ("status", "pending"):
        code = cli_main(
            [command, "--checkpoint", chk, "--output", out, "--conf", str(conf)]
            + ["--set", "kafka.security.protocol=SASL_SSL"]
        )
        printed.append(capfd.readouterr())
        assert code == 0, printed[-1].err[-2000:]
    text = "\n".join(p.out + p.err for p in printed)
    assert "committed" in text and "Kafka at" in text  # the job did log, and its failure said why
    for needle in NEEDLES:
        assert needle not in text, [line for line in text.splitlines() if needle in line][:5]
        for root in (out, chk, str(tmp_path / "chk-2"), str(tmp_path / "chk-3")):
            assert _files_holding(root, needle.encode()) == []
