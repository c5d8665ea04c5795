"""Issue 18 item 7: the job registry refuses a folder other users can write to, where
anyone could plant or swap a registration file and receive the commands meant for a
job (a savepoint path, a stop). A job does not register there (it runs on, and the
warning says how to fix the folder); the command line refuses to read it."""

from __future__ import annotations

import logging
import os

import pytest
from test_job_registry import FakeControl

from lockgate.executor import job_registry
from lockgate.executor.job_registry import (
    UnsafeRegistryError,
    list_jobs,
    register_job,
)


@pytest.mark.parametrize("mode", [0o777, 0o733, 0o770], ids=["world", "world-wx", "group"])
def test_item7_a_job_does_not_register_in_a_jobs_folder_others_can_write(
    tmp_path, caplog, mode: int
) -> None:
    home = tmp_path / "home"
    (home / job_registry.JOBS_FOLDER).mkdir(parents=True)
    os.chmod(home, 0o700)
    os.chmod(home / job_registry.JOBS_FOLDER, mode)
    with caplog.at_level(logging.WARNING, logger=job_registry.__name__):
        registration = register_job("job", FakeControl(), home=str(home))
    try:
        assert registration.job is None, "the job registered in an unsafe folder"
        assert "chmod go-w" in caplog.text and "writable by" in caplog.text
        assert os.listdir(home / job_registry.JOBS_FOLDER) == []
        with pytest.raises(UnsafeRegistryError, match="chmod go-w"):
            list_jobs(str(home))
    finally:
        registration.close()


def test_item7_a_world_writable_home_is_refused_unless_sticky(tmp_path) -> None:
    home = tmp_path / "home"
    (home / job_registry.JOBS_FOLDER).mkdir(parents=True, mode=0o700)
    os.chmod(home, 0o777)
    with pytest.raises(UnsafeRegistryError, match="writable by other users"):
        list_jobs(str(home))
    os.chmod(home, 0o1777)  # like /tmp: others cannot rename or replace our jobs folder
    assert list_jobs(str(home)) == []


def test_item7_a_private_folder_is_accepted(tmp_path) -> None:
    registration = register_job("job", FakeControl(), home=str(tmp_path / "home"))
    try:
        assert registration.job is not None
        assert [j.job_id for j in list_jobs(str(tmp_path / "home"))] == [registration.job_id]
    finally:
        registration.close()
