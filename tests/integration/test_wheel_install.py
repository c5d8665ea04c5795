"""A package, not a checkout (issue 19 part 4, issue 37 item 16): lockgate is built as an
sdist and a wheel (``python -m build``, the wheel built from the sdist), the wheel is
installed with the ``kafka`` extra into a fresh virtual environment, and jobs run there
from outside the repository: one on the local executor, and a Kafka to Kafka job with an
exactly-once sink on Spark (``lockgate run --executor spark``, Java from the machine).
Building leaves nothing in the source folder (no ``build/``, no ``*.egg-info``), also
when pip builds from the path as ``pip install PATH`` does.

The venv is made with ``python -m venv`` from the base interpreter, without system site
packages, so nothing of this checkout or of ``.venv`` is importable in it: lockgate can
only come from the wheel (asserted through ``lockgate.__file__``), and its dependencies
from the package registry (pip's cache makes that fast after ``scripts/test.sh`` installed
them once). Every subprocess runs with ``PYTHONPATH`` and the test run's ``LOCKGATE_*``
variables removed, in a folder outside the repository.

The build and the install happen once, in a module fixture; each step has a time limit and
fails with the step's output. About a minute on the 2-core machine (build ~6 s, venv ~4 s,
install ~20 s with a warm pip cache, the local job and the CLI calls a few seconds, the
Spark job ~20 s with its JVM's start).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import lockgate

pytestmark = [pytest.mark.packaging, pytest.mark.system, pytest.mark.hang_guard(300)]

REPO = Path(__file__).resolve().parents[2]
#: the version the copy of the source is built with: lockgate.__version__ with a local label,
#: written into the copy's lockgate/core/version.py only; everything must follow that one line
VERSION = f"{lockgate.__version__}+wheeltest"
VERSION_LINE = re.compile(r'^__version__ = "[^"]*"$', re.MULTILINE)
#: generous bounds for each step; a cold pip cache downloads pyspark (~300 MB) in the install
BUILD_TIMEOUT_S = 300.0
VENV_TIMEOUT_S = 120.0
INSTALL_TIMEOUT_S = 600.0
RUN_TIMEOUT_S = 120.0
#: a Spark job starts a JVM and its Python workers first
SPARK_RUN_TIMEOUT_S = 240.0


@dataclass(frozen=True)
class Installed:
    """The built distributions and the venv the wheel was installed into."""

    wheel: Path
    sdist: Path
    venv: Path
    work: Path  # an empty folder outside the repository, the cwd of every run
    env: dict[str, str]
    src: Path  # the copy of the source the distributions were built from
    root: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def lockgate(self) -> Path:
        return self.venv / "bin" / "lockgate"


def run(
    cmd: list[str | Path], *, cwd: Path, timeout_s: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd``; fail the test with its output if it exits non-zero or outlives
    ``timeout_s``."""
    argv = [str(c) for c in cmd]
    try:
        proc = subprocess.run(
            argv,
            check=False,
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(
            f"{' '.join(argv)} did not finish within {timeout_s:g}s\n"
            f"stdout:\n{e.stdout!r}\nstderr:\n{e.stderr!r}"
        )
    if proc.returncode != 0:
        pytest.fail(
            f"{' '.join(argv)} exited {proc.returncode}\n"
            f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        )
    return proc


def clean_env(venv: Path, home: Path) -> dict[str, str]:
    """The environment of a user who activated ``venv``: no ``PYTHON*`` variable (the test
    run's PYTHONPATH names tests/), no ``LOCKGATE_*`` variable of the test run, no other
    virtual environment."""
    env = {
        k: v
        for k, v in os.environ.items()
        # PYSPARK_PYTHON: a Spark session of the test run sets it to .venv's interpreter,
        # whose workers would import the checkout's lockgate
        if not k.startswith(("PYTHON", "PYSPARK_", "LOCKGATE_", "VIRTUAL_ENV", "__PYVENV"))
    }
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    env["PYTHONNOUSERSITE"] = "1"
    env["LOCKGATE_HOME"] = str(home)
    return env


def copy_source(dest: Path) -> None:
    """What a fresh clone holds that packaging may read: the top-level files, the package
    and the tests (to show the wheel leaves them out). Built from a copy so that no build/
    or stale build/lib (which can put deleted modules into a wheel) is left in the
    checkout."""
    dest.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for entry in REPO.iterdir():
        if entry.is_file():
            shutil.copy2(entry, dest / entry.name)
    for folder in ("lockgate", "tests", "build_backend"):
        shutil.copytree(REPO / folder, dest / folder, ignore=ignore)
    init = dest / "lockgate" / "core" / "version.py"
    text, found = VERSION_LINE.subn(f'__version__ = "{VERSION}"', init.read_text())
    assert found == 1, 'lockgate/core/version.py must hold one line __version__ = "X.Y.Z"'
    init.write_text(text)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("wheel")
    src, dist, venv, work, home = (root / n for n in ("src", "dist", "venv", "work", "home"))
    copy_source(src)
    work.mkdir()
    home.mkdir()
    # sdist first, then the wheel built from the unpacked sdist: a file the sdist lacks
    # fails the wheel build
    run([sys.executable, "-m", "build", "--outdir", dist, src], cwd=root, timeout_s=BUILD_TIMEOUT_S)
    wheels = sorted(dist.glob("lockgate-*.whl"))
    sdists = sorted(dist.glob("lockgate-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, f"python -m build made {os.listdir(dist)}"
    assert_nothing_left(src, "python -m build")
    env = clean_env(venv, home)
    # the venv module creates it from the base interpreter, not from .venv
    run([sys.executable, "-m", "venv", venv], cwd=work, timeout_s=VENV_TIMEOUT_S, env=env)
    run(
        [
            venv / "bin" / "python",
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            f"{wheels[0]}[kafka]",
        ],
        cwd=work,
        timeout_s=INSTALL_TIMEOUT_S,
        env=env,
    )
    return Installed(
        wheel=wheels[0], sdist=sdists[0], venv=venv, work=work, env=env, src=src, root=root
    )


def assert_nothing_left(src: Path, step: str) -> None:
    """A build wrote nothing into the source folder (setuptools' build/ and egg-info go to
    a private temporary folder: build_backend/lockgate_backend.py)."""
    left = sorted(p.name for p in src.iterdir() if p.name == "build" or p.suffix == ".egg-info")
    assert not left, f"{step} left {left} in the source folder"


def test_distributions_are_named_with_the_version_of_lockgate_init(installed: Installed) -> None:
    """One place for the version: the copy's lockgate.__version__ names both distributions
    (a version written in pyproject.toml too would name them instead)."""
    assert installed.wheel.name == f"lockgate-{VERSION}-py3-none-any.whl"
    assert installed.sdist.name == f"lockgate-{VERSION}.tar.gz"


def test_wheel_holds_the_package_with_py_typed_and_no_tests(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as whl:
        names = whl.namelist()
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"lockgate", f"lockgate-{VERSION}.dist-info"}, tops
    assert "lockgate/py.typed" in names
    assert "lockgate/__init__.py" in names and "lockgate/cli/__main__.py" in names
    assert not [n for n in names if "/tests/" in n or n.split("/")[-1].startswith("conftest")]
    entry_points = f"lockgate-{VERSION}.dist-info/entry_points.txt"
    with zipfile.ZipFile(installed.wheel) as whl:
        assert "lockgate = lockgate.cli:main" in whl.read(entry_points).decode()


def test_sdist_holds_readme_changelog_contributing_and_license_files(installed: Installed) -> None:
    with tarfile.open(installed.sdist) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    for required in (
        "README.md",
        "CHANGELOG.md",
        "CONTRIBUTING.md",
        "pyproject.toml",
        "PKG-INFO",
        "lockgate/__init__.py",
        "lockgate/py.typed",
    ):
        assert required in names, f"the sdist lacks {required}"
    licenses = sorted(p.name for p in REPO.iterdir() if p.name.upper().startswith("LICEN"))
    for name in licenses:
        assert name in names, f"the sdist lacks {name}"
    assert not [n for n in names if n.startswith("tests/")]


def test_lockgate_is_imported_from_the_venv_not_the_checkout(installed: Installed) -> None:
    probe = (
        "import json, importlib.metadata as m, lockgate; print(json.dumps("
        "{'file': lockgate.__file__, 'version': lockgate.__version__,"
        " 'dist': m.version('lockgate')}))"
    )
    out = json.loads(
        run(
            [installed.python, "-c", probe],
            cwd=installed.work,
            timeout_s=RUN_TIMEOUT_S,
            env=installed.env,
        ).stdout
    )
    where = Path(out["file"]).resolve()
    assert where.is_relative_to(installed.venv.resolve()), where
    assert not where.is_relative_to(REPO), where
    assert out["version"] == out["dist"] == VERSION


def test_lockgate_cli_runs_from_the_venv(installed: Installed) -> None:
    helped = run(
        [installed.lockgate, "--help"],
        cwd=installed.work,
        timeout_s=RUN_TIMEOUT_S,
        env=installed.env,
    )
    assert "run" in helped.stdout and "checkpoint" in helped.stdout, helped.stdout
    version = run(
        [installed.lockgate, "--version"],
        cwd=installed.work,
        timeout_s=RUN_TIMEOUT_S,
        env=installed.env,
    )
    assert version.stdout.strip() == f"lockgate {VERSION}"


JOB = '''\
"""Squares of 0..N-1, a running sum per key (x % 7) in RocksDB keyed state, JSON lines out."""
import json
import sys

import lockgate as lg


class RunningSum(lg.KeyedProcessFunction):
    def open(self, ctx):
        self.total = ctx.get_state(lg.ValueStateDescriptor("total", default=0))

    def process_element(self, value, ctx):
        total = self.total.value() + value
        self.total.update(total)
        yield {"key": ctx.current_key, "total": total}


out_dir, n = sys.argv[1], int(sys.argv[2])
env = lg.StreamEnvironment(parallelism=2)
env.set_state_backend(lg.RocksDBStateBackend())
(
    env.from_sequence(0, n).uid("numbers")
    .map(lambda x: x * x).uid("square")
    .key_by(lambda x: x % 7)
    .process(RunningSum()).uid("sum")
    .sink_to(lg.connectors.FileSink(out_dir, format="jsonl")).uid("out")
)
result = env.execute("wheel job")
print(json.dumps({"status": result.status.value, "lockgate": lg.__file__}))
'''


def test_a_job_runs_with_the_installed_lockgate_outside_the_repository(
    installed: Installed,
) -> None:
    """`lockgate run --executor local job.py` from the venv, cwd outside the checkout."""
    n = 1000
    job = installed.work / "job.py"
    job.write_text(textwrap.dedent(JOB))
    out_dir = installed.work / "out"
    done = run(
        [installed.lockgate, "run", "--executor", "local", job, out_dir, str(n)],
        cwd=installed.work,
        timeout_s=RUN_TIMEOUT_S,
        env=installed.env,
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["status"] == "FINISHED", done.stdout
    assert Path(report["lockgate"]).resolve().is_relative_to(installed.venv.resolve())
    final: dict[int, int] = {}
    rows = 0
    for part in sorted(out_dir.iterdir()):
        for line in part.read_text().splitlines():
            row = json.loads(line)
            rows += 1
            final[row["key"]] = max(final.get(row["key"], 0), row["total"])
    expected: dict[int, int] = {}
    for x in range(n):
        expected[x * x % 7] = expected.get(x * x % 7, 0) + x * x
    assert rows == n
    assert final == expected


def test_pip_building_from_a_path_leaves_no_build_folder_in_it(installed: Installed) -> None:
    """`pip install PATH` builds a wheel in the folder itself (what `pip wheel PATH` does
    too): setuptools' build/ and lockgate.egg-info went there, and a stale build/lib can
    put deleted modules into a later wheel. The wheel holds what python -m build's holds."""
    out = installed.root / "pip-wheel"
    run(
        [
            installed.python,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--wheel-dir",
            out,
            installed.src,
        ],
        cwd=installed.work,
        timeout_s=BUILD_TIMEOUT_S,
        env=installed.env,
    )
    assert_nothing_left(installed.src, "pip wheel PATH")
    (built,) = out.glob("lockgate-*.whl")
    with zipfile.ZipFile(built) as a, zipfile.ZipFile(installed.wheel) as b:
        assert sorted(a.namelist()) == sorted(b.namelist())


KAFKA_JOB = '''\
"""Kafka to Kafka on Spark, exactly once: {k, v} in, {k, v, square, where} out."""
import json
import sys

import lockgate as lg
from lockgate.connectors import KafkaSink, KafkaSource

bootstrap, source_topic, sink_topic, prefix, storage = sys.argv[1:6]
env = lg.StreamEnvironment(parallelism=2)
env.enable_checkpointing(200)
env.checkpoint_config.storage = storage
(
    env.from_source(KafkaSource(bootstrap, source_topic, bounded=True), name="kafka in")
    .uid("kafka-in")
    # where: the lockgate the Spark worker's Python imported
    .map(lambda r: {"k": r["k"], "v": r["v"], "square": r["v"] * r["v"], "where": lg.__file__})
    .uid("square")
    .sink_to(
        KafkaSink(
            bootstrap,
            sink_topic,
            key="k",
            delivery="exactly_once",
            transactional_id_prefix=prefix,
        ),
        name="kafka out",
    )
    .uid("kafka-out")
)
result = env.execute("wheel kafka job")
print(json.dumps({"status": result.status.value, "lockgate": lg.__file__}))
'''


@pytest.mark.spark
def test_a_kafka_job_runs_on_spark_with_the_installed_lockgate(
    installed: Installed, kafka_topic: Any
) -> None:
    """The newcomer's path: the wheel with its kafka extra, `lockgate run --executor spark`
    from outside the checkout, a few hundred records from a topic to a topic through the
    exactly-once KafkaSink; a read_committed consumer reads each exactly once."""
    from kafka_fixtures import BOOTSTRAP, open_transactions, produce, read_committed

    n = 400
    source, sink = kafka_topic(2), kafka_topic(2)
    records = [{"k": i % 7, "v": i} for i in range(n)]
    produce(source, records, partitioner=lambda i, r: r["k"] % 2)
    job = installed.work / "kafka_job.py"
    job.write_text(textwrap.dedent(KAFKA_JOB))
    prefix = f"lgtest-wheel-{sink[-8:]}"
    done = run(
        [
            installed.lockgate,
            "run",
            "--executor",
            "spark",
            "--master",
            "local[2]",
            job,
            BOOTSTRAP,
            source,
            sink,
            prefix,
            installed.work / "checkpoints",
        ],
        cwd=installed.work,
        timeout_s=SPARK_RUN_TIMEOUT_S,
        env=installed.env,
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["status"] == "FINISHED", done.stdout
    assert Path(report["lockgate"]).resolve().is_relative_to(installed.venv.resolve())
    out = read_committed(sink)
    workers = {str(Path(r["where"]).resolve()) for r in out}
    assert all(Path(w).is_relative_to(installed.venv.resolve()) for w in workers), workers
    got = sorted((r["k"], r["v"], r["square"]) for r in out)
    assert got == sorted((r["k"], r["v"], r["v"] * r["v"]) for r in records)
    assert open_transactions(prefix) == [], "no transaction of the job's prefix is left open"
