"""Run locks (``lockgate.connectors.run_locks``, M-X2): a run is proven dead only when its
lock can be taken; anything else that stops the check proves nothing, and a sink then
leaves that run's files alone."""

from __future__ import annotations

import errno
import os
from typing import Any

import pytest

from lockgate.connectors.files import sink as file_sink
from lockgate.connectors.run_locks import LOCKS, hold_run_lock, run_is_alive


def test_m_x2_a_held_lock_is_alive_a_released_one_dead_and_none_unknown(tmp_path: Any) -> None:
    folder = str(tmp_path)
    assert run_is_alive(folder, "run1") is None, "no lock file: nothing can be proven"
    lock = hold_run_lock(folder, "run1")
    assert run_is_alive(folder, "run1") is True
    lock.release()
    assert run_is_alive(folder, "run1") is False


def test_m_x2_a_lock_file_that_cannot_be_opened_proves_nothing(tmp_path: Any) -> None:
    """Another account's lock file (0600) cannot be opened: the check says "cannot tell"
    instead of raising (which failed every restore of that run's savepoint). Here the
    lock's name is taken by a folder, which refuses the open the same way as root."""
    os.makedirs(tmp_path / LOCKS / "run2.lock")
    assert run_is_alive(str(tmp_path), "run2") is None


@pytest.mark.parametrize("code", [errno.ENOSYS, errno.EACCES])
def test_m_x2_a_commit_renames_where_the_file_system_refuses_hard_links(
    tmp_path: Any, monkeypatch: Any, code: int
) -> None:
    """FUSE file systems without link() answer ENOSYS, CIFS shares EACCES: the commit
    falls back to a rename (after checking the name is free) instead of failing forever."""

    def refuse(src: str, dst: str) -> None:
        raise OSError(code, os.strerror(code), dst)

    source, target = tmp_path / "tmp", tmp_path / "part-0-0.jsonl"
    source.write_text("x\n")
    monkeypatch.setattr(file_sink.os, "link", refuse)
    file_sink._link_no_replace(str(source), str(target))
    assert target.read_text() == "x\n" and not source.exists()
    source.write_text("y\n")
    with pytest.raises(FileExistsError):
        file_sink._link_no_replace(str(source), str(target))
    assert target.read_text() == "x\n", "a published part file is never replaced"
