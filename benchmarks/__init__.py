"""The benchmarks: ``python -m benchmarks NAME`` from the project's root (``__main__``: the
runner and the list of benchmarks), each answering one question about the job's speed or
memory beside Spark's own answers; ``harness`` and ``contenders`` are what they share, and
``testbed`` (beside this folder) what they share with the tests: the servers on loopback, the
wheel's venv.  The figures live in docs/performance.md, never here."""
