"""The Flink and Spark cases of ``bench/latency.py``: each peer's job runs in a
subprocess of the peer's own virtual environment (``bench/latency_flink.py``,
``bench/latency_spark.py``), in a session of its own so that stopping it ends its JVM too.
The jars and packages come from Maven Central as ``bench/kafka.py`` fetches them."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _kafka_bench() -> Any:
    """bench/kafka.py (its peer environments and Maven coordinates), loaded by its file."""
    key = "lgbench_kafka"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, HERE / "kafka.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


class PeerProcess:
    """A peer's job in a subprocess: its first JSON line of stdout is its configuration;
    its stderr goes to a file in the case's work folder."""

    def __init__(self, system: str, cmd: list[str], work: Path) -> None:
        self.system = system
        self.cmd = cmd
        self.stderr_path = work / f"{system}.stderr"
        self._stderr = open(self.stderr_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=self._stderr, start_new_session=True
        )
        self._config: dict[str, Any] | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            text = line.decode(errors="replace").strip()
            if text.startswith("{"):
                try:
                    self._config = json.loads(text).get("config", self._config)
                except json.JSONDecodeError:
                    pass

    def config(self) -> dict[str, Any] | None:
        return self._config

    def problem(self) -> str | None:
        """None while the job runs; what went wrong once its process ended."""
        code = self.proc.poll()
        if code is None:
            return None
        return (
            f"the {self.system} job's process exited ({code}) before its output: "
            f"{self.stderr_tail()}"
        )

    def stderr_tail(self, size: int = 1500) -> str:
        self._stderr.flush()
        return self.stderr_path.read_bytes()[-size:].decode(errors="replace").strip()

    def stop(self) -> None:
        """SIGTERM to the process's session (its JVM included), SIGKILL after 30 s."""
        if self.proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
                try:
                    os.killpg(self.proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.proc.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        self._stderr.close()


def peer_python(name: str) -> Path:
    """The peer's interpreter, or an error that says how to make it."""
    python = HERE / ".peers" / name / "bin" / "python"
    if not python.exists():
        raise RuntimeError(
            f"{python} does not exist: create the peer's environment with "
            f"'bash bench/setup_peers.sh {name}'"
        )
    return python


def start(
    spec: dict[str, Any], name: str, args: argparse.Namespace, source: str, output: str,
    tables: dict[str, str], work: Path,
) -> PeerProcess:  # fmt: skip
    """Start the case's peer job; errors (a missing environment, a jar that cannot be
    fetched) are raised as RuntimeError, which the harness turns into an error row."""
    kafka = _kafka_bench()
    common = [
        "--query", spec["query"], "--bootstrap", args.bootstrap, "--input", source,
        "--output", output, "--work", str(work / "job"), "--parallelism", str(args.parallelism),
    ]  # fmt: skip
    if spec["system"] == "flink":
        try:
            jar = kafka.flink_jar()
        except SystemExit as e:  # bench/kafka.py's way of saying the fetch failed
            raise RuntimeError(str(e)) from None
        cmd = [str(peer_python("flink")), str(HERE / "latency_flink.py"), *common]
        cmd += ["--jar", str(jar), "--checkpoint-ms", str(spec["checkpoint_ms"])]
        cmd += ["--api", spec.get("api", "sql")]
        if spec["eo"]:
            cmd.append("--exactly-once")
        if spec["query"] == "C":
            cmd += ["--table", tables["csv"]]
    else:
        cmd = [str(peer_python("spark")), str(HERE / "latency_spark.py"), *common]
        cmd += ["--trigger", spec["trigger"], "--package", kafka.SPARK_KAFKA]
        cmd += ["--ivy", str(kafka.CACHE / "bench-kafka-spark-ivy")]
        if spec["query"] == "C":
            cmd += ["--table", tables["parquet"]]
    return PeerProcess(spec["system"], cmd, work)
