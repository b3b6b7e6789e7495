"""Soak: the job with a processing-time trigger under steady load, for minutes (not run in CI).

A feeder writes, every second, the operations created in that second (``--rate`` per second,
30 s timeouts, ~70 % confirmed by one event) and the events whose time has come, stamped with
the wall clock, so the watermark follows real time.  The job runs as a subprocess with
``processing-time=2s``.  Every ``--report`` seconds the script prints pending operations
(from the job's progress line), the checkpoint's size on disk, the job's resident memory
(driver + Python workers) and the outcome rows committed so far; at the end, whether the
job logged any error.  Pending and state size should level off after one timeout.

Then the job is stopped with SIGTERM (a clean stop: lingering rows committed), run once more
with ``--end-input`` (every operation still pending expires at its deadline), and the
``outcomes`` table is compared with the engine's reference over every row the feeder wrote
(``Purgatory.replay``; the delay covers the feed, so no row is late and the split does not
matter): how many outcomes are lost, duplicated or differing, and how many rows rejected.

    .venv/bin/python benchmarks/soak.py --minutes 10 --rate 500
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.procfs import tree_rss_mb  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOB = os.path.join(ROOT, "jobs", "purgatory_job.py")


def iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


def feeder(root: str, rate: int, stop: threading.Event, timeout_ms: int = 30_000) -> None:
    rng = np.random.default_rng(0)
    future: list[tuple[int, str]] = []
    n = 0
    while not stop.is_set():
        now = int(time.time() * 1000)
        ts = np.sort(now - 1000 + rng.integers(0, 1000, rate))
        ops = []
        for t in ts:
            op_id = f"op-{n}"
            n += 1
            ops.append(
                json.dumps({"op_id": op_id, "keys": [op_id], "ts": iso(int(t)), "timeout_ms": timeout_ms})
            )
            if rng.random() < 0.7:
                future.append((int(t) + int(rng.integers(0, int(0.9 * timeout_ms))), op_id))
        due = [e for e in future if e[0] < now]
        future = [e for e in future if e[0] >= now]
        events = [json.dumps({"key": k, "ts": iso(t)}) for t, k in sorted(due)]
        for sub, lines in (("ops", ops), ("events", events)):
            if not lines:  # an empty line would be a row, rejected malformed_json (the contract)
                continue
            tmp = os.path.join(root, f".{sub}-{now}.json")
            with open(tmp, "w") as f:
                f.write("\n".join(lines) + "\n")
            os.replace(tmp, os.path.join(root, sub, f"part-{now}.json"))
        stop.wait(max(0.0, 1.0 - (time.time() * 1000 - now) / 1000))


def tree_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def _job_args(root: str) -> list[str]:
    return [
        *("--ops-path", f"{root}/ops", "--events-path", f"{root}/events"),
        *("--output-path", f"{root}/out", "--checkpoint-path", f"{root}/chk"),
        *("--conf", os.path.join(ROOT, "conf", "local.conf")),
        *("--set", "source.max.files.per.trigger=1000", "--set", "job.master=local[2]"),
    ]


def _lines(directory: str) -> list[dict]:
    rows = []
    for name in sorted(os.listdir(directory)):
        if name.startswith("part-"):
            with open(os.path.join(directory, name), encoding="utf-8") as f:
                rows += [json.loads(line) for line in f if line.strip()]
    return rows


def exactly_once(root: str, args: list[str]) -> dict:
    """End the input in one more run, then compare ``outcomes`` with the engine's replay of
    every row written: (op_id, status, resolved_at) per operation, each once."""
    import pandas as pd

    from spark_purgatory import read_table
    from spark_purgatory.config import read_settings
    from spark_purgatory.engine.purgatory import Purgatory
    from spark_purgatory.job import split_settings

    ended = subprocess.run(
        [sys.executable, JOB, *args, "--trigger", "available-now", "--end-input"],
        capture_output=True,
        text=True,
    )
    ops, events = pd.DataFrame(_lines(f"{root}/ops")), pd.DataFrame(_lines(f"{root}/events"))
    _, _, config = split_settings(read_settings([os.path.join(ROOT, "conf", "local.conf")], []))
    expected = Purgatory(config).replay(ops, events, final_watermark_ms=2**62).outcomes
    want = {r.op_id: (r.status, int(r.resolved_at)) for r in expected.itertuples()}
    table = read_table(f"{root}/out/outcomes").to_pandas()
    got: dict[str, list[tuple[str, int]]] = {}
    for r in table.itertuples():
        got.setdefault(r.op_id, []).append((r.status, pd.Timestamp(r.resolved_at).value // 1_000_000))
    rejected = read_table(f"{root}/out/rejected").to_pandas()
    for r in rejected.head(3).itertuples():
        print(f"   rejected: {r.source} {r.reason} {str(r.raw)[:80]!r}")
    return {
        "code": ended.returncode,
        "operations": len(ops),
        "outcomes": len(table),
        "lost": len(set(want) - set(got)),
        "duplicated": sum(len(v) - 1 for v in got.values()),
        "differing": sum(1 for k, v in got.items() if want.get(k) != v[0]),
        "rejected": len(rejected),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--rate", type=int, default=500, help="operations per second")
    parser.add_argument("--report", type=int, default=30, help="seconds between report lines")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="purgatory-soak-")
    for sub in ("ops", "events"):
        os.makedirs(os.path.join(root, sub))
    stop = threading.Event()
    feed = threading.Thread(target=feeder, args=(root, args.rate, stop), daemon=True)
    feed.start()
    log_path = os.path.join(root, "job.log")
    with open(log_path, "w") as log:
        job = subprocess.Popen(
            [sys.executable, JOB, *_job_args(root), "--trigger", "processing-time=2s"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    print(f"soak: {args.rate} ops/s for {args.minutes} min; job log {log_path}")
    print(f"{'t (s)':>6} {'pending':>9} {'state MB':>9} {'RSS MB':>8} {'batches':>8}")
    started = time.time()
    rows = []
    while time.time() - started < args.minutes * 60:
        time.sleep(args.report)
        text = open(log_path, errors="replace").read()
        lines = re.findall(r"batch +(\d+) .*?pending +([\d,]+)", text)
        pending = int(lines[-1][1].replace(",", "")) if lines else 0
        row = (
            int(time.time() - started),
            pending,
            tree_bytes(f"{root}/chk") / 1e6,
            tree_rss_mb(job.pid),
            len(lines),
        )
        rows.append(row)
        print(f"{row[0]:>6} {row[1]:>9,} {row[2]:>9.1f} {row[3]:>8.0f} {row[4]:>8}")
        if job.poll() is not None:
            print(f"the job exited early with {job.returncode}")
            break
    text = open(log_path, errors="replace").read()  # errors while running, before the stop
    errors = [line for line in text.splitlines() if " ERROR " in line or "Traceback" in line]
    stop.set()
    job.terminate()
    job.wait(timeout=120)
    half = rows[len(rows) // 2 :]
    print(
        f"second half: pending {min(r[1] for r in half):,}-{max(r[1] for r in half):,}, "
        f"state {min(r[2] for r in half):.1f}-{max(r[2] for r in half):.1f} MB, "
        f"RSS {min(r[3] for r in half):.0f}-{max(r[3] for r in half):.0f} MB; errors logged: {len(errors)}"
    )
    for line in errors[:5]:
        print("  ", line[:200])
    print(f"the job stopped on SIGTERM with {job.returncode}; ending the input ...")
    check = exactly_once(root, _job_args(root))
    print(
        f"outcomes {check['outcomes']:,} of {check['operations']:,} operations: lost {check['lost']}, "
        f"duplicated {check['duplicated']}, differing {check['differing']}; rejected {check['rejected']}"
    )
    errors += [f"end-input run exited {check['code']}"] if check["code"] else []
    if errors:
        print(f"log kept in {log_path}")
    else:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
