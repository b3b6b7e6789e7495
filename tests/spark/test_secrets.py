"""Secrets stay secret: no output of the job or the command line shows a credential's value.

Known secrets go in as a user would pass them, in a ``--conf`` file and with ``--set``
(``kafka.sasl.jaas.config``, ``kafka.ssl.*.password``, and keys that are no configuration
at all, ``fs.s3a.secret.key`` and ``fs.azure.account.key.*``, which are refused); the job
reads Kafka topics on the loopback broker over ``SASL_PLAINTEXT``, logging in with SCRAM-SHA-256
as a user made with the secret password (the start-up check's Admin client, Spark's Kafka
source on the driver and the executors), once to its end, once with a wrong password and once
against a broker that does not answer; the command line reads the checkpoint.  Every output is then searched
for the secrets: the process's standard output and error (the JVM's included: ``capfd``),
every file under the output tables and the checkpoint (the metrics and rejected tables,
Spark's offsets log), and the command line's output.
"""

from __future__ import annotations

import os

import pytest

from spark_purgatory.cli import main as cli_main
from spark_purgatory.job import main as job_main
from spark_purgatory.kafka_broker import free_port
from spark_purgatory.workload import generate, write_json_lines

pytestmark = [pytest.mark.spark, pytest.mark.jars("kafka", "kafka-broker")]

#: the SCRAM user's password on the broker's SASL listener
PASSWORD = "Sekr1t-JAAS-4711"
SECRETS = {
    "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
    f'username="svc" password="{PASSWORD}";',
    "kafka.ssl.truststore.password": "Sekr1t-TRUST-4712",
    "source.kafka.kafka.ssl.key.password": "Sekr1t-KEY-4713",
}
REFUSED = {
    "fs.s3a.secret.key": "Sekr1t-S3A-4714",
    "fs.azure.account.key.acct.dfs.core.windows.net": "Sekr1t-ABFS-4715",
}
NEEDLES = ("Sekr1t",)


def _files_holding(root: str, needle: bytes) -> list[str]:
    found = []
    for directory, _, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            with open(path, "rb") as f:
                if needle in f.read():
                    found.append(path)
    return found


def test_no_output_of_the_job_or_the_command_line_shows_a_secret(spark, kafka_broker, tmp_path, capfd):
    work = generate(120, seed=31, ops_per_second=40)
    write_json_lines(work, f"{tmp_path}/in/ops", f"{tmp_path}/in/events", files=1, malformed=2)
    topics = [kafka_broker.create_topic(f"secret-{kind}") for kind in ("ops", "events")]
    for topic, kind in zip(topics, ("ops", "events"), strict=True):
        with open(
            os.path.join(tmp_path, "in", kind, sorted(os.listdir(f"{tmp_path}/in/{kind}"))[0]), "rb"
        ) as f:
            kafka_broker.produce(topic, f.read().splitlines())
    kafka_broker.add_scram_user("svc", PASSWORD)
    conf = tmp_path / "secrets.conf"
    conf.write_text("".join(f"{k} = {v}\n" for k, v in list(SECRETS.items())[:2]))
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    common = [
        *("--ops-path", topics[0], "--events-path", topics[1], "--source-format", "kafka"),
        *("--conf", str(conf), "--set", f"{list(SECRETS)[2]}={list(SECRETS.values())[2]}"),
        *("--set", "source.kafka.startingOffsets=earliest"),
        *("--set", "kafka.security.protocol=SASL_PLAINTEXT", "--set", "kafka.sasl.mechanism=SCRAM-SHA-256"),
    ]
    printed = []
    code = job_main(
        [
            *common,
            "--output-path",
            out,
            "--checkpoint-path",
            chk,
            "--set",
            f"kafka.bootstrap.servers={kafka_broker.sasl_bootstrap_servers}",
            "--end-input",
        ]
    )
    printed.append(capfd.readouterr())
    assert code == 0, printed[-1].err[-3000:]
    wrong = SECRETS["kafka.sasl.jaas.config"].replace(PASSWORD, "Sekr1t-WRONG-4716")
    code = job_main(
        [
            *common,
            *("--output-path", str(tmp_path / "out-3"), "--checkpoint-path", str(tmp_path / "chk-3")),
            *("--set", f"kafka.bootstrap.servers={kafka_broker.sasl_bootstrap_servers}"),
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
        code = cli_main([command, "--checkpoint", chk, "--output", out, "--conf", str(conf), *common[-4:-2]])
        printed.append(capfd.readouterr())
        assert code == 0, printed[-1].err[-2000:]
    text = "\n".join(p.out + p.err for p in printed)
    assert "done:" in text and "Kafka at" in text  # the job did log, and its failure said why
    for needle in NEEDLES:
        assert needle not in text, [line for line in text.splitlines() if needle in line][:5]
        for root in (out, chk, str(tmp_path / "chk-2"), str(tmp_path / "chk-3")):
            assert _files_holding(root, needle.encode()) == []


def test_a_secret_in_a_log_line_or_an_error_is_hidden(capsys):
    """Where a credential's value would reach a line the job prints (its logs, its errors)."""
    import logging

    from spark_purgatory.config import secret_values
    from spark_purgatory.job import configure_logging

    secrets = secret_values({**SECRETS, "kafka.bootstrap.servers": "b:9092", **REFUSED})
    configure_logging("text", secrets)
    log = logging.getLogger("spark_purgatory.job")
    log.info("options %s", SECRETS)
    try:
        raise RuntimeError(f"login failed for {SECRETS['kafka.sasl.jaas.config']}")
    except RuntimeError:
        log.exception("connecting")
    configure_logging("json", secrets)
    log.info("key %s", REFUSED["fs.s3a.secret.key"])
    printed = capsys.readouterr().out
    assert "b:9092" not in secrets and printed.count("****") >= 4
    assert "Sekr1t" not in printed, printed
    jaas = 'kafka.sasl.jaas.config=x required password="Sekr1t-1";'
    args = ["--ops-path", "o", "--events-path", "e", "--output-path", "o", "--checkpoint-path", "c"]
    code = job_main([*args, "--set", jaas, "--set", "job.log.format=xml"])
    err = capsys.readouterr().err
    assert code == 2 and "job.log.format" in err and "Sekr1t" not in err
