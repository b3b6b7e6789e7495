"""Secrets stay secret: no output of the job or the command line shows a credential's value.

Known secrets go in as a user would pass them, in a ``--conf`` file and with ``--set``
(``kafka.sasl.jaas.config``, ``kafka.ssl.*.password``, and keys that are no configuration
at all, ``fs.s3a.secret.key`` and ``fs.azure.account.key.*``, which are refused).  Here: a
log line or an error that would carry one hides it.  The job's runs over ``SASL_SSL`` with
them, and every output of those runs searched for them, are in
``tests/kafka_output/test_topic_job.py``, on the broker its other tests use (each test file
that asks for a broker starts its own).
"""

from __future__ import annotations

from spark_purgatory.job import main as job_main

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
