"""The demo: a broker's worth of delayed operations, end to end on local disk.

Generates a workload (with some malformed lines) as JSON files, runs the streaming job into
Delta tables, ends the input, prints a summary and plots next to the tables.
``--engine-only`` runs the engine alone, without Spark.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import pandas as pd

from . import Purgatory
from .charts import plot_metrics
from .config import PurgatoryConfig
from .contract import OUTCOME_COLUMNS
from .workload import Workload, generate, write_json_lines


def run(n_ops: int, batch_ms: int, config: PurgatoryConfig, quiet: bool = False) -> pd.DataFrame:
    work = generate(n_ops, seed=1)
    ops, events = work.operations, work.events
    p = Purgatory(config)
    delay = config.watermark_delay_ms
    start = int(min(ops["ts"].min(), events["ts"].min()))
    end = int(max(ops["ts"].max(), events["ts"].max()))
    outcomes, unmatched, rejected = [], [], []
    wm, batch_id, t0 = -(2**62), 0, time.perf_counter()
    for lo in range(start, end + batch_ms, batch_ms):
        hi = lo + batch_ms
        o = ops[(ops["ts"] >= lo) & (ops["ts"] < hi)]
        e = events[(events["ts"] >= lo) & (events["ts"] < hi)]
        r = p.process(o, e, watermark_ms=wm, batch_id=batch_id)
        outcomes.append(r.outcomes)
        unmatched.append(r.unmatched)
        rejected.append(r.rejected)
        if not quiet and batch_id % 10 == 0:
            print(
                f"batch {batch_id:>4}  in {len(o) + len(e):>6}  pending {p.pending:>7}  "
                f"completed {r.completed:>6}  expired {r.expired:>6}  unmatched {len(r.unmatched):>5}  "
                f"rejected {len(r.rejected):>3}  watermark {pd.Timestamp(max(wm, 0), unit='ms')}"
            )
        wm = max(wm, hi - 1 - delay)
        batch_id += 1
    final = p.process(None, None, watermark_ms=end + config.max_timeout_ms + 1, batch_id=batch_id)
    outcomes.append(final.outcomes)
    unmatched.append(final.unmatched)
    elapsed = time.perf_counter() - t0
    result = pd.concat([f for f in outcomes if len(f)], ignore_index=True)
    lost = sum(len(u) for u in unmatched)
    if not quiet:
        rate = (len(ops) + len(events)) / elapsed
        print(
            f"\n{len(ops):,} operations + {len(events):,} events in {elapsed:.2f} s "
            f"({rate:,.0f} rows/s, one core, {batch_id} micro-batches)"
        )
        print(f"unmatched events: {lost:,}   rejected rows: {sum(len(r) for r in rejected):,}\n")
        summary = result.groupby(["condition", "status"]).agg(
            operations=("op_id", "size"),
            p50_latency_ms=("latency_ms", "median"),
            p99_latency_ms=("latency_ms", lambda s: float(np.percentile(s, 99))),
        )
        print(summary.to_string())
        dupes = result["op_id"].duplicated().sum()
        print(f"\noutcomes: {len(result):,} for {len(ops):,} operations, duplicates: {dupes}")
    return result


def run_pipeline(n_ops: int, out: str, *, files: int = 20, files_per_trigger: int = 2) -> dict:
    """The whole product on local disk: generate input, run the job, read the Delta tables back."""
    work, inputs, tables, chk = demo_input(n_ops, out, files)
    args = [
        "--ops-path",
        f"{inputs}/ops",
        "--events-path",
        f"{inputs}/events",
        "--output-path",
        tables,
        "--checkpoint-path",
        chk,
        "--set",
        f"source.max.files.per.trigger={files_per_trigger}",
        "--set",
        "purgatory.shards=2",
        "--set",
        "watermark.delay=5 seconds",
        "--end-input",  # a bounded input: nothing stays pending (docs/end-of-input.md)
    ]
    return run_job(args, work, tables, chk)


def run_job(args: list[str], work: Workload, tables: str, chk: str) -> dict:
    """Run the job on ``args`` (with the project's ``conf/local.conf`` when it is there) and
    read its tables back: what ``report`` prints."""
    from . import job
    from .delta.reading import read_table
    from .handoff.end_of_input import EndOfInput

    local = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf", "local.conf")
    if os.path.exists(local):
        args = ["--conf", local, *args]
    job.configure_logging("text")  # the job's progress line, one per micro-batch
    started = time.perf_counter()
    totals = job.run(job.parse_args(args))
    elapsed = time.perf_counter() - started
    frames = {
        name: read_table(os.path.join(tables, name)).to_pandas()
        for name in ("outcomes", "unmatched_events", "rejected")
        if os.path.isdir(os.path.join(tables, name, "_delta_log"))
    }
    return {
        "work": work,
        "totals": totals,
        "frames": frames,
        "elapsed": elapsed,
        "tables": tables,
        "ended": EndOfInput(chk).recorded(),
    }


def demo_input(n_ops: int, out: str, files: int) -> tuple[Workload, str, str, str]:
    """The demo's workload written as JSON lines under ``<out>/input`` (``out`` emptied first,
    a few malformed lines among them); returns it with the input, tables and checkpoint paths."""
    import shutil

    shutil.rmtree(out, ignore_errors=True)
    inputs, tables, chk = (os.path.join(out, d) for d in ("input", "tables", "checkpoint"))
    work = generate(n_ops, seed=1, ops_per_second=max(100.0, n_ops / 60))
    print(f"generating {n_ops:,} operations and {len(work.events):,} events into {inputs}")
    write_json_lines(
        work,
        f"{inputs}/ops",
        f"{inputs}/events",
        files=files,
        malformed=max(6, n_ops // 2000),
        progress=_progress_bar(2 * files, "writing input files"),
    )
    return work, inputs, tables, chk


def _progress_bar(total: int, label: str):
    from tqdm import tqdm

    bar = tqdm(total=total, desc=label, unit="file")

    def tick() -> None:
        bar.update(1)
        if bar.n >= total:
            bar.close()

    return tick


def report(result: dict) -> None:
    """Summary table and two PNGs next to the tables."""
    frames, work = result["frames"], result["work"]
    outcomes = frames.get("outcomes", pd.DataFrame(columns=OUTCOME_COLUMNS))
    rows = len(work.operations) + len(work.events)
    print(
        f"\n{len(work.operations):,} operations + {len(work.events):,} events through Spark in "
        f"{result['elapsed']:.1f} s ({rows / result['elapsed']:,.0f} rows/s incl. start-up), "
        f"{result['totals']['commits']} Delta commits"
    )
    summary = outcomes.groupby(["condition", "status"]).agg(
        operations=("op_id", "size"),
        p50_latency_ms=("latency_ms", "median"),
        p99_latency_ms=("latency_ms", lambda s: float(np.percentile(s, 99))),
    )
    print(summary.to_string())
    print(_pending_line(result, outcomes))
    for name, column in (("unmatched_events", "reason"), ("rejected", "reason")):
        frame = frames.get(name)
        counts = frame[column].value_counts().to_dict() if frame is not None else {}
        print(f"{name}: {sum(counts.values()):,} {counts}")
    dupes = int(outcomes["op_id"].duplicated().sum())
    print(f"outcomes: {len(outcomes):,} for {len(work.operations):,} operations, duplicates: {dupes}")
    for path in plot(outcomes, result["tables"]):
        print(f"wrote {path}")
    print(f"wrote {plot_metrics(result['tables'], os.path.join(result['tables'], 'metrics.png'))}")


def _pending_line(result: dict, outcomes: pd.DataFrame) -> str:
    """What is still pending, and why: after the end of input, nothing; the end's own
    micro-batches expired what the inputs' last watermark (the slower one's, Spark's ``min``
    policy) had not reached."""
    pending, ended = result["totals"]["pending"], result.get("ended")
    if ended is None:
        return f"still pending (deadline beyond the final watermark): {pending:,}"
    at_end = outcomes[outcomes["batch_id"] >= ended["batch_id"]]
    return (
        f"still pending: {pending:,} (input ended after micro-batch {ended['batch_id']}: "
        f"{len(at_end):,} operations whose deadline lay beyond the inputs' last watermark "
        "expired at their deadline)"
    )


def plot(outcomes: pd.DataFrame, directory: str) -> list[str]:
    """Latency histogram per condition and outcomes over time, as PNGs in ``directory``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    fig, ax = plt.subplots(figsize=(8, 4.5))
    done = outcomes[outcomes["status"] == "completed"]
    for condition, group in done.groupby("condition"):
        ax.hist(
            group["latency_ms"] / 1000,
            bins=60,
            histtype="step",
            linewidth=1.6,
            label=f"{condition} ({len(group):,})",
        )
    ax.set(
        xlabel="latency (s, event time)",
        ylabel="completed operations",
        title="Completion latency by condition",
    )
    ax.legend()
    fig.tight_layout()
    paths.append(os.path.join(directory, "latency_histogram.png"))
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 4.5))
    if len(outcomes):
        per_second = outcomes.assign(second=pd.to_datetime(outcomes["resolved_at"]).dt.floor("s"))
        counts = per_second.groupby(["second", "status"]).size().unstack(fill_value=0)
        counts.plot(ax=ax, drawstyle="steps-post")
    ax.set(xlabel="resolved at (event time)", ylabel="outcomes per second", title="Outcomes over time")
    fig.tight_layout()
    paths.append(os.path.join(directory, "outcomes_over_time.png"))
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=30_000, help="number of operations")
    parser.add_argument("--out", default="demo-output", help="where input, tables, checkpoint and PNGs go")
    parser.add_argument("--files", type=int, default=20, help="input files per stream")
    parser.add_argument("--engine-only", action="store_true", help="run the Spark-free engine only")
    parser.add_argument(
        "--batch-ms", type=int, default=2_000, help="(engine-only) event time per micro-batch"
    )
    args = parser.parse_args(argv)
    if args.engine_only:
        run(args.ops, args.batch_ms, PurgatoryConfig(max_timeout_ms=60_000))
        return
    report(run_pipeline(args.ops, args.out, files=args.files))


if __name__ == "__main__":
    main()
