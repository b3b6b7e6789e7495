"""Secrets stay secret: no output of the job or the command line shows a credential's value.

Known secrets go in as a user would pass them, in a ``--conf`` file and with ``--set``
(``kafka.sasl.jaas.config``, ``kafka.ssl.*.password``, and keys that are no configuration
at all, ``fs.s3a.secret.key`` and ``fs.azure.account.key.*``, which are refused); the job
reads Kafka topics on the loopback broker over ``SASL_SSL`` (SCRAM-SHA-256 over TLS, the
broker's certificate signed by a CA made for the test, ``kafka_broker.tls``; the job trusts
it through a PKCS12 truststore whose password is one of the secrets), logging in as a user
made with the secret password (the start-up check's Admin client, Spark's Kafka source on
the driver and the executors).  The user is revoked once the job has committed a
micro-batch: the job ends in one line naming the login, exit 1, without restarts; restored,
a ``start()`` (a PEM truststore, no password) continues from the checkpoint, and the tables
then equal the engine's reference.  Then a wrong password and a broker that does not
answer; the command line reads the checkpoint.  Every output is then searched for the
secrets: the process's standard output and error (the JVM's included: ``capfd``), every
file under the output tables and the checkpoints (the metrics and rejected tables, Spark's
offsets log), and the command line's output.
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
    from spark_purgatory import PurgatoryConfig, start
    from spark_purgatory.config import read_properties
    from tests.support.clean_stops import after_a_commit
    from tests.support.crash_harness import ROOT, SETTINGS, check, tables_and_reference
    from tests.support.crash_harness import _options as job_options

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
