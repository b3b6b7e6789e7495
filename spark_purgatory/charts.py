"""Charts from the ``metrics`` table: how the purgatory has been running, batch by batch.

Invariant: a shard that did not run in a micro-batch still holds what it last reported, so
pending (and the other gauges) of a batch is the sum over shards of their latest report.
"""

from __future__ import annotations

import pandas as pd

from .contract import COUNTS, MAX_TS_MS
from .storage import join, location

_COUNTS = ["input_operations", "input_events", *COUNTS]
_GAUGES = ["pending", "watched", "buffered", "state_bytes"]


def metrics_by_batch(output_path: str, *, storage_options: dict[str, str] | None = None) -> pd.DataFrame:
    """One row per micro-batch from ``<output_path>/metrics`` (read with delta-rs).

    Counts are summed over the batch's shard calls; gauges are the sum of each shard's latest
    report; latency columns are the worst shard's; ``*_lag_s`` are the seconds between the
    batch's processing time and each watermark (none for the end of input's watermark).
    """
    from deltalake import DeltaTable

    rows = DeltaTable(location(join(output_path, "metrics")), storage_options=storage_options).to_pandas()
    if rows.empty:
        return pd.DataFrame(columns=["batch_id", "batch_time", *_COUNTS, *_GAUGES])
    # a table of an older contract, not started on since, lacks the counts added later
    rows = rows.reindex(columns=[*rows.columns, *(c for c in _COUNTS if c not in rows)])
    rows = rows.sort_values(["batch_id", "shard"])
    per_batch = rows.groupby("batch_id").agg(
        batch_time=("batch_time", "max"),
        watermark=("watermark", "max"),
        operations_watermark=("operations_watermark", "max"),
        events_watermark=("events_watermark", "max"),
        busiest_share=("busiest_share", "max"),
        latency_p50_ms=("latency_p50_ms", "max"),
        latency_p99_ms=("latency_p99_ms", "max"),
        **{name: (name, "sum") for name in _COUNTS},
    )
    # gauges: each shard's last report carried forward over the batches it did not run in
    for name in _GAUGES:
        per_shard = rows.pivot(index="batch_id", columns="shard", values=name).astype(float)
        per_batch[name] = per_shard.ffill().sum(axis=1)
    ended = per_batch["watermark"] >= pd.Timestamp(MAX_TS_MS, unit="ms", tz="UTC")  # the end of input
    for name in ("watermark", "operations_watermark", "events_watermark"):
        lag = (per_batch["batch_time"] - per_batch[name]).dt.total_seconds()
        per_batch[f"{name}_lag_s"] = lag.mask(ended) if name == "watermark" else lag
    return per_batch.reset_index()


def lag_unit(largest_s: float) -> tuple[str, float]:
    """The unit a lag of up to ``largest_s`` seconds reads best in, and its seconds.

    >>> lag_unit(12), lag_unit(9_000), lag_unit(28_245_000)
    (('seconds', 1.0), ('hours', 3600.0), ('days', 86400.0))
    """
    for unit, seconds in (("days", 86_400.0), ("hours", 3_600.0), ("minutes", 60.0)):
        if largest_s == largest_s and largest_s >= 2 * seconds:  # NaN: no lag at all
            return unit, seconds
    return "seconds", 1.0


def plot_metrics(output_path: str, png_path: str, *, storage_options: dict[str, str] | None = None) -> str:
    """Draw ``metrics_by_batch(output_path)`` into ``png_path``, one PNG of four panels (pending
    operations, outcomes and rejects, completion latency, each watermark's lag); return the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    batches = metrics_by_batch(output_path, storage_options=storage_options)
    fig, axes = plt.subplots(2, 2, figsize=(12, 7), sharex=True)
    x = batches["batch_id"]
    ax = axes[0][0]
    ax.plot(x, batches["pending"], drawstyle="steps-post", label="pending")
    ax.plot(x, batches["watched"], drawstyle="steps-post", label="watched keys", alpha=0.7)
    ax.set(title="Pending operations", ylabel="operations")
    ax.legend()
    ax = axes[0][1]
    for name in COUNTS:
        ax.plot(x, batches[name], drawstyle="steps-post", label=name)
    ax.set(title="Outcomes, rejects and warnings per micro-batch", ylabel="rows")
    ax.legend()
    ax = axes[1][0]
    for name, label in (("latency_p50_ms", "p50"), ("latency_p99_ms", "p99")):
        ax.plot(x, batches[name].astype(float) / 1000, marker=".", label=f"{label} (worst shard)")
    ax.set(title="Completion latency (event time)", ylabel="seconds", xlabel="micro-batch")
    ax.legend()
    ax = axes[1][1]
    lags = (("watermark_lag_s", "global"), ("operations_watermark_lag_s", "operations"),
            ("events_watermark_lag_s", "events"))  # fmt: skip
    unit, seconds = lag_unit(max(float(batches[name].abs().max()) for name, _ in lags))
    for name, label in lags:
        ax.plot(x, batches[name] / seconds, drawstyle="steps-post", label=label)
    ax.ticklabel_format(axis="y", useOffset=False, style="plain")  # no "+2.8e7" offset label
    ax.set(title="Watermark lag behind processing time", ylabel=f"{unit} behind", xlabel="micro-batch")
    ax.legend()
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)
    plt.close(fig)
    return png_path
