"""The benchmarks: ``python -m benchmarks NAME`` from the project's root (``__main__``: the
runner and the list of benchmarks), each answering one question about the job's speed or
memory beside Spark's own answers; ``harness``, ``contenders`` and ``services`` are what they
share.  The figures live in docs/performance.md, never here."""
