"""The one call and what stands on it: ``start``, the job, the CLI, inspect, backfill, the harness."""
