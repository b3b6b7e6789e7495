"""``python -m spark_purgatory status|pending|at-risk|explain ...`` (see ``spark_purgatory.cli``)."""

import sys

from .cli import main

if __name__ == "__main__":  # not on import (pytest's doctest collection imports every module)
    sys.exit(main())
