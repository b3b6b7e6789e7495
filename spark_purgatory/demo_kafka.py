"""The demo through Kafka: the same workload produced to two topics on a real broker.

``make demo-kafka`` starts a broker on loopback, produces the demo's operations and events to
two topics, runs the job on them through Spark's Kafka source, ends the input and prints the
same summary and plots as ``make demo``; a ``read_committed`` consumer prints the expiries
the output topic gets and counts them against the table.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time

import pandas as pd

from .demo import demo_input, report, run_job
from .kafka_broker import KafkaBroker

#: the demo's two topics, and the output topic the expiries go to
OPERATIONS_TOPIC, EVENTS_TOPIC = "purgatory-operations", "purgatory-events"
OUTCOMES_TOPIC = "purgatory-expired"
#: how many expiries the consumer prints one by one (then a count every few seconds)
PRINTED = 8


def run_pipeline(
    n_ops: int, out: str, *, files: int = 20, partitions: int = 3, max_offsets_per_trigger: int = 10_000
) -> dict:
    """Generate the demo's input, produce it to two topics, run the job on them; the tables read back."""
    work, inputs, tables, chk = demo_input(n_ops, out, files)
    with KafkaBroker() as broker:
        print(f"Kafka broker on {broker.bootstrap_servers} (log: {broker.log_file})")
        for topic, kind in ((OPERATIONS_TOPIC, "ops"), (EVENTS_TOPIC, "events")):
            broker.create_topic(topic, partitions=partitions)
            lines = _lines(f"{inputs}/{kind}")
            broker.produce(topic, lines, partitions=[i % partitions for i in range(len(lines))])
            print(f"produced {len(lines):,} records to {topic} ({partitions} partitions)")
        broker.create_topic(OUTCOMES_TOPIC, partitions=partitions)
        consumer = ExpiryPrinter(broker.bootstrap_servers, OUTCOMES_TOPIC)
        consumer.start()
        args = [
            *("--set", f"output.kafka.topic={OUTCOMES_TOPIC}"),
            *("--set", f"output.kafka.bootstrap.servers={broker.bootstrap_servers}"),
            *("--ops-path", OPERATIONS_TOPIC, "--events-path", EVENTS_TOPIC, "--source-format", "kafka"),
            *("--output-path", tables, "--checkpoint-path", chk),
            *("--set", f"kafka.bootstrap.servers={broker.bootstrap_servers}"),
            *("--set", "source.kafka.startingOffsets=earliest"),
            *("--set", f"source.kafka.maxOffsetsPerTrigger={max_offsets_per_trigger}"),
            *("--set", "purgatory.shards=2", "--set", "watermark.delay=5 seconds"),
            "--end-input",  # a bounded input: nothing stays pending (docs/end-of-input.md)
        ]
        try:
            result = run_job(args, work, tables, chk)
        finally:
            seen = consumer.finish()
        expired = result["frames"].get("outcomes", pd.DataFrame({"status": []}))
        in_table = int((expired["status"] == "expired").sum())
        print(
            f"the consumer of {OUTCOMES_TOPIC} saw {seen:,} expiries (read_committed); "
            f"in the table: {in_table:,}"
        )
        return result


class ExpiryPrinter(threading.Thread):
    """A ``read_committed`` consumer of the output topic, printing expiries as they come."""

    def __init__(self, bootstrap_servers: str, topic: str) -> None:
        super().__init__(name="expiry-printer", daemon=True)
        from confluent_kafka import Consumer

        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap_servers,
                "group.id": "demo-on-call",
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
            }
        )
        self.consumer.subscribe([topic])
        self.seen = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        said = time.monotonic()
        while not self.stopping.is_set():
            message = self.consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            self.seen += 1
            if self.seen <= PRINTED:
                outcome = json.loads(message.value())
                print(
                    f"  [on call] {outcome['op_id']} expired at {outcome['deadline']} "
                    f"(micro-batch {outcome['batch_id']}, keys {', '.join(outcome['keys'])})"
                )
            elif time.monotonic() - said > 5:
                print(f"  [on call] {self.seen:,} expiries so far")
                said = time.monotonic()

    def finish(self, quiet_s: float = 3.0) -> int:
        """Read what is left (nothing new for ``quiet_s``), stop; how many expiries came."""
        last, count = time.monotonic(), self.seen
        while time.monotonic() - last < quiet_s:
            time.sleep(0.5)
            if self.seen != count:
                last, count = time.monotonic(), self.seen
        self.stopping.set()
        self.join()
        self.consumer.close()
        return self.seen


def _lines(directory: str) -> list[bytes]:
    """The lines of a directory's input files in event-time order, as a producer that sends
    what happens when it happens writes them: a capped micro-batch may end inside a file, and
    the lines after it would otherwise arrive ``late``.  A line without a readable ``ts`` keeps
    its neighbour's time.
    """
    lines: list[bytes] = []
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as f:
            chunk = f.read().splitlines()
        times, last = [], ""
        for line in chunk:
            try:
                last = str(pd.Timestamp(json.loads(line)["ts"]).value)
            except Exception:  # noqa: BLE001 - a malformed line: where it was
                pass
            times.append(last.zfill(24))
        lines += [line for _t, _i, line in sorted(zip(times, range(len(chunk)), chunk, strict=True))]
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=30_000, help="number of operations")
    parser.add_argument(
        "--out", default="demo-output/kafka", help="where input, tables, checkpoint and PNGs go"
    )
    parser.add_argument("--files", type=int, default=20, help="input files per stream (produced in order)")
    parser.add_argument("--partitions", type=int, default=3, help="partitions per topic")
    parser.add_argument(
        "--max-offsets-per-trigger", type=int, default=10_000, help="records per topic and micro-batch"
    )
    args = parser.parse_args(argv)
    report(
        run_pipeline(
            args.ops,
            args.out,
            files=args.files,
            partitions=args.partitions,
            max_offsets_per_trigger=args.max_offsets_per_trigger,
        )
    )


if __name__ == "__main__":
    main()
