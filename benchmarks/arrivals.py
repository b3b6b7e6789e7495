"""When each outcome reaches the one who reads it, by ``op_id`` (``bench_latency``'s clocks).

* ``Poller``: the ``outcomes`` Delta table's new commits, read every few hundred ms: an
  outcome arrives when the commit that adds its row is in place;
* ``TopicReader``: a ``read_committed`` consumer of the output topic (``output.kafka.topic``):
  an outcome arrives when its record comes out of ``poll``, the moment an on-call service
  reading the topic could act on it.

Both keep ``seen`` (op_id: wall time it arrived) and ``rows`` (op_id: its ``status``, and
what else they read of it), the first arrival of each ``op_id``.
"""

from __future__ import annotations

import json
import os
import threading
import time
from datetime import datetime
from urllib.parse import unquote

import pyarrow.parquet as pq

__all__ = ["Poller", "TopicReader"]


class Poller(threading.Thread):
    """Reads the new commits of the ``outcomes`` table every ``interval`` seconds; keeps each
    op_id's row and the moment its commit was made (the commit file's modification time: the
    table is local, and a Delta commit is the moment its log file is in place)."""

    def __init__(self, path: str, interval: float) -> None:
        super().__init__(daemon=True)
        self.path, self.interval = path, interval
        self.seen: dict[str, float] = {}
        self.rows: dict[str, dict] = {}
        self.version = -1
        self.halt = threading.Event()

    def poll(self) -> None:
        while True:
            commit = os.path.join(self.path, "_delta_log", f"{self.version + 1:020d}.json")
            try:
                committed = os.stat(commit).st_mtime
                with open(commit, encoding="utf-8") as f:
                    actions = [json.loads(line) for line in f if line.strip()]
            except FileNotFoundError:
                return
            for action in actions:
                if "add" not in action:
                    continue
                data = os.path.join(self.path, unquote(action["add"]["path"]))
                for row in pq.read_table(data, columns=["op_id", "status"]).to_pylist():
                    if row["op_id"] not in self.seen:
                        self.seen[row["op_id"]] = committed
                        self.rows[row["op_id"]] = row
            self.version += 1

    def run(self) -> None:
        while not self.halt.is_set():
            self.poll()
            time.sleep(self.interval)


class TopicReader(threading.Thread):
    """A ``read_committed`` consumer of the output topic from its start (Kafka's default fetch
    settings), as an on-call service would read it: for each op_id's first record, the wall
    time it came out of ``poll``, its status, its ``CreateTime`` and its row's ``emitted_at``;
    a second record of an op_id is counted (``duplicates``: exactly once says none)."""

    def __init__(self, bootstrap_servers: str, topic: str, partitions: int) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap_servers,
                "group.id": f"bench-{topic}",
                "isolation.level": "read_committed",
                "enable.auto.commit": "false",
            }
        )
        self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        self.seen: dict[str, float] = {}
        self.rows: dict[str, dict] = {}
        self.duplicates = 0
        self.halt = threading.Event()

    def run(self) -> None:
        try:
            while not self.halt.is_set():
                message = self.consumer.poll(0.1)
                received = time.time()
                if message is None or message.error() is not None:
                    continue
                value = json.loads(message.value())
                if value["op_id"] in self.seen:
                    self.duplicates += 1
                    continue
                self.rows[value["op_id"]] = {
                    "status": value["status"],
                    "created": message.timestamp()[1] / 1000,
                    "emitted": datetime.fromisoformat(value["emitted_at"]).timestamp(),
                }
                self.seen[value["op_id"]] = received
        finally:
            self.consumer.close()

    def stop(self) -> None:
        self.halt.set()
        self.join()
