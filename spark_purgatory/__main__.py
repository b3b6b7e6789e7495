"""``python -m spark_purgatory status|pending|at-risk|explain ...`` (see ``spark_purgatory.cli``)."""

from .cli import run

if __name__ == "__main__":  # not on import (pytest's doctest collection imports every module)
    run()
