"""The checkpoint's run lease (``state.layout.RunLease``): one query per checkpoint."""

from __future__ import annotations

import datetime as dt
import json
import os
import socket

import pytest

from spark_purgatory.checkpoint_paths import Checkpoint
from spark_purgatory.state.layout import LEASE_EXPIRY_S, CheckpointBusyError, RescaleError, RunLease


def _lease_of_another_driver(chk, *, age_s: float, host: str = "node-7", pid: int = 4242) -> None:
    renewed = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=age_s)
    body = {"host": host, "pid": pid, "since": "2026-01-01T00:00:00+00:00", "renewed": renewed.isoformat()}
    os.makedirs(chk, exist_ok=True)
    with open(Checkpoint(chk).lease, "w") as f:
        json.dump(body, f)


def test_a_second_query_on_a_checkpoint_another_driver_runs_on_is_refused_in_one_line(tmp_path):
    chk = str(tmp_path / "chk")
    _lease_of_another_driver(chk, age_s=5)
    with pytest.raises(
        CheckpointBusyError, match="a query runs on .* node-7 pid 4242 .* a second query on it is refused"
    ) as e:
        RunLease(chk).take()
    assert "\n" not in str(e.value)
    with pytest.raises(RescaleError, match="stop it first"):  # rescale refuses too
        RunLease(chk).check_free()


def test_a_lease_not_renewed_within_the_expiry_is_stale_and_taken(tmp_path):
    chk = str(tmp_path / "chk")
    _lease_of_another_driver(chk, age_s=LEASE_EXPIRY_S + 5)  # that driver is gone
    lease = RunLease(chk)
    lease.take()
    assert RunLease(chk).holder()["token"] == lease.token


def test_a_dead_process_on_this_host_holds_nothing(tmp_path):
    chk = str(tmp_path / "chk")
    _lease_of_another_driver(chk, age_s=1, host=socket.gethostname(), pid=2**22 + 12345)  # no such pid
    RunLease(chk).take()


def test_a_query_of_this_process_must_be_stopped_first_and_release_frees_the_checkpoint(tmp_path):
    chk = str(tmp_path / "chk")
    first = RunLease(chk)
    first.take()
    with pytest.raises(CheckpointBusyError, match="started in this process: stop it first"):
        RunLease(chk).take()
    assert first.renew()
    first.release()
    RunLease(chk).take()


def test_renew_says_when_another_query_took_the_lease(tmp_path):
    chk = str(tmp_path / "chk")
    mine = RunLease(chk)
    mine.take()
    _lease_of_another_driver(chk, age_s=0)  # taken by another driver after ours went stale
    assert mine.renew() is False
    mine.release()  # never removes another query's lease
    assert RunLease(chk).holder()["host"] == "node-7"
