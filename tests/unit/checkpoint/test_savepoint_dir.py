"""The default savepoint folder (issue 37 item 13): ``checkpoint_config.savepoint_dir``,
else ``LOCKGATE_SAVEPOINT_DIR``, and the folders a stop without a path makes in it. The
stops themselves: ``tests/integration/test_cli_stop.py``."""

from __future__ import annotations

import os
from typing import Any

import pytest

import lockgate as lg
from lockgate.checkpoint.config import SAVEPOINT_DIR_ENV
from lockgate.checkpoint.savepoints import new_savepoint_folder


def test_savepoint_dir_wins_over_the_environment_and_none_means_none(monkeypatch: Any) -> None:
    config = lg.CheckpointConfig(interval=100)
    monkeypatch.delenv(SAVEPOINT_DIR_ENV, raising=False)
    assert config.default_savepoint_dir() is None
    monkeypatch.setenv(SAVEPOINT_DIR_ENV, "/from/env")
    assert config.default_savepoint_dir() == "/from/env"
    config.savepoint_dir = "s3://bucket/savepoints"
    assert config.default_savepoint_dir() == "s3://bucket/savepoints"
    monkeypatch.setenv(SAVEPOINT_DIR_ENV, "")
    config.savepoint_dir = None
    assert config.default_savepoint_dir() is None, "an empty variable is no folder"


@pytest.mark.parametrize("bad", ["", "  ", 7, b"/x"])
def test_a_bad_savepoint_dir_is_refused_saying_what_it_takes(bad: Any) -> None:
    config = lg.CheckpointConfig(interval=100, savepoint_dir=bad)
    with pytest.raises(lg.ConfigurationError, match="savepoint_dir must be a folder path or URL"):
        config.validate()


def test_each_stop_gets_a_new_folder_named_after_the_job(tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    first = new_savepoint_folder("savepoints", "orders / EU", now=0)
    second = new_savepoint_folder("savepoints", "orders / EU", now=0)
    assert os.path.dirname(first) == str(tmp_path / "savepoints"), "made absolute"
    assert os.path.basename(first).startswith("savepoint-orders-EU-19700101T000000Z-")
    assert first != second, "a random part: two stops in one second never share a folder"
    url = new_savepoint_folder("s3://bucket/sp/", "x", now=0)
    assert url.startswith("s3://bucket/sp/savepoint-x-19700101T000000Z-")
    assert new_savepoint_folder("/sp", "///").startswith("/sp/savepoint-job-")
