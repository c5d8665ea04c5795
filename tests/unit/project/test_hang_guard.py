"""The suite's hang guard (tests/conftest.py) names the test it stops and shows every
thread's stack, also in a run of one process with no LOCKGATE_HANG_DUMP file (pytest
captures stderr during a test into a file a killed run never prints)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parents[2]

STUCK = """
import threading

import pytest


@pytest.mark.hang_guard(3)
def test_stuck() -> None:
    threading.Event().wait()  # never set: this test is what the guard must stop
"""


def test_the_hang_guard_names_the_test_it_stops_without_a_dump_file(tmp_path: Path) -> None:
    (tmp_path / "test_stuck.py").write_text(STUCK)
    env = {k: v for k, v in os.environ.items() if k not in ("LOCKGATE_HANG_DUMP",)}
    env = {k: v for k, v in env.items() if not k.startswith(("PYTEST_", "PYTHONPATH"))}
    env["PYTHONPATH"] = str(TESTS_DIR)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider"]
        + ["--rootdir", str(tmp_path), "test_stuck.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = run.stdout + run.stderr
    assert run.returncode != 0, out
    assert "the hang guard (3s) killed the test run in test_stuck.py::test_stuck" in out, out
    assert "most recent call first" in out and "test_stuck.py" in out, out
