"""A broker in a directory, from a terminal: ``python -m spark_purgatory.kafka_broker``.

A detached broker (``KafkaBroker(data_dir=..., detached=True)``) outlives the command that
started it and keeps its data between starts; these commands find it again by its
directory (the process id in ``broker.pid``, the ports in ``server.properties``)::

    python -m spark_purgatory.kafka_broker start  --data /tmp/kafka          # prints host:port
    python -m spark_purgatory.kafka_broker topic  --data /tmp/kafka operations events --partitions 3
    python -m spark_purgatory.kafka_broker status --data /tmp/kafka
    python -m spark_purgatory.kafka_broker stop   --data /tmp/kafka          # data kept: start again
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from .admin import KafkaBrokerError
from .process import PID_FILE, STOP_TIMEOUT_S, KafkaBroker


def running_at(data_dir: str | os.PathLike[str]) -> tuple[int, str] | None:
    """(pid, host:port) of the broker serving ``data_dir``'s storage, None when none runs."""
    directory = Path(data_dir)
    try:
        pid = int((directory / PID_FILE).read_text().strip())
        os.kill(pid, 0)
    except (FileNotFoundError, ValueError, ProcessLookupError, PermissionError):
        return None
    ports = KafkaBroker(data_dir=directory).formatted_ports()
    return (pid, f"127.0.0.1:{ports['PLAINTEXT']}") if ports else None


def stop_at(data_dir: str | os.PathLike[str], timeout: float = STOP_TIMEOUT_S) -> bool:
    """Stop the broker serving ``data_dir`` (SIGTERM, then SIGKILL); its data stays.  False
    when none was running."""
    found = running_at(data_dir)
    if found is None:
        return False
    pid = found[0]
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    (Path(data_dir) / PID_FILE).unlink(missing_ok=True)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m spark_purgatory.kafka_broker start|stop|status|topic --data DIR``."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m spark_purgatory.kafka_broker",
        description="A local Kafka broker on 127.0.0.1 that keeps its data in --data between starts.",
    )
    parser.add_argument("command", choices=["start", "stop", "status", "topic"])
    parser.add_argument("topics", nargs="*", help="topic: the topics to create")
    parser.add_argument("--data", required=True, help="the broker's directory (its storage, log, port)")
    parser.add_argument("--partitions", type=int, default=1, help="topic: partitions of each new topic")
    args = parser.parse_intermixed_args(argv)
    found = running_at(args.data)
    try:
        if args.command == "start":
            if found is None:
                broker = KafkaBroker(data_dir=args.data, detached=True).start()
                found = (broker._process.pid, broker.bootstrap_servers)  # type: ignore[union-attr]
            print(found[1])
        elif args.command == "stop":
            print("stopped" if stop_at(args.data) else f"no broker runs on {args.data}")
        elif args.command == "status":
            print(f"{found[1]} (pid {found[0]})" if found else f"no broker runs on {args.data}")
            return 0 if found else 1
        else:
            if found is None:
                raise KafkaBrokerError(f"no broker runs on {args.data}: start it first")
            broker = KafkaBroker(data_dir=args.data)
            broker.port = int(found[1].rsplit(":", 1)[1])
            for topic in args.topics:
                broker.create_topic(topic, partitions=args.partitions)
            print(", ".join(args.topics))
    except KafkaBrokerError as error:
        print(f"kafka_broker: {str(error).splitlines()[0]}", file=sys.stderr)
        return 1
    return 0
