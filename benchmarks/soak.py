"""Soak: the job on Kafka input with a processing-time trigger under steady load, for minutes,
while faults are injected at random (not run in CI).

A feeder writes, every second, the operations created in that second (``--rate`` per second,
30 s timeouts, ~70 % confirmed by one event) and the events whose time has come, stamped with
the wall clock, so the watermark follows real time: to two topics (2 partitions each) of a
Kafka broker on loopback (``spark_purgatory.kafka_broker.KafkaBroker``, its data kept across
its restarts) through one idempotent producer that buffers while the broker is away, or to
files (``--input files``).  The job runs as a subprocess (a process group of its own) with
``processing-time=2s``; its output tables and the accumulator's staging go to an
S3-compatible server (moto) behind a fault-injecting proxy (``testbed.services.S3Store``,
``testbed.services.FaultyProxy``) when store faults are on, else to local disk.

Faults (``--faults``, each switchable; seeded by ``--seed``), one at a time, on average every
``--fault-every`` seconds:

* ``kill``: ``kill -9`` of the job's whole process group (Python driver, JVM, workers), then
  a new start on the same checkpoint, as a supervisor would;
* ``broker``: the broker stopped and started again a few seconds later, or frozen
  (``KafkaBroker.pause``) for up to half a minute;
* ``store``: a share of the object store's requests answered ``503 SlowDown`` for a while.

Every ``--report`` seconds the script prints pending operations (from the job's progress
line), the checkpoint's size on disk, the resident memory of each kind of process (the Python
driver, the driver JVM, the Python workers) and the JVM's heap, committed and used (``jstat``),
and the batches so far.  A job that exits on its own (its restart policy exhausted) is
started again and counted.

Then the job is stopped with SIGTERM (a clean stop: lingering rows committed), run once more
with ``--end-input`` (every operation still pending expires at its deadline), and the
``outcomes`` table is compared with the engine's reference over every row the topics hold
(``Purgatory.replay``; the watermark delay covers the feed and the outages, so no row is late
and the split does not matter): how many outcomes are lost, duplicated or differing, and how
many rows rejected.

    nice -n 10 .venv/bin/python -m benchmarks soak --minutes 10 --rate 200
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

from benchmarks import harness
from benchmarks.harness import jvm_pid, rss_by_kind

ROOT = str(harness.ROOT)
JOB = os.path.join(ROOT, "jobs", "purgatory_job.py")
FAULTS = ("kill", "broker", "store")
KINDS = ("python driver", "driver JVM", "python workers")
#: a report line's figures (memory in MB), as the JSON output names them
REPORT_COLUMNS = ("t_s", "pending", "state_mb", *KINDS, "heap_committed_mb", "heap_used_mb")
TOPICS = ("ops", "events")


def iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


class Feed:
    """Each second's operations and due events, to topics (``broker``) or to files."""

    def __init__(self, root: str, rate: int, broker=None, timeout_ms: int = 30_000) -> None:
        self.root, self.rate, self.timeout_ms = root, rate, timeout_ms
        self.stop = threading.Event()
        self.producer = None
        if broker is not None:
            from confluent_kafka import Producer

            # idempotent: a batch resent after a broker restart is written once; buffered
            # (for ten minutes) while the broker is away
            self.producer = Producer(
                {
                    "bootstrap.servers": broker.bootstrap_servers,
                    "enable.idempotence": True,
                    "linger.ms": 50,
                    "message.timeout.ms": 600_000,
                    "queue.buffering.max.messages": 2_000_000,
                    "log_level": 2,  # not a line per refused connection while the broker is away
                }
            )
        else:
            for sub in TOPICS:
                os.makedirs(os.path.join(root, sub))
        self.failed: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, error, _message) -> None:
        if error is not None:
            self.failed.append(str(error))

    def _write(self, sub: str, lines: list[str], now: int) -> None:
        if self.producer is not None:
            for line in lines:
                while True:
                    try:
                        self.producer.produce(sub, line, on_delivery=self._delivered)
                        break
                    except BufferError:
                        self.producer.poll(0.1)
            self.producer.poll(0)
            return
        tmp = os.path.join(self.root, f".{sub}-{now}.json")
        with open(tmp, "w") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(tmp, os.path.join(self.root, sub, f"part-{now}.json"))

    def _run(self) -> None:
        rng = np.random.default_rng(0)
        future: list[tuple[int, str]] = []
        n = 0
        while not self.stop.is_set():
            now = int(time.time() * 1000)
            ts = np.sort(now - 1000 + rng.integers(0, 1000, self.rate))
            ops = []
            for t in ts:
                op_id = f"op-{n}"
                n += 1
                ops.append(
                    json.dumps(
                        {"op_id": op_id, "keys": [op_id], "ts": iso(int(t)), "timeout_ms": self.timeout_ms}
                    )
                )
                if rng.random() < 0.7:
                    future.append((int(t) + int(rng.integers(0, int(0.9 * self.timeout_ms))), op_id))
            due = [e for e in future if e[0] < now]
            future = [e for e in future if e[0] >= now]
            events = [json.dumps({"key": k, "ts": iso(t)}) for t, k in sorted(due)]
            for sub, lines in (("ops", ops), ("events", events)):
                if lines:  # an empty line would be a row, rejected malformed_json (the contract)
                    self._write(sub, lines, now)
            self.stop.wait(max(0.0, 1.0 - (time.time() * 1000 - now) / 1000))

    def finish(self) -> None:
        """Stop feeding; every record buffered is delivered before this returns."""
        self.stop.set()
        self.thread.join()
        if self.producer is not None:
            left = self.producer.flush(300)
            if left or self.failed:
                print(f"feeder: {left} records undelivered, errors {self.failed[:3]}")


def tree_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def jvm_heap_mb(pid: int | None) -> tuple[float, float]:
    """The JVM's heap (MB), committed and used, from ``jstat -gc`` (NaN when it cannot say)."""
    if pid is None or shutil.which("jstat") is None:
        return float("nan"), float("nan")
    try:
        out = subprocess.run(["jstat", "-gc", str(pid)], capture_output=True, text=True, timeout=20).stdout
        names, values = out.split("\n")[:2]
        gc = {
            k: float(v)
            for k, v in zip(names.split(), values.split(), strict=False)
            if v.replace(".", "").isdigit()
        }
        committed = sum(gc.get(k, 0.0) for k in ("S0C", "S1C", "EC", "OC"))
        used = sum(gc.get(k, 0.0) for k in ("S0U", "S1U", "EU", "OU"))
        return committed / 1024, used / 1024
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return float("nan"), float("nan")


class Job:
    """The job as a subprocess in a process group of its own, started again after a kill."""

    def __init__(self, args: list[str], log_path: str, env: dict[str, str]) -> None:
        self.args, self.log_path, self.env = args, log_path, env
        self.process: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> None:
        with open(self.log_path, "a") as log:
            log.write(f"\n==== soak: start {self.starts + 1} ====\n")
            log.flush()
            self.process = subprocess.Popen(
                [sys.executable, JOB, *self.args, "--trigger", "processing-time=2s"],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        self.starts += 1

    def kill(self) -> None:
        """``kill -9`` of the whole group: driver, JVM, workers at once."""
        assert self.process is not None
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()

    def exited(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def stop(self, timeout: float = 180) -> int:
        """SIGTERM (the job's clean stop), then the group's SIGKILL if it is still there."""
        assert self.process is not None
        self.process.terminate()
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.process.returncode
        finally:
            try:  # nothing of the group outlives it (the JVM follows its driver)
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class Faults:
    """Seeded faults, one at a time, every kind once per round in a random order: each
    begins, and (broker, store) ends a while later."""

    def __init__(self, kinds: list[str], every: float, seed: int, job: Job, broker, proxy) -> None:
        self.kinds, self.every = kinds, every
        self.rng = np.random.default_rng(seed)
        self.job, self.broker, self.proxy = job, broker, proxy
        self.counts = dict.fromkeys(("kill", "broker restart", "broker pause", "store 503s"), 0)
        self.next_at = time.time() + self._gap()
        self.heal_at: float | None = None
        self.round: list[str] = []
        self.heal = None

    def _gap(self) -> float:
        return float(self.rng.uniform(0.5, 1.5) * self.every) if self.kinds else float("inf")

    def step(self, elapsed: float) -> None:
        now = time.time()
        if self.heal is not None and now >= self.heal_at:
            self.heal()
            self.heal = None
            self.next_at = time.time() + self._gap()
        if self.heal is not None or now < self.next_at:
            return
        if not self.round:  # every kind once per round, in a seeded order
            self.round = [self.kinds[i] for i in self.rng.permutation(len(self.kinds))]
        kind = self.round.pop()
        if kind == "kill":
            self.counts["kill"] += 1
            print(f"{elapsed:>6.0f}  fault: kill -9 of the job, started again")
            self.job.kill()
            self.job.start()
            self.next_at = time.time() + self._gap()
        elif kind == "broker" and self.rng.random() < 0.5:
            down = float(self.rng.uniform(5, 20))
            self.counts["broker restart"] += 1
            print(f"{elapsed:>6.0f}  fault: broker stopped for {down:.0f} s, then started")
            self.broker.stop()
            self.heal, self.heal_at = self.broker.start, now + down
        elif kind == "broker":
            frozen = float(self.rng.uniform(10, 30))
            self.counts["broker pause"] += 1
            print(f"{elapsed:>6.0f}  fault: broker frozen (SIGSTOP) for {frozen:.0f} s")
            self.broker.pause()
            self.heal, self.heal_at = self.broker.resume, now + frozen
        else:
            rate, length = float(self.rng.uniform(0.05, 0.3)), float(self.rng.uniform(20, 90))
            self.counts["store 503s"] += 1
            print(
                f"{elapsed:>6.0f}  fault: {rate:.0%} of store requests answered 503 SlowDown "
                f"for {length:.0f} s"
            )
            self.proxy.slow_down(rate)
            self.heal, self.heal_at = self.proxy.heal, now + length

    def end(self) -> None:
        if self.heal is not None:
            self.heal()
            self.heal = None


def topic_lines(broker, topic: str) -> list[dict]:
    """Every record ``topic`` holds, read from the start to its end offsets."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": f"soak-{time.time_ns()}",
            "enable.auto.commit": False,
        }
    )
    try:
        partitions = broker.admin().list_topics(topic, timeout=30).topics[topic].partitions
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        rows, todo = [], {p for p, end in ends.items() if end > 0}
        while todo:
            message = consumer.poll(10)
            if message is None or message.error():
                continue
            rows.append(json.loads(message.value()))
            if message.offset() + 1 >= ends[message.partition()]:
                todo.discard(message.partition())
        return rows
    finally:
        consumer.close()


def file_lines(directory: str) -> list[dict]:
    rows = []
    for name in sorted(os.listdir(directory)):
        if name.startswith("part-"):
            with open(os.path.join(directory, name), encoding="utf-8") as f:
                rows += [json.loads(line) for line in f if line.strip()]
    return rows


def exactly_once(job: Job, written, out: str, settings: dict[str, str], storage) -> dict:
    """End the input in one more run, then compare ``outcomes`` with the engine's replay of
    every row written: (op_id, status, resolved_at) per operation, each once."""
    import pandas as pd

    from spark_purgatory import read_table
    from spark_purgatory.config import read_settings
    from spark_purgatory.engine.purgatory import Purgatory
    from spark_purgatory.job import split_settings

    ended = subprocess.run(
        [sys.executable, JOB, *job.args, "--trigger", "available-now", "--end-input"],
        capture_output=True,
        text=True,
        env=job.env,
    )
    ops, events = (pd.DataFrame(written(kind)) for kind in TOPICS)
    sets = [
        f"{k}={v}" for k, v in settings.items() if not k.startswith(("job.", "kafka.", "source.", "storage."))
    ]
    _, _, config = split_settings(read_settings([os.path.join(ROOT, "conf", "local.conf")], sets))
    expected = Purgatory(config).replay(ops, events, final_watermark_ms=2**62).outcomes
    want = {r.op_id: (r.status, int(r.resolved_at)) for r in expected.itertuples()}
    table = read_table(f"{out}/outcomes", storage=storage).to_pandas()
    got: dict[str, list[tuple[str, int]]] = {}
    for r in table.itertuples():
        got.setdefault(r.op_id, []).append((r.status, pd.Timestamp(r.resolved_at).value // 1_000_000))
    rejected = read_table(f"{out}/rejected", storage=storage).to_pandas()
    for r in rejected.head(3).itertuples():
        print(f"   rejected: {r.source} {r.reason} {str(r.raw)[:80]!r}")
    return {
        "code": ended.returncode,
        "tail": ended.stderr[-2000:],
        "operations": len(ops),
        "outcomes": len(table),
        "lost": len(set(want) - set(got)),
        "duplicated": sum(len(v) - 1 for v in got.values()),
        "differing": sum(1 for k, v in got.items() if want.get(k) != v[0]),
        "rejected": len(rejected),
    }


def commits_an_hour(out: str, storage, minutes: float) -> dict[str, tuple[float, float]]:
    """Each output table's commits of rows and data files so far, scaled to an hour of this
    run: what ``accumulator.linger.ms`` trades against how fresh the tables are."""
    from deltalake import DeltaTable

    from spark_purgatory.contract import TABLES

    scale = 60 / minutes
    found = {}
    for table in TABLES:
        uri = f"{out}/{table}"
        try:
            delta = DeltaTable(uri, storage_options=storage.delta_options(uri) if storage else None)
        except Exception:  # noqa: BLE001 - no row yet, no table
            found[table] = (0.0, 0.0)
            continue
        metrics = [c.get("operationMetrics") or {} for c in delta.history()]
        # delta-rs' metric, Spark's: the table's creation and its owner's record add no file
        writes = [m for m in metrics if int(m.get("num_added_files", m.get("numFiles", 0)) or 0) > 0]
        found[table] = (len(writes) * scale, len(delta.file_uris()) * scale)
    return found


def _options(settings: dict[str, str]) -> list[str]:
    return [x for k, v in settings.items() for x in ("--set", f"{k}={v}")]


def main(argv: list[str] | None = None) -> int:  # noqa: PLR0915 - one run, told in order
    parser = harness.parser("soak", __doc__, repeat=None)
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--rate", type=int, default=300, help="operations per second")
    parser.add_argument("--report", type=int, default=30, help="seconds between report lines")
    parser.add_argument("--input", choices=("kafka", "files"), default="kafka")
    parser.add_argument("--faults", default="kill,broker,store", help="of kill,broker,store ('' for none)")
    parser.add_argument("--fault-every", type=float, default=90, help="mean seconds between faults")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--driver-memory", default="", help="the driver JVM's heap (spark.driver.memory)")
    parser.add_argument("--linger-ms", type=int, help="accumulator.linger.ms (the job's default without it)")
    args = parser.parse_args(argv)
    kinds = harness.names(args.faults)
    if args.input != "kafka" and "broker" in kinds:
        kinds.remove("broker")
        print("no broker faults: the input is files")
    unknown = set(kinds) - set(FAULTS)
    if unknown:
        parser.error(f"unknown faults {sorted(unknown)}; known: {','.join(FAULTS)}")
    root = tempfile.mkdtemp(prefix="purgatory-soak-")
    env = dict(os.environ)
    if args.driver_memory:  # after the session's own --conf entries: this one wins
        env["PYSPARK_SUBMIT_ARGS"] = f"--driver-memory {args.driver_memory} pyspark-shell"
    settings = {
        "job.master": "local[2]",
        "source.max.files.per.trigger": "1000",
        # covers the feed's spread and a broker away for half a minute: no row is late
        "watermark.delay": "90 seconds",
        "job.restart.backoff.ms": "2000",
    }
    if args.linger_ms is not None:
        settings["accumulator.linger.ms"] = str(args.linger_ms)
    broker = store = proxy = None
    job = None
    try:
        out = f"{root}/out"
        storage = None
        if "store" in kinds:
            from spark_purgatory.storage import Storage
            from testbed.services import REGION, FaultyProxy, S3Store

            store = S3Store(bucket="purgatory-soak", own_process=True)
            proxy = FaultyProxy(store.endpoint, seed=args.seed)
            env.update(store.env)
            os.environ.update(store.env)  # this process reads the tables back
            through = store.via(proxy.endpoint)
            out = through.uri("out")
            storage = Storage(endpoint=store.endpoint, region=REGION, allow_http=True)
            settings.update(through.settings)
            settings["accumulator.staging.path"] = through.uri("staging", scheme="s3a")
            settings["job.writer"] = "delta-rs"
        if args.input == "kafka":
            from spark_purgatory.kafka_broker import KafkaBroker

            broker = KafkaBroker(data_dir=f"{root}/kafka").start()
            for topic in TOPICS:
                broker.create_topic(topic, partitions=2)
            settings["kafka.bootstrap.servers"] = broker.bootstrap_servers
            settings["source.kafka.startingOffsets"] = "earliest"
        inputs = ["--ops-path", "ops", "--events-path", "events", "--source-format", "kafka"]
        if args.input == "files":
            inputs = ["--ops-path", f"{root}/ops", "--events-path", f"{root}/events"]
        job_args = [
            *inputs,
            *("--output-path", out, "--checkpoint-path", f"{root}/chk"),
            *("--conf", os.path.join(ROOT, "conf", "local.conf")),
            *_options(settings),
        ]
        feed = Feed(root, args.rate, broker)
        feed.thread.start()
        log_path = os.path.join(root, "job.log")
        job = Job(job_args, log_path, env)
        job.start()
        faults = Faults(kinds, args.fault_every, args.seed, job, broker, proxy)
        print(
            f"soak: {args.rate} ops/s for {args.minutes} min from {args.input}, faults {kinds or 'none'} "
            f"(about every {args.fault_every:.0f} s), "
            f"driver memory {args.driver_memory or 'the session default'}; "
            f"job log {log_path}"
        )
        print(
            f"{'t (s)':>6} {'pending':>8} {'state MB':>8} {'py drv':>7} {'JVM':>6} {'heap':>11} "
            f"{'workers':>7} {'total':>6} {'batches':>7}   (memory in MB; heap committed/used)"
        )
        started = time.time()
        rows, exits, next_report = [], 0, started + args.report
        while time.time() - started < args.minutes * 60:
            time.sleep(1)
            elapsed = time.time() - started
            faults.step(elapsed)
            if job.exited() is not None:
                exits += 1
                print(f"{elapsed:>6.0f}  the job exited with {job.exited()}: started again")
                job.start()
            if time.time() < next_report:
                continue
            next_report += args.report
            text = pathlib.Path(log_path).read_text(errors="replace")
            lines = re.findall(r"batch +(\d+) .*?pending +([\d,]+)", text)
            pending = int(lines[-1][1].replace(",", "")) if lines else 0
            rss = rss_by_kind(job.process.pid)
            heap = jvm_heap_mb(jvm_pid(job.process.pid))
            row = (int(elapsed), pending, tree_bytes(f"{root}/chk") / 1e6, *(rss[k] for k in KINDS), *heap)
            rows.append(row)
            print(
                f"{row[0]:>6} {row[1]:>8,} {row[2]:>8.1f} {row[3]:>7.0f} {row[4]:>6.0f} "
                f"{row[6]:>5.0f}/{row[7]:<5.0f} {row[5]:>7.0f} {sum(row[3:6]):>6.0f} {len(lines):>7}"
            )
        faults.end()
        text = pathlib.Path(log_path).read_text(errors="replace")  # errors while running, before the stop
        errors = [line for line in text.splitlines() if " ERROR " in line or "Traceback" in line]
        restarts = len(re.findall(r"restart \d+ of \d+", text))
        commits = commits_an_hour(out, storage, args.minutes)  # the live run's, before the stop's flush
        print(
            f"an hour at linger {settings.get('accumulator.linger.ms', 'default')}: "
            + ", ".join(f"{t} {c:,.0f} commits {f:,.0f} files" for t, (c, f) in commits.items())
        )
        feed.finish()
        code = job.stop()
        half = rows[len(rows) // 2 :]
        if half:
            spans = ", ".join(
                f"{name} {min(r[i] for r in half):.0f}-{max(r[i] for r in half):.0f} MB"
                for i, name in ((3, "Python driver"), (4, "JVM"), (6, "heap committed"), (5, "workers"))
            )
            print(
                f"second half: pending {min(r[1] for r in half):,}-{max(r[1] for r in half):,}, "
                f"state {min(r[2] for r in half):.1f}-{max(r[2] for r in half):.1f} MB, {spans}"
            )
        print(
            f"faults: {', '.join(f'{k} {v}' for k, v in faults.counts.items())}; starts of the job "
            f"{job.starts} ({exits} after it exited on its own); restarts by its policy {restarts}; "
            f"errors logged {len(errors)}"
        )
        if proxy is not None:
            print(f"503s the store's clients met, by client: {dict(proxy.injected)}")
        for line in errors[:5]:
            print("  ", line[:200])
        print(f"the job stopped on SIGTERM with {code}; ending the input ...")

        def written(kind: str) -> list[dict]:
            return topic_lines(broker, kind) if broker is not None else file_lines(f"{root}/{kind}")

        check = exactly_once(job, written, store.uri("out") if store else out, settings, storage)
        print(
            f"operations in {check['operations']:,}, outcomes out {check['outcomes']:,}: "
            f"lost {check['lost']}, "
            f"duplicated {check['duplicated']}, differing {check['differing']}; rejected {check['rejected']}"
        )
        if check["code"]:
            print(f"the end-input run exited {check['code']}:\n{check['tail']}")
        failed = bool(errors or check["code"] or check["lost"] or check["duplicated"] or check["differing"])
        figures = {
            "faults": faults.counts,
            "starts": job.starts,
            "exits": exits,
            "restarts": restarts,
            "errors": len(errors),
            "an_hour": {t: {"commits": c, "files": f} for t, (c, f) in commits.items()},
            "report": [dict(zip(REPORT_COLUMNS, row, strict=True)) for row in rows],
            **{k: v for k, v in check.items() if k != "tail"},
        }
        harness.write_json(args.json, "soak", args, figures)
        if failed:
            print(f"kept: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
        return 1 if failed else 0
    finally:
        if job is not None and job.exited() is None:
            job.kill()
        for server in (broker, proxy, store):
            if server is not None:
                server.stop()
