"""A plain pure-Python port of Kafka's timer (TimingWheel, TimerTaskList, SystemTimer).

Linked lists of entries per bucket, a heap of buckets standing in for the DelayQueue, one
Python object per task: the baseline the columnar wheel is measured against.  Semantics as in
Kafka: a task fires when its bucket expires (up to one tick early).
"""

from __future__ import annotations

import heapq


class TimerTaskEntry:
    __slots__ = ("task_id", "expiration_ms", "list", "next", "prev")

    def __init__(self, task_id: int, expiration_ms: int) -> None:
        self.task_id = task_id
        self.expiration_ms = expiration_ms
        self.list: TimerTaskList | None = None
        self.next: TimerTaskEntry | None = None
        self.prev: TimerTaskEntry | None = None

    def remove(self) -> None:
        if self.list is not None:
            self.list.remove(self)


class TimerTaskList:
    __slots__ = ("root", "expiration", "counter")

    def __init__(self, counter: list[int]) -> None:
        self.root = TimerTaskEntry(-1, -1)
        self.root.next = self.root
        self.root.prev = self.root
        self.expiration = -1
        self.counter = counter

    def set_expiration(self, expiration_ms: int) -> bool:
        changed = self.expiration != expiration_ms
        self.expiration = expiration_ms
        return changed

    def add(self, entry: TimerTaskEntry) -> None:
        tail = self.root.prev
        entry.next = self.root
        entry.prev = tail
        entry.list = self
        tail.next = entry
        self.root.prev = entry
        self.counter[0] += 1

    def remove(self, entry: TimerTaskEntry) -> None:
        entry.next.prev = entry.prev
        entry.prev.next = entry.next
        entry.next = entry.prev = None
        entry.list = None
        self.counter[0] -= 1

    def flush(self, reinsert) -> None:
        head = self.root.next
        while head is not self.root:
            self.remove(head)
            reinsert(head)
            head = self.root.next
        self.expiration = -1

    def __lt__(self, other: TimerTaskList) -> bool:
        return self.expiration < other.expiration


class TimingWheel:
    def __init__(self, tick_ms: int, wheel_size: int, start_ms: int, counter: list[int], queue: list) -> None:
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.interval = tick_ms * wheel_size
        self.counter = counter
        self.queue = queue
        self.buckets = [TimerTaskList(counter) for _ in range(wheel_size)]
        self.current_time = start_ms - start_ms % tick_ms
        self.overflow: TimingWheel | None = None

    def add(self, entry: TimerTaskEntry) -> bool:
        expiration = entry.expiration_ms
        if expiration < self.current_time + self.tick_ms:
            return False
        if expiration < self.current_time + self.interval:
            virtual_id = expiration // self.tick_ms
            bucket = self.buckets[virtual_id % self.wheel_size]
            bucket.add(entry)
            if bucket.set_expiration(virtual_id * self.tick_ms):
                heapq.heappush(self.queue, (bucket.expiration, id(bucket), bucket))
            return True
        if self.overflow is None:
            self.overflow = TimingWheel(
                self.interval, self.wheel_size, self.current_time, self.counter, self.queue
            )
        return self.overflow.add(entry)

    def advance_clock(self, time_ms: int) -> None:
        if time_ms >= self.current_time + self.tick_ms:
            self.current_time = time_ms - time_ms % self.tick_ms
            if self.overflow is not None:
                self.overflow.advance_clock(self.current_time)


class SystemTimer:
    """Kafka's SystemTimer without threads: advance_clock(to) fires every due bucket."""

    def __init__(self, tick_ms: int, wheel_size: int, start_ms: int) -> None:
        self.counter = [0]
        self.queue: list = []
        self.wheel = TimingWheel(tick_ms, wheel_size, start_ms, self.counter, self.queue)
        self.fired: list[int] = []

    def add(self, task_id: int, expiration_ms: int) -> None:
        self._add_entry(TimerTaskEntry(task_id, expiration_ms))

    def _add_entry(self, entry: TimerTaskEntry) -> None:
        if not self.wheel.add(entry):
            self.fired.append(entry.task_id)

    def advance_clock(self, to_ms: int) -> None:
        queue = self.queue
        while queue and queue[0][0] <= to_ms:
            expiration, _, bucket = heapq.heappop(queue)
            if bucket.expiration != expiration:
                continue  # stale heap entry: the bucket was reused
            self.wheel.advance_clock(expiration)
            bucket.flush(self._add_entry)

    def size(self) -> int:
        return self.counter[0]
