"""The output's Parquet files: a dictionary on every column (pyarrow's default) against only on
the columns of few values (``sender.dictionary_columns``), on the same rows.

The rows are the outcomes of a micro-batch of the benchmark's workload as the engine emits
them (``workload.generate_confirmations``, one shard), in the table's schema; each file is
written whole to memory, as a shard stages it (snappy, pyarrow's defaults otherwise),
``--runs`` times per layout, the layouts alternated.  Prints the median time and the file's
size per layout, and their ratios.

    .venv/bin/python benchmarks/bench_parquet.py [--ops 20000 --runs 15]
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq

from spark_purgatory.config import PurgatoryConfig
from spark_purgatory.contract import OUTCOMES
from spark_purgatory.delta.sender import dictionary_columns
from spark_purgatory.engine.purgatory import Purgatory
from spark_purgatory.workload import generate_confirmations


def tables(n_ops: int) -> dict[str, pa.Table]:
    """One micro-batch's outcomes (completions, then the rest expired), in the table's schema."""
    import pandas as pd

    work = generate_confirmations(n_ops)
    p = Purgatory(PurgatoryConfig(shards=1, cross_shard_operations=False, dedup_scope="shard"))
    completed = p.process(work.operations, work.events, watermark_ms=0).outcomes
    late = int(work.events["ts"].max()) + 10 * 86_400_000
    expired = p.process(work.operations.iloc[:0], work.events.iloc[:0], watermark_ms=late).outcomes
    frame = pd.concat([completed, expired], ignore_index=True).assign(batch_id=7)
    columns = {}
    for field in OUTCOMES.schema:
        if field.name in ("op_ts", "deadline", "resolved_at"):
            columns[field.name] = pa.array(frame[field.name].to_numpy() * 1000, field.type)
        elif field.name == "emitted_at":
            columns[field.name] = pa.array([1_800_000_000_000_000] * len(frame), field.type)
        elif field.name == "resolved_date":
            days = frame["resolved_at"].to_numpy() // 86_400_000
            columns[field.name] = pa.array(days.astype("int32"), pa.int32()).cast(field.type)
        else:
            columns[field.name] = pa.array(frame[field.name].tolist(), field.type)
    return {OUTCOMES.name: pa.table(columns, schema=OUTCOMES.schema)}


def write(table: pa.Table, dictionary: bool | list[str]) -> tuple[float, int]:
    buffer = io.BytesIO()
    start = time.perf_counter()
    writer = pq.ParquetWriter(buffer, table.schema, compression="snappy", use_dictionary=dictionary)
    writer.write_table(table)
    writer.close()
    return (time.perf_counter() - start) * 1000, len(buffer.getvalue())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=20_000, help="operations in the micro-batch")
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args(argv)
    layouts = {"every column": True, "few values": None}
    print(f"{args.ops:,} operations' micro-batch, snappy, written to memory, median of {args.runs}")
    print(
        f"{'table':<18}{'rows':>8}"
        + "".join(f"{name + ' ms':>18}{'bytes':>12}" for name in layouts)
        + f"{'time':>8}{'size':>8}"
    )
    for name, table in tables(args.ops).items():
        times: dict[str, list[float]] = {layout: [] for layout in layouts}
        sizes: dict[str, int] = {}
        for _ in range(args.runs):
            for layout, dictionary in layouts.items():
                took, size = write(
                    table, dictionary if dictionary is not None else dictionary_columns(table.schema)
                )
                times[layout].append(took)
                sizes[layout] = size
        medians = {layout: statistics.median(v) for layout, v in times.items()}
        cells = "".join(f"{medians[layout]:>18.2f}{sizes[layout]:>12,}" for layout in layouts)
        ratio_t = medians["few values"] / medians["every column"]
        ratio_s = sizes["few values"] / sizes["every column"]
        print(f"{name:<18}{table.num_rows:>8,}{cells}{ratio_t:>7.2f}x{ratio_s:>7.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
