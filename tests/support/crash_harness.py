"""Kill the job with SIGKILL again and again on a steady input; check exactly-once at the end.

Used by the crash tests (``tests/delta/test_crash.py``'s ``PLANS``: one plan per output, every
accumulator fault point killed once per writer, random kills and clean stops among them) and
runnable on its own for longer randomised runs (``--plan`` for a fixed one):

    .venv/bin/python tests/support/crash_harness.py --kills 10 --ops 3000

Before each run a new share of the input files arrives (one pair every few seconds) while the
job runs with a processing-time trigger.  The job is killed (``kill -9``) either at a fault
point inside the accumulator (``faulty_job.py`` runs the job with a hook that kills it at
one of ``FAULT_POINTS``: after the executors staged a batch's files but before the driver
recorded them, before ``staged_through`` moves, after writing a drain manifest, after the
executors wrote a drain's data files but before the commit, or after a Delta commit) or at
a random moment within a few seconds after the run committed its first micro-batch (state
commits, Delta commits and lingering rows all happen at random points in between; a fixed
delay from the start would often hit the JVM's start-up on a loaded machine).  Each run's
output is kept in ``<root>/logs``.  After the last kill an
``available-now`` run drains the rest.  The Delta tables must then hold exactly what the
Spark-free engine computes from the same input: one outcome per resolved operation with the
same status and time, the same unmatched events, and every malformed line once in
``rejected``; the ``metrics`` table has one row per (micro-batch, shard) that ran, none twice,
and its counts add up to those tables and to the input.  Some operations watch two keys on
different shards, so the relay through the mailbox (pairs, notices) is killed at random
points too.

With ``store`` (``tests/support/object_store.S3Store``, or ``--s3`` here) the output tables, the
accumulator's staging and the shard-state segments live on an S3-compatible server on
loopback; with ``checkpoint_on_store`` Spark's own checkpoint too and with ``input_on_store``
the input files (``s3a://``, through hadoop-aws: the query's every byte in the bucket).
With ``kafka`` (a ``spark_purgatory.kafka_broker.KafkaBroker``, or ``--kafka`` here) the
input is two topics: each share of input files is produced to them, line by line, instead of
moved into the directories, and the job reads them through Spark's Kafka source.

With ``writer="spark"`` (``--writer spark``) the job commits through Spark's own Delta writer
(``txnAppId``/``txnVersion``) instead of delta-rs: the native path has no ``written`` point
(Spark writes a drain's data files and commits them in one call), the others are the same.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time

import numpy as np
import pandas as pd
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from spark_purgatory import job as job_module  # noqa: E402
from spark_purgatory.config import PurgatoryConfig, read_properties  # noqa: E402
from spark_purgatory.contract import COUNTS, OUTCOMES, ROW_COUNTS, STATUSES, TABLES  # noqa: E402
from spark_purgatory.delta.accumulator import FAULT_POINTS  # noqa: E402
from spark_purgatory.engine.purgatory import Purgatory  # noqa: E402
from spark_purgatory.workload import generate, write_json_lines  # noqa: E402
from tests.support.clean_stops import _commits, _tail, ride_out, rides_out  # noqa: E402
from tests.support.topic_reader import outcomes_of, read_topic, status_of  # noqa: E402

JOB = os.path.join(ROOT, "jobs", "purgatory_job.py")
FAULTY_JOB = os.path.join(ROOT, "tests", "support", "faulty_job.py")  # the job, killed at a fault point
SETTINGS = {
    "source.max.files.per.trigger": "2",
    "accumulator.batch.size": "65536",
    "accumulator.linger.ms": "2000",
    # shard state in segment files after a few hundred rows: every restart rebuilds from them
    "purgatory.state.segment.rows": "200",
}


def _job(
    args: list[str],
    settings: dict[str, str],
    env: dict[str, str],
    fault: str | None = None,
    log: str | None = None,
    cwd: str | None = None,
    own_group: bool = False,
) -> subprocess.Popen:
    """The job in a subprocess; with ``fault`` (``<point>:<n>``) it kills itself there.

    Its standard error is a pipe (``communicate()`` it), or with ``log`` the file ``log + ".err"``
    and its standard output ``log + ".out"`` (nothing to drain while it runs or is killed).
    ``cwd``: its working directory (this process's by default).  ``own_group``: in a process
    group of its own, as a terminal's foreground job is (a Ctrl-C reaches the whole group).
    """
    if log is not None:
        os.makedirs(os.path.dirname(log), exist_ok=True)
        out, err = open(f"{log}.out", "w"), open(f"{log}.err", "w")  # noqa: SIM115 - the child's
    else:
        out, err = subprocess.DEVNULL, subprocess.PIPE
    try:
        return subprocess.Popen(
            [
                sys.executable,
                FAULTY_JOB if fault else JOB,
                *args,
                *job_options(settings),
            ],
            env={**os.environ, **env, **({"PURGATORY_FAULT": fault} if fault else {})},
            stdout=out,
            stderr=err,
            text=True,
            cwd=cwd,
            start_new_session=own_group,
        )
    finally:
        if log is not None:
            out.close()
            err.close()


def _job_here(args: list[str], settings: dict[str, str]) -> dict:
    """The job's ``run`` in this process, on its Spark session (a run never killed): its totals."""
    return job_module.run(job_module.parse_args([*args, *job_options(settings)]))


def job_options(settings: dict[str, str]) -> list[str]:
    """The job's configuration options: the local profile, ``settings`` over it, local[2]."""
    extra = [x for k, v in settings.items() for x in ("--set", f"{k}={v}")]
    return ["--conf", os.path.join(ROOT, "conf", "local.conf"), *extra, "--set", "job.master=local[2]"]


def _kill_after_a_commit(
    job: subprocess.Popen, checkpoint: str, delay: float, timeout: float, store=None
) -> bool:
    """Kill -9 ``job`` ``delay`` seconds after it committed a micro-batch of its own (its
    start-up took however long it took); False if it committed none within ``timeout``."""
    before, deadline = _commits(checkpoint, store), time.monotonic() + timeout
    while _commits(checkpoint, store) == before and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    committed = _commits(checkpoint, store) > before
    if committed:
        time.sleep(delay)  # somewhere in the next micro-batches, linger drains, state commits
    job.kill()
    job.wait()
    return committed


def reference(work, config: PurgatoryConfig) -> tuple[pd.DataFrame, pd.DataFrame]:
    """What the job must end with: the engine over everything, then the job's final watermark."""
    result = replayed(work, config)
    return result.outcomes, result.unmatched


def input_rows(work, malformed: int) -> tuple[int, int]:
    """The rows the job reads from ``write_json_lines(work, ..., malformed=malformed)``'s files,
    (operations, events): it puts the even-numbered malformed lines in the operation files."""
    return len(work.operations) + (malformed + 1) // 2, len(work.events) + malformed // 2


def replayed(work, config: PurgatoryConfig):
    """The engine over ``work`` to the job's final watermark: its outcomes, unmatched events and
    warnings."""
    # a watermark per input; the job's is the slower input's (Spark's `min` policy)
    final = int(min(work.operations["ts"].max(), work.events["ts"].max())) - config.watermark_delay_ms
    return Purgatory(config).replay(work.operations, work.events, final_watermark_ms=final)


def _placement(root: str, store) -> tuple[str, dict[str, str], dict[str, str], dict | None]:
    """Where the project writes (output root, extra settings, environment, delta-rs options)."""
    if store is None:
        return os.path.join(root, "out"), dict(SETTINGS), {}, None
    run = os.path.basename(root)  # a prefix of its own in the bucket
    settings = {
        **SETTINGS,
        **store.settings,
        "purgatory.state.path": store.uri(run, "state"),
        "accumulator.staging.path": store.uri(run, "staging", scheme="s3a"),
    }
    return store.uri(run, "out"), settings, store.env, store.storage_options


def run(
    root: str,
    *,
    n_ops: int,
    files: int,
    plan: list[str],
    feed_seconds: float,
    seed: int,
    store=None,
    kafka=None,
    writer: str = "auto",
    checkpoint_on_store: bool = False,
    input_on_store: bool = False,
    extra: dict[str, str] | None = None,
    final_in_process: bool = False,
    output_topic=None,
) -> dict:
    """Kill the job as ``plan`` says, then drain; the tables and the reference to ``check``.

    ``store``: the output tables, the staging and the segments in its bucket; with
    ``checkpoint_on_store`` Spark's checkpoint too and with ``input_on_store`` the input files,
    each uploaded whole when it arrives (``s3a://``: hadoop-aws).  ``extra``: settings
    over ``SETTINGS`` (the reference reads them too).  ``kafka``: the
    input on two topics of that broker instead of files.  Every job run works in
    ``<root>/cwd``, empty at the start; what it holds at the end is ``cwd_files``.
    ``output_topic`` (a ``KafkaBroker``): the outcomes and rejected rows also go to a topic of
    its own there (``output.kafka.*``), read back with ``read_committed`` at the end (``check``).
    ``final_in_process``: the last run (the drain, never killed) is ``job.run`` in this
    process, on its Spark session, as ``test_job`` runs it: a restart from the checkpoint all
    the same, without a JVM of its own to start (on these 2 cores a job run's JVM start and
    warm-up are most of its CPU).  Its working directory is this process's, so ``cwd_files``
    then covers the killed runs only.
    """
    rng = random.Random(seed)
    out, settings, env, storage_options = _placement(root, store)
    settings["job.writer"] = writer  # spark: Delta's own writer (make jars put it on the class path)
    settings.update(extra or {})  # the test's own settings over SETTINGS
    if output_topic is not None:
        topic = output_topic.create_topic(f"{os.path.basename(root)}-outcomes", partitions=2)
        settings.update(
            {
                "output.kafka.topic": topic,
                "output.kafka.bootstrap.servers": output_topic.bootstrap_servers,
                "output.kafka.statuses": "expired,completed,cancelled,rejected,warning",
                "output.kafka.linger.ms": "20",
            }
        )
    shutil.rmtree(root, ignore_errors=True)
    staged_in = os.path.join(root, "pending-input")
    # 5% of the operations watch two keys (with 2 shards about half of them span both): their
    # pairs and notices cross between groups through the mailbox, across every kill; a third ask
    # for a warning, a twentieth are withdrawn
    work = generate(n_ops, seed=seed, ops_per_second=100, multi_key=0.05, warned=0.3, withdrawn=0.05)
    malformed = 6
    write_json_lines(work, f"{staged_in}/ops", f"{staged_in}/events", files=files, malformed=malformed)
    if input_on_store:
        ops_dir, ev_dir = (store.uri(os.path.basename(root), k, scheme="s3a") for k in ("ops", "events"))
    else:
        ops_dir, ev_dir = os.path.join(root, "ops"), os.path.join(root, "events")
        os.makedirs(ops_dir)
        os.makedirs(ev_dir)
    cwd = os.path.join(root, "cwd")  # nothing may be written relative to it
    os.makedirs(cwd)
    if checkpoint_on_store:
        checkpoint, spark_store = store.uri(os.path.basename(root), "chk", scheme="s3a"), store
    else:
        checkpoint, spark_store = os.path.join(root, "chk"), None
    args = [
        "--ops-path",
        ops_dir,
        "--events-path",
        ev_dir,
        "--output-path",
        out,
        "--checkpoint-path",
        checkpoint,
    ]

    if kafka is not None:  # two topics of their own on the broker, read from the start
        topics = {kind: kafka.create_topic(f"{os.path.basename(root)}-{kind}") for kind in ("ops", "events")}
        args[1], args[3] = topics["ops"], topics["events"]
        args += ["--source-format", "kafka"]
        settings = {
            **settings,
            "kafka.bootstrap.servers": kafka.bootstrap_servers,
            "source.kafka.startingOffsets": "earliest",
        }
    delivered = 0

    def deliver(count: int, spread: bool = True) -> None:
        nonlocal delivered
        for i in range(delivered, min(files, delivered + count)):
            name = f"part-{i:05d}.json"
            for kind, directory in (("ops", ops_dir), ("events", ev_dir)):
                if kafka is None and not input_on_store:
                    os.replace(os.path.join(staged_in, kind, name), os.path.join(directory, name))
                    continue
                with open(os.path.join(staged_in, kind, name), "rb") as f:
                    data = f.read()
                if kafka is not None:
                    kafka.produce(topics[kind], data.splitlines())
                else:
                    store.put(f"{os.path.basename(root)}/{kind}/{name}", data)
            if spread:
                time.sleep(feed_seconds)  # spread over time: several micro-batches per run
        delivered = min(files, delivered + count)

    per_step = -(-files // (len(plan) + 1))
    kills = []
    for number, step in enumerate(plan):
        # new input for every run, so each run stages, drains and commits before its kill
        feeder = threading.Thread(target=deliver, args=(per_step,), daemon=True)
        feeder.start()
        started, log = time.monotonic(), os.path.join(root, "logs", f"run-{number}")
        trigger = ["--trigger", "processing-time=1s"]
        if rides_out(step):  # runs that ride a fault out or must end cleanly

            def more_input(feeder: threading.Thread = feeder) -> None:  # after an outage
                feeder.join()
                deliver(1, spread=False)

            def start_job(
                chosen: dict[str, str], fault: str | None, log: str = log, given: tuple = (*args, *trigger)
            ) -> subprocess.Popen:
                return _job(list(given), chosen, env, fault=fault, log=log, cwd=cwd, own_group=True)

            run_ = ride_out(step, start_job, settings, log, checkpoint, spark_store, kafka, rng, more_input)
            feeder.join()
            kills.append(run_)
            continue
        if step.startswith("fault="):
            job = _job([*args, *trigger], settings, env, fault=step.split("=", 1)[1], log=log, cwd=cwd)
            try:
                job.wait(timeout=900)  # a loaded machine (tests in parallel) takes minutes
                reached = True
            except subprocess.TimeoutExpired:  # never reached the point: kill it anyway
                reached = False
                job.kill()
                job.wait()
        else:  # a random moment once the run is under way
            job = _job([*args, *trigger], settings, env, log=log, cwd=cwd)
            reached = _kill_after_a_commit(
                job, checkpoint, delay=rng.uniform(0, 5), timeout=900, store=spark_store
            )
        feeder.join()
        kill = {"step": step, "returncode": job.returncode, "reached": reached}
        kill["seconds"] = round(time.monotonic() - started, 1)
        if job.returncode != -9:
            kill["stderr"] = _tail(f"{log}.err")
        kills.append(kill)
    deliver(files, spread=False)  # the rest, at once: the last run reads everything there is
    started, log = time.monotonic(), os.path.join(root, "logs", "final")
    if final_in_process:
        _job_here([*args, "--trigger", "available-now"], settings)
    else:
        final = _job([*args, "--trigger", "available-now"], settings, env, log=log, cwd=cwd)
        final.wait(timeout=600)
        if final.returncode != 0:
            raise AssertionError(f"final run failed ({final.returncode}): {_tail(f'{log}.err')}")
    final_seconds = round(time.monotonic() - started, 1)
    topic = None
    if output_topic is not None:
        topic = read_topic(output_topic.bootstrap_servers, settings["output.kafka.topic"])
    return {
        "topic": topic,
        "topic_settings": {k: v for k, v in settings.items() if k.startswith("output.kafka.")},
        "checkpoint": checkpoint,
        "kills": kills,
        "final_seconds": final_seconds,
        "cwd_files": sorted(os.listdir(cwd)),
        **tables_and_reference(work, out, storage_options, settings, malformed),
    }


def tables_and_reference(
    work, out: str, storage_options: dict | None, settings: dict, malformed: int
) -> dict:
    """The output tables under ``out`` and what they must hold (``check``): the engine over
    ``work`` with the job's ``settings`` (over ``conf/local.conf``), ``malformed`` lines as
    ``write_json_lines`` spread them."""
    tables = {name: read_table(f"{out}/{name}", storage_options, name) for name in TABLES}
    config = PurgatoryConfig.from_mapping(
        {
            k: v
            for k, v in {**read_properties(os.path.join(ROOT, "conf", "local.conf")), **settings}.items()
            if not k.startswith(("job.", "kafka.", "source.kafka."))  # the job's own keys
        }
    )
    expected = replayed(work, config)
    return {
        "tables": tables,
        "expected_outcomes": expected.outcomes,
        "expected_unmatched": expected.unmatched,
        "expected_warnings": expected.warnings,
        "malformed": malformed,
        "input_rows": input_rows(work, malformed),
    }


def read_table(path: str, storage_options: dict | None, name: str) -> pd.DataFrame:
    """A table's rows; a table no row was ever written to does not exist yet: no rows."""
    try:
        return DeltaTable(path, storage_options=storage_options).to_pandas()
    except TableNotFoundError:
        return pd.DataFrame(columns=TABLES[name].schema.names)


def check(result: dict) -> None:
    """Exactly once: the tables equal the reference, nothing twice, nothing lost."""
    got = result["tables"]["outcomes"]
    assert got["op_id"].is_unique, "an operation has two outcomes"
    resolved = {
        (r.op_id, r.status, int(pd.Timestamp(r.resolved_at).value // 1_000_000)) for r in got.itertuples()
    }
    exp = result["expected_outcomes"]
    expected = {(r.op_id, r.status, int(r.resolved_at)) for r in exp.itertuples()}
    assert resolved == expected, f"{len(resolved ^ expected)} outcomes differ"
    unmatched = sorted(
        (r.key, int(pd.Timestamp(r.ts).value // 1_000_000), r.reason)
        for r in result["tables"]["unmatched_events"].itertuples()
    )
    expected_unmatched = sorted(
        (r.key, int(r.ts), r.reason) for r in result["expected_unmatched"].itertuples()
    )
    assert unmatched == expected_unmatched, "unmatched events differ"
    assert len(result["tables"]["rejected"]) == result["malformed"], "rejected rows lost or doubled"
    if "expected_warnings" in result:
        warned = result["tables"]["warnings"]
        assert warned["op_id"].is_unique, "an operation warned twice"
        assert _warned(warned) == _warned(result["expected_warnings"]), "warnings differ"
    if "metrics" in result["tables"]:  # callers that read only the three others skip it
        check_metrics(result)
    if result.get("topic") is not None:
        check_topic(result)


def _warned(rows) -> set[tuple[str, int]]:
    """Warnings as (op_id, warned_at in ms): a table's, the engine's (ms) or the topic's values."""
    records = rows.to_dict("records") if isinstance(rows, pd.DataFrame) else rows
    return {(r["op_id"], _ms(r["warned_at"])) for r in records}


def _ms(at) -> int:
    """Epoch ms of the engine's ms, a table's timestamp or the topic's ISO-8601 text."""
    return int(at) if isinstance(at, (int, np.integer)) else int(pd.Timestamp(at).value // 1_000_000)


def check_topic(result: dict) -> None:
    """The output topic, read with ``read_committed``: every outcome of the reference once and
    nothing else, as the table has it to the millisecond; every rejected row once."""
    records = outcomes_of(result["topic"])
    op_ids = [op_id for op_id, _, _ in records]
    assert len(op_ids) == len(set(op_ids)), f"{len(op_ids) - len(set(op_ids))} outcomes twice on the topic"
    got = {(op_id, status, int(pd.Timestamp(at).value // 1_000_000)) for op_id, status, at in records}
    expected = {(r.op_id, r.status, int(r.resolved_at)) for r in result["expected_outcomes"].itertuples()}
    assert got == expected, f"{len(got ^ expected)} outcomes differ on the topic"
    rejected = [m for m in result["topic"] if status_of(m) == "rejected"]
    assert len(rejected) == result["malformed"], "rejected records lost or doubled on the topic"
    warnings = [json.loads(m.value()) for m in result["topic"] if status_of(m) == "warning"]
    assert len(warnings) == len(result["expected_warnings"]), "warnings lost or doubled on the topic"
    assert _warned(warnings) == _warned(result["expected_warnings"]), "warnings differ on the topic"


def check_topic_status(result: dict) -> None:
    """The checkpoint's status (``spark-purgatory status``) names the last micro-batch the output
    topic committed: the last its records came from."""
    from spark_purgatory.inspect import checkpoint_status
    from spark_purgatory.kafka_output.records import HEADER_BATCH

    config = PurgatoryConfig.from_mapping(result["topic_settings"])
    status = checkpoint_status(result["checkpoint"], config=config, state=False)
    last = max(int(dict(m.headers())[HEADER_BATCH]) for m in result["topic"])
    assert status["output_topic"]["last_committed_batch"] == last


def check_metrics(result: dict) -> None:
    """The ``metrics`` table: one row per (micro-batch, shard) that ran, none twice, adding up
    to the other tables and to the input (each micro-batch's rows counted once, kills or not)."""
    tables = result["tables"]
    metrics, outcomes = tables["metrics"], tables["outcomes"]
    assert not metrics.duplicated(["batch_id", "shard"]).any(), "a (batch, shard) metrics row twice"
    wrote = {
        int(b)
        for name in (OUTCOMES.name, *(t.name for t in ROW_COUNTS.values()))
        for b in tables[name]["batch_id"]
    }
    assert wrote <= {int(b) for b in metrics["batch_id"]}, "a micro-batch wrote rows but no metrics row"
    counted = {k: int(metrics[k].sum()) for k in COUNTS}
    assert counted == {
        **{status: int((outcomes["status"] == status).sum()) for status in STATUSES},
        **{name: len(tables[t.name]) for name, t in ROW_COUNTS.items()},
    }, "metrics counts differ from the tables"
    if "input_rows" in result:
        inputs = (int(metrics["input_operations"].sum()), int(metrics["input_events"].sum()))
        assert inputs == result["input_rows"], "metrics input rows differ from the input"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=8)
    parser.add_argument("--ops", type=int, default=3000)
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--root", default="/tmp/purgatory-crash")
    parser.add_argument("--s3", action="store_true", help="tables, staging and segments on moto's S3")
    parser.add_argument("--kafka", action="store_true", help="the input in two topics on a Kafka broker")
    parser.add_argument(
        "--topic", action="store_true", help="the outcomes on an output topic too, read back read_committed"
    )
    parser.add_argument("--plan", default="", help="comma list of steps, e.g. fault=written:1,random")
    parser.add_argument("--writer", default="auto", choices=["auto", "delta-rs", "spark"], help="job.writer")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    points = [f"fault={p}:{2 if p.startswith('stag') else 1}" for p in FAULT_POINTS]
    if args.plan:
        plan = args.plan.split(",")
    else:
        plan = [rng.choice([*points, "random", "random"]) for _ in range(args.kills)]
    started = time.time()
    files = max(args.files, 2 * (args.kills + 1))
    store = kafka = broker = None
    if args.s3:
        from tests.support.object_store import S3Store

        store = S3Store()
    if args.kafka or args.topic:
        from spark_purgatory.kafka_broker import KafkaBroker

        broker = KafkaBroker().start()
        kafka = broker if args.kafka else None
    try:
        result = run(
            args.root,
            n_ops=args.ops,
            files=files,
            plan=plan,
            feed_seconds=2.0,
            seed=args.seed,
            store=store,
            kafka=kafka,
            writer=args.writer,
            output_topic=broker if args.topic else None,
        )
    finally:
        if store is not None:
            store.stop()
        if broker is not None:
            broker.stop()
    check(result)
    killed = sum(1 for k in result["kills"] if k["returncode"] == -9 and k["reached"])
    print(
        f"survived {killed} kill -9 of {len(plan)} planned ({[k['step'] for k in result['kills']]}), "
        f"{len(result['tables']['outcomes'])} outcomes exactly once, in {time.time() - started:.0f} s"
    )


if __name__ == "__main__":
    main()
