"""Spark needs Java 17+: without it, starting a Spark session (and ``lockgate run
--executor spark``) says so plainly and suggests the local executor, instead of failing
inside Spark's launcher.

Each case runs in a fresh interpreter whose ``PATH`` / ``JAVA_HOME`` point at folders
without a usable ``java``, so no JVM of this test run is involved.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from lockgate.executor.spark.session import java_major_version

CREATE_SESSION = """
from lockgate.errors import ConfigurationError
from lockgate.executor.spark.session import create_session
try:
    create_session(None, None)
except ConfigurationError as e:
    print("CONFIGURATION-ERROR:", e)
    raise SystemExit(3)
print("NO ERROR")
"""


def _env(path: Path, java_home: Path | None) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("JAVA_HOME", "PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET")
    }
    env["PATH"] = str(path)
    if java_home is not None:
        env["JAVA_HOME"] = str(java_home)
    return env


def _run(code_or_args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *code_or_args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_session_without_java_on_path_says_java_is_missing_and_suggests_local(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    out = _run(["-c", CREATE_SESSION], _env(empty, None), tmp_path)
    assert out.returncode == 3, out.stdout + out.stderr
    assert "Java was not found" in out.stdout
    assert "--executor local" in out.stdout and "executor=lockgate.LocalExecutor()" in out.stdout


def test_session_with_java_home_without_java_names_java_home(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    out = _run(["-c", CREATE_SESSION], _env(empty, empty), tmp_path)
    assert out.returncode == 3, out.stdout + out.stderr
    assert f"JAVA_HOME={empty} has no executable bin/java" in out.stdout
    assert "--executor local" in out.stdout


def test_session_with_java_older_than_17_says_which_version_it_found(tmp_path):
    home = tmp_path / "jdk8"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text("#!/bin/sh\necho 'java version \"1.8.0_351\"' >&2\n")
    java.chmod(0o755)
    empty = tmp_path / "empty"
    empty.mkdir()
    out = _run(["-c", CREATE_SESSION], _env(empty, home), tmp_path)
    assert out.returncode == 3, out.stdout + out.stderr
    assert "is version 8; Spark needs Java 17 or newer" in out.stdout
    assert "--executor local" in out.stdout


def test_cli_run_on_spark_without_java_exits_2_before_running_the_job(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    marker = tmp_path / "ran"
    job = tmp_path / "job.py"
    job.write_text(f"open({str(marker)!r}, 'w').close()\n")
    out = _run(
        ["-m", "lockgate.cli", "run", "--executor", "spark", str(job)], _env(empty, None), tmp_path
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Java was not found" in out.stderr and "--executor local" in out.stderr
    assert not marker.exists(), "the job ran although Spark could not start"


def test_cli_run_local_needs_no_java(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    marker = tmp_path / "ran"
    job = tmp_path / "job.py"
    job.write_text(f"open({str(marker)!r}, 'w').close()\n")
    out = _run(
        ["-m", "lockgate.cli", "run", "--executor", "local", str(job)], _env(empty, None), tmp_path
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert marker.exists()


def test_run_help_says_jobs_run_on_spark_by_default(capsys):
    from lockgate.cli import main

    assert main(["run", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "the local executor in this version" not in text
    assert "else Spark, local[*] unless --master is given" in text


def test_java_major_version_reads_old_and_new_version_strings():
    assert java_major_version('java version "1.8.0_351"') == 8
    assert java_major_version('openjdk version "17.0.15" 2025-04-15') == 17
    assert java_major_version('openjdk version "21" 2023-09-19') == 21
    assert java_major_version("no version here") is None
