"""spark-purgatory: Kafka's delayed-operation purgatory for Spark Structured Streaming.

The engine (``Purgatory``, ``TimingWheel``) runs without Spark; the streaming host and the
Delta sinks build on it.
"""

from .config import ConfigError, PurgatoryConfig
from .purgatory import BatchResult, Purgatory
from .wheel import TimingWheel

__all__ = ["BatchResult", "ConfigError", "Purgatory", "PurgatoryConfig", "TimingWheel"]
__version__ = "0.1.0"
