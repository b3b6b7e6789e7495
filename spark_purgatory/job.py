"""The streaming job: operations + completion events in, Delta tables out.

``run`` (``jobs/purgatory_job.py``'s entry point) is a thin shell around ``start``: early
refusals, the session, progress and commit log lines, restarts, and stopping on
SIGTERM/SIGINT.  Configuration: ``PurgatoryConfig``'s keys plus the job's own (``job.*``,
``kafka.*``, ``source.kafka.*``: docs/configuration.md), from ``--conf`` files then ``--set``.

Exit codes (``faults.EXIT_*``): 0 done; 1 the query failed (restarts spent, or something it
needs is gone); 2 refused at start; 3 a deployment no restart fixes.  Every one but 0 is one
line on standard error; 2 and 3 come without a restart.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from .checkpoint_paths import Checkpoint, OpenCheckpoint
from .config import (
    READ_FORMATS,
    ConfigError,
    PurgatoryConfig,
    SecretFilter,
    read_settings,
    scrubbed,
    secret_values,
)
from .delta.catalog import CatalogTables, local_catalog
from .delta.ownership import OutputOwnedError, check_owner
from .delta.writers import DeltaRsWriter
from .faults import (
    EXIT_DONE,
    EXIT_FAILED,
    EXIT_REFUSED,
    CannotPass,
    PermanentFault,
    cannot_pass,
    depended_on,
    diagnose,
)
from .handoff.end_of_input import EndOfInput, InputEndedError
from .query import TRIGGERS, check_trigger, start
from .restarts import Attempt, RestartPolicy, run_restarting
from .spark.errors import MicroBatchError, first_cause
from .startup import app_id_of
from .state.layout import CheckpointBusyError, RunLease, with_default_shards
from .state.pending_counts import PendingRecord
from .state.versions import IncompatibleCheckpointError, check_formats
from .storage import Storage, storage_session_conf

log = logging.getLogger("spark_purgatory.job")

_JOB_KEYS = {
    "job.trigger": "available-now",
    "job.source.format": "auto",
    "job.writer": "auto",
    "job.master": "local[*]",
    "job.log.format": "text",
    "job.warehouse": "",
    # a query that fails while running is restarted (spark_purgatory.restarts); 0: off
    "job.restart.attempts": "3",
    "job.restart.backoff.ms": "10000",
    "job.restart.backoff.max.ms": "300000",
}


#: the Kafka keys, as an unknown key's error names them
_KAFKA_KEYS = ("kafka.<consumer config> (e.g. kafka.bootstrap.servers)", "source.kafka.<source option>")


def split_settings(values: dict[str, str]) -> tuple[dict[str, str], dict[str, str], PurgatoryConfig]:
    """The job's keys (with their defaults), the Kafka source's options and the engine's
    ``PurgatoryConfig``, from the keys of ``--conf`` files and ``--set`` (``read_settings``).

    Raises:
        ConfigError: an unknown key (its error lists every key the job accepts) or a bad value.
    """
    job = dict(_JOB_KEYS)
    kafka: dict[str, str] = {}
    engine: dict[str, str] = {}
    for key, value in values.items():
        if key in _JOB_KEYS:
            job[key] = value
        elif key.startswith("kafka."):
            kafka[key] = value  # Kafka consumer configs, as Spark's Kafka source names them
        elif key.startswith("source.kafka."):
            kafka[key[len("source.kafka.") :]] = value  # other Kafka source options (startingOffsets)
        else:
            engine[key] = value  # PurgatoryConfig rejects unknown keys, naming the allowed ones
    return job, kafka, PurgatoryConfig.from_mapping(engine, also_allowed=[*_JOB_KEYS, *_KAFKA_KEYS])


@dataclass
class JobSettings:
    ops_path: str
    events_path: str
    output_path: str
    checkpoint_path: str
    config: PurgatoryConfig
    trigger: str = "available-now"
    source_format: str = "auto"
    writer: str = "auto"
    master: str = "local[*]"
    log_format: str = "text"
    #: the output as catalog names (``--output-tables``): then ``output_path`` is empty
    output_tables: CatalogTables | None = None
    warehouse: str = ""
    kafka_options: dict[str, str] = field(default_factory=dict)
    end_input: bool = False
    #: ``purgatory.shards`` was given; else the checkpoint's count, or for a new checkpoint the
    #: session's parallelism
    shards_configured: bool = True
    #: the values of the credential keys given: never shown
    secrets: tuple[str, ...] = ()
    restart: RestartPolicy = field(default_factory=RestartPolicy)


def parse_args(argv: list[str] | None = None) -> JobSettings:
    parser = argparse.ArgumentParser(prog="purgatory_job.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops-path", required=True, help="operations directory (or Kafka topic)")
    parser.add_argument("--events-path", required=True, help="completion events directory (or Kafka topic)")
    output = parser.add_mutually_exclusive_group(required=True)
    output.add_argument("--output-path", help="where the Delta tables live")
    output.add_argument(
        "--output-tables",
        metavar="SCHEMA",
        help="the tables in the session's catalog: SCHEMA.outcomes ... (main.purgatory, "
        "or main.ops.payments_{table} for a prefix)",
    )
    parser.add_argument("--checkpoint-path", required=True, help="Spark checkpoint (+ accumulator staging)")
    parser.add_argument("--source-format", choices=list(READ_FORMATS))
    parser.add_argument("--trigger", help=TRIGGERS)
    parser.add_argument("--conf", action="append", default=[], help="a .conf file of KEY = VALUE lines")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override one key")
    parser.add_argument(
        "--take-over-output",
        action="store_true",
        help="the output tables belong to another checkpoint whose query is gone for good: "
        "make them this checkpoint's (output.take.over)",
    )
    parser.add_argument(
        "--end-input",
        action="store_true",
        help="the input is complete: process it, then end it (everything pending resolves; "
        "the checkpoint takes no more input)",
    )
    args = parser.parse_args(argv)

    values = read_settings(args.conf, args.set)
    if args.take_over_output:
        values["output.take.over"] = "true"
    job, kafka, config = split_settings(values)
    trigger = args.trigger or job["job.trigger"]
    check_trigger(trigger, option="--trigger")
    if args.end_input and trigger != "available-now":
        raise ConfigError(f"--end-input needs --trigger available-now, got {trigger!r}")
    fmt = args.source_format or job["job.source.format"]
    if fmt not in READ_FORMATS:
        raise ConfigError(f"job.source.format must be one of {', '.join(READ_FORMATS)}, got {fmt!r}")
    if job["job.writer"] not in ("auto", "delta-rs", "spark"):
        raise ConfigError(f"job.writer must be auto, delta-rs or spark, got {job['job.writer']!r}")
    if job["job.log.format"] not in ("text", "json"):
        raise ConfigError(f"job.log.format must be text or json, got {job['job.log.format']!r}")
    tables = CatalogTables.parse(args.output_tables) if args.output_tables else None
    if tables is not None and job["job.writer"] == "delta-rs":
        raise ConfigError(
            f"--output-tables {tables}: delta-rs cannot write catalog tables; use job.writer=auto or spark"
        )
    return JobSettings(
        ops_path=args.ops_path,
        events_path=args.events_path,
        output_path=args.output_path or "",
        output_tables=tables,
        warehouse=job["job.warehouse"],
        checkpoint_path=args.checkpoint_path,
        config=config,
        shards_configured="purgatory.shards" in values,
        trigger=trigger,
        source_format=fmt,
        writer=job["job.writer"],
        master=job["job.master"],
        log_format=job["job.log.format"],
        kafka_options=kafka,
        end_input=args.end_input,
        secrets=secret_values(values),
        restart=_restart_policy(job),
    )


def _restart_policy(job: dict[str, str]) -> RestartPolicy:
    """The ``job.restart.*`` keys as a ``RestartPolicy`` (whole numbers >= 0)."""
    numbers = {}
    for key in ("job.restart.attempts", "job.restart.backoff.ms", "job.restart.backoff.max.ms"):
        try:
            numbers[key] = int(str(job[key]).strip())
        except ValueError:
            numbers[key] = -1
        if numbers[key] < 0:
            raise ConfigError(f"{key} must be a whole number >= 0, got {job[key]!r}")
    return RestartPolicy(*numbers.values())


def _session(settings: JobSettings):
    """The submitted session under spark-submit; a local session with good defaults otherwise."""
    from .runtime.session import local_session

    if "PYSPARK_GATEWAY_PORT" in os.environ:  # launched by spark-submit / pyspark
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.appName("spark-purgatory").getOrCreate()
        spark.sparkContext.setLogLevel("WARN")
        return spark
    # Spark's own s3a:// gets the storage.* settings too
    config = settings.config
    uris = [settings.ops_path, settings.events_path, settings.output_path, settings.checkpoint_path]
    uris += [config.state_path, config.accumulator_staging_path]
    conf = storage_session_conf(Storage.of(config), uris)
    if settings.output_tables is not None:
        if not settings.warehouse:
            raise ConfigError(
                f"--output-tables {settings.output_tables} in a local run: set job.warehouse to the "
                "directory where the local catalog keeps its tables and metastore"
            )
        conf.update(local_catalog(settings.warehouse))
    return local_session(
        "spark-purgatory", master=settings.master, shuffle_partitions=config.groups, conf=conf
    )


class _StdoutHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stdout`` is now (tests and notebooks swap it)."""

    @property
    def stream(self):  # type: ignore[override]
        return sys.stdout

    @stream.setter
    def stream(self, _value) -> None:
        pass


def configure_logging(fmt: str, secrets: tuple[str, ...] = ()) -> None:
    """The job's log lines on standard output, text or JSON; ``secrets`` hidden in every line."""
    from .spark.metrics import JsonFormatter

    handler = _StdoutHandler()
    handler.addFilter(SecretFilter(secrets))
    handler.setFormatter(
        JsonFormatter() if fmt == "json" else logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S")
    )
    root = logging.getLogger("spark_purgatory")
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    root.propagate = False


def run(settings: JobSettings, spark=None) -> dict:
    """Start the query, run it per the trigger, flush; return the totals.

    ``spark``: the session to run on; by default the job builds its own from ``settings``."""
    chk = _refuse_early(settings)
    spark = spark if spark is not None else _session(settings)
    attempts = _Attempts(settings, spark, chk)
    try:
        run_restarting(
            attempts.once, settings.restart, interrupted=attempts.interrupted, permanent=attempts.permanent
        )
    except (ConfigError, PermanentFault, MicroBatchError):  # said in one line; failures were asked
        raise
    except Exception as error:  # a start or a flush that failed: is something gone?
        fatal = attempts.permanent(error)
        if fatal is not None:
            raise fatal from error
        raise
    finally:
        spark.streams.removeListener(attempts.listener)
    totals = attempts.totals()
    log.info("done: %s", " ".join(f"{k}={v}" for k, v in totals.items()))
    return totals


def _refuse_early(settings: JobSettings) -> OpenCheckpoint:
    """The job's checkpoint, opened; refused before a session starts for what ``start`` would
    refuse later (catalog tables' owner: in ``start``)."""
    config = settings.config
    chk = Checkpoint(settings.checkpoint_path, config.state_path).open_on(Storage.of(config))
    check_formats(chk)
    EndOfInput(chk.path, chk.storage).check_open()
    RunLease(chk).check_unheld()
    if settings.output_path and not config.output_take_over:
        writer = DeltaRsWriter(settings.output_path, storage=chk.storage)
        check_owner(writer, app_id=app_id_of(chk), checkpoint=chk.path)
    return chk


class _Attempts:
    """The job's runs of ``start`` on one session, as the restart policy calls them: ``once``
    starts and runs the query, ``permanent`` says whether an error may pass."""

    def __init__(self, settings: JobSettings, spark: Any, chk: OpenCheckpoint) -> None:
        from .spark.metrics import ProgressListener

        if not settings.shards_configured:
            config = with_default_shards(settings.config, spark, chk)
            settings = dataclasses.replace(settings, config=config)
        self.settings, self.spark, self.storage = settings, spark, chk.storage
        self.output = settings.output_tables or settings.output_path
        self.listener = ProgressListener()  # the progress line, one per micro-batch
        # every shard's pending count, also those this run's micro-batches do not call
        self.listener.pending_by_shard.update(PendingRecord.under(chk.path, chk.storage).read())
        spark.streams.addListener(self.listener)
        self.interrupted = threading.Event()  # a signal between two attempts ends the job
        self.runs: list = []

    def once(self) -> Attempt:
        """One start, run until done, stopped and flushed: the restart policy's attempt."""
        settings = self.settings
        purgatory = start(
            settings.ops_path,
            settings.events_path,
            output=self.output,
            checkpoint=settings.checkpoint_path,
            config=settings.config,
            trigger=settings.trigger,
            source_format=settings.source_format,  # type: ignore[arg-type]
            writer=settings.writer,  # type: ignore[arg-type]
            on_batch=_log_commits,
            on_linger=_log_lingered,
            spark=self.spark,
            end_of_input=settings.end_input,
            kafka_options=settings.kafka_options,
        )
        self.runs.append(purgatory)
        purgatory.stop_on_signals()  # SIGTERM, SIGINT: stop between micro-batches, then flush below
        error = None
        try:
            purgatory.await_termination()
        except MicroBatchError as failed:  # the restart policy decides
            error = failed
        _await_last_progress(purgatory.query, self.listener)
        try:
            flushed = purgatory.stop()  # linger no longer: flush what is staged (Kafka's close())
        except Exception as failed:  # after a failure: what is staged waits for the next start
            if error is None:
                raise
            log.warning("not flushed after the failure (the next start commits it): %s", first_cause(failed))
            flushed = []
        for c in flushed:
            log.info("flushed %s rows=%s partitions=%s", c["table"], c["rows"], c["partitions"])
        signalled = purgatory.signalled is not None
        if error is not None and not signalled:  # a signal in the pause ends the job cleanly
            _note_signals(self.interrupted)
        return Attempt(error, progressed=purgatory.totals["batches"] > 0, signalled=signalled)

    def permanent(self, error: BaseException) -> Any:
        """The error that ends the job at once, or None when a restart may help."""
        settings = self.settings
        # an error that says by itself no restart fixes it ends the job at once
        never = cannot_pass(error, settings.checkpoint_path)
        if never is not None:
            return never
        # the handle asks the stores before it raises; its inputs are DataFrames here, so
        # the topics are the job's to ask (and the stores again, when the handle found none)
        if isinstance(error, PermanentFault):
            return PermanentFault(str(error))
        inputs = (settings.ops_path, settings.events_path)
        asked = depended_on(
            settings.output_path,
            settings.checkpoint_path,
            settings.config,
            inputs,
            settings.source_format,
            settings.kafka_options,
        )
        return diagnose(**asked, storage=self.storage, spark=self.spark)

    def totals(self) -> dict:
        """The last run's totals, with every shard's pending count as its shards reported it."""
        purgatory = self.runs[-1]
        return {**purgatory.totals, "pending": purgatory.pending}


def _log_commits(figures: dict) -> None:
    for c in figures["committed"]:
        log.info(
            "committed %s rows=%s partitions=%s because %s",
            c["table"],
            c["rows"],
            c["partitions"],
            ",".join(c["reasons"]),
        )


def _log_lingered(committed: list[dict]) -> None:
    for c in committed:
        log.info(
            "committed %s rows=%s partitions=%s because lingered", c["table"], c["rows"], c["partitions"]
        )


def _note_signals(interrupted: threading.Event) -> None:
    """Between two attempts: SIGTERM and SIGINT end the pause (and the job, cleanly)."""

    def note(_signum, _frame) -> None:
        interrupted.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, note)


def _await_last_progress(query, listener) -> None:
    """Listener events are asynchronous: let the last micro-batch's line be logged (up to 5 s)."""
    last = query.lastProgress["batchId"] if query.lastProgress else None
    deadline = time.time() + 5
    while (
        last is not None
        and time.time() < deadline
        and not any(h["batch_id"] == last for h in listener.history)
    ):
        time.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
    try:
        settings = parse_args(argv)
    except ConfigError as error:
        print(f"configuration error: {error}", file=sys.stderr)
        return 2
    configure_logging(settings.log_format, settings.secrets)
    from .spark.schema import InputSchemaError

    def say(text: str) -> None:  # no credential's value in what the job prints
        print(scrubbed(text, settings.secrets), file=sys.stderr)

    try:
        run(settings)
    except (InputEndedError, CheckpointBusyError, OutputOwnedError, IncompatibleCheckpointError) as error:
        say(f"error: {error}")  # refused at start, in one line
        return EXIT_REFUSED
    except (ConfigError, InputSchemaError) as error:  # found at start: one line says what to do
        say(f"{type(error).__name__}: {error}")
        return EXIT_REFUSED
    except CannotPass as error:  # no restart fixes it: ended at once
        say(f"error: {error}".splitlines()[0])
        return error.exit_code
    except PermanentFault as error:  # something the query needs is gone: no restart helps
        say(f"error: {error}")
        return EXIT_FAILED
    except MicroBatchError as error:  # failed while running, restarts spent: its first cause
        say(f"error: the query failed after {settings.restart.attempts} restarts: {error}".splitlines()[0])
        return EXIT_FAILED
    except Exception:  # the trace, with no credential's value in it
        say(traceback.format_exc().rstrip())
        return EXIT_FAILED
    return EXIT_DONE


def console(argv: list[str] | None = None) -> int:
    """``main`` as a process's entry point (its exit code)."""
    return main(argv)


def entry() -> None:
    """The ``spark-purgatory-job`` console script: a failure is raised as ``SystemExit`` with
    the job's exit code, since Databricks' wheel task ignores what the entry point returns."""
    code = console()
    if code:
        raise SystemExit(code)


if __name__ == "__main__":
    sys.exit(console())
