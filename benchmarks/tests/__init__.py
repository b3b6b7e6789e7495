"""The benchmarks' own tests: each harness runs at a tiny size, so it cannot rot."""
