"""``python -m spark_purgatory.kafka_broker start|stop|status|topic --data DIR`` (``terminal``)."""

import sys

from .terminal import main

if __name__ == "__main__":  # not on import (pytest's doctest collection imports every module)
    sys.exit(main())
