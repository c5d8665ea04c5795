"""Run a command and measure its whole process tree: wall time, CPU time, peak memory.

Linux only (reads ``/proc``). While the command runs, a sampler walks its
process tree every ``interval_s`` seconds:

* **CPU seconds** are user + system time of every process of the tree: the
  last value sampled for each process, or, when larger, the root's rusage
  (which includes every descendant that was waited for), so a child that exits
  between two samples is still counted through its parent's wait;
* **peak memory** is the largest sum, over one sample, of the processes'
  proportional set size (``Pss`` of ``/proc/PID/smaps_rollup``: pages shared
  between forked workers count once), or their resident set size where Pss
  cannot be read. Peaks shorter than the interval can be missed.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass
class TreeUsage:
    returncode: int
    wall_s: float
    cpu_s: float
    peak_bytes: int
    timed_out: bool


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, user + system CPU seconds) of ``pid``, or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK


def _memory(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


def _tree(root: int) -> dict[int, float]:
    """CPU seconds of ``root`` and each of its live descendants."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            got = _stat(int(entry))
            if got is not None:
                parents[int(entry)], cpu[int(entry)] = got
    members = {root}
    grew = True
    while grew:
        grew = False
        for pid, ppid in parents.items():
            if ppid in members and pid not in members:
                members.add(pid)
                grew = True
    return {pid: cpu[pid] for pid in members if pid in cpu}


def run_measured(
    cmd: list[str],
    *,
    timeout_s: float,
    interval_s: float = 0.1,
    stdout: int | None = subprocess.PIPE,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
) -> tuple[TreeUsage, str, str]:
    """Run ``cmd`` in a new session; return its usage, stdout and stderr. After
    ``timeout_s`` the whole session is killed (``timed_out`` is then True)."""
    reaped_before = _reaped_children_cpu()
    started = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=env,
        cwd=cwd,
    )
    last_cpu: dict[int, float] = {}
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            tree = _tree(proc.pid)
            last_cpu.update(tree)
            peak = max(peak, sum(_memory(pid) for pid in tree))
            done.wait(interval_s)

    sampler = threading.Thread(target=sample, name="process-tree sampler", daemon=True)
    sampler.start()
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    wall = time.perf_counter() - started
    done.set()
    sampler.join()
    # every process of the session: kill what outlived the root (e.g. a JVM)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    # the root was reaped by communicate(): its rusage holds its waited-for descendants
    cpu = max(sum(last_cpu.values()), _reaped_children_cpu() - reaped_before)
    return TreeUsage(proc.returncode, wall, cpu, peak, timed_out), out or "", err or ""


def _reaped_children_cpu() -> float:
    """CPU seconds of this process's reaped children and their waited-for descendants
    (commands are measured one at a time, so the difference is the command's)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime
