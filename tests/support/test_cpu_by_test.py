"""The CPU-by-test plugin charges a test the CPU of the processes it starts."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.cpu_by_test import records, summary

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BURNS = """
import subprocess, sys

SPIN = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 1.5: pass"

def test_burns_in_a_child():
    subprocess.run([sys.executable, "-c", SPIN], check=True)

def test_idles():
    pass
"""


def test_a_childs_cpu_is_charged_to_the_test_that_started_it(tmp_path):
    (tmp_path / "test_burn.py").write_text(BURNS)
    out = tmp_path / "cpu"
    env = {**os.environ, "CPU_BY_TEST": str(out), "PYTHONPATH": ROOT}
    plugin = ["-p", "tests.support.cpu_by_test", "-p", "no:cacheprovider", "--rootdir", str(tmp_path)]
    command = [sys.executable, "-m", "pytest", "-q", "-n", "0", *plugin, "test_burn.py"]
    subprocess.run(command, check=True, env=env, cwd=tmp_path, capture_output=True)
    charged = {record["test"].split("::")[-1]: record["cpu"] for record in records(out)}
    assert charged["test_burns_in_a_child"] >= 1.2, charged
    assert charged["test_idles"] < 0.5, charged
    assert "test_burn.py::test_burns_in_a_child" in summary(out)
