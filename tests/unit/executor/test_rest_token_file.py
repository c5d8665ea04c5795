"""``--rest-token-file`` / ``LOCKGATE_REST_TOKEN_FILE`` (issue 37, item 6): the token file
must be the current user's own, not only private. A 0600 file planted by another user (in a
shared sticky folder such as /tmp) or a symlink someone else owns is refused: the planter
knows the token, or chooses which file is read. The error names what is wrong and how to
fix it, and never the token.

The tests run as root here: a file of another user is a tmp file given to uid 65534
(nobody) with ``os.chown`` / ``os.lchown``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lockgate import cli
from lockgate.core import rest_settings
from lockgate.errors import ConfigurationError
from lockgate.executor import job_registry

TOKEN = "t0ken-of-the-test-abcdefghijklmnopqrstuvwxyz"
OTHER_UID = 65534  # nobody


def own_token_file(folder: Path, name: str = "token") -> Path:
    path = folder / name
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture
def can_chown() -> None:
    """Giving a file away needs root (or CAP_CHOWN); the test environment runs as root."""
    assert os.geteuid() == 0, (
        "these tests give files to uid 65534 with os.chown, which needs root: run them "
        "as root (the project's test environment does)"
    )


def test_the_users_own_private_file_and_a_symlink_the_user_owns_are_accepted(
    tmp_path: Path,
) -> None:
    path = own_token_file(tmp_path)
    assert rest_settings.read_token_file(str(path), "--rest-token-file") == TOKEN
    link = tmp_path / "link"
    link.symlink_to(path)
    assert rest_settings.read_token_file(str(link), "--rest-token-file") == TOKEN
    # a link to a folder, with a relative target and a '..' after it
    (tmp_path / "sub").mkdir()
    (tmp_path / "dirlink").symlink_to("sub")
    assert rest_settings.read_token_file(str(tmp_path / "dirlink" / ".." / "token"), "x") == TOKEN


def test_a_private_file_planted_by_another_user_is_refused(can_chown: None, tmp_path: Path) -> None:
    path = own_token_file(tmp_path, "planted")
    os.chown(path, OTHER_UID, OTHER_UID)  # 0600, but nobody's: nobody knows the token
    with pytest.raises(ConfigurationError) as caught:
        rest_settings.read_token_file(str(path), "--rest-token-file")
    message = str(caught.value)
    assert f"owned by uid {OTHER_UID}" in message, message
    assert "--rest-token-file" in message and str(path) in message
    assert "create" in message and "chmod 600" in message, "says how to fix it"
    assert TOKEN not in message


def test_a_symlink_another_user_owns_is_refused_even_to_the_users_own_file(
    can_chown: None, tmp_path: Path
) -> None:
    target = own_token_file(tmp_path)
    link = tmp_path / "planted-link"
    link.symlink_to(target)
    os.lchown(link, OTHER_UID, OTHER_UID)
    with pytest.raises(ConfigurationError) as caught:
        rest_settings.read_token_file(str(link), "--rest-token-file")
    message = str(caught.value)
    assert f"symlink {link}" in message and f"owned by uid {OTHER_UID}" in message, message
    assert TOKEN not in message
    # a link on the way (a folder's) counts the same
    (tmp_path / "real").mkdir()
    own_token_file(tmp_path / "real")
    folder_link = tmp_path / "shared"
    folder_link.symlink_to(tmp_path / "real")
    os.lchown(folder_link, OTHER_UID, OTHER_UID)
    with pytest.raises(ConfigurationError, match=f"symlink {folder_link} .*uid {OTHER_UID}"):
        rest_settings.read_token_file(str(folder_link / "token"), "--rest-token-file")


def test_a_link_the_user_owns_to_another_users_file_is_refused(
    can_chown: None, tmp_path: Path
) -> None:
    planted = own_token_file(tmp_path, "planted")
    os.chown(planted, OTHER_UID, OTHER_UID)
    link = tmp_path / "mine"
    link.symlink_to(planted)
    with pytest.raises(ConfigurationError, match=f"owned by uid {OTHER_UID}"):
        rest_settings.read_token_file(str(link), "--rest-token-file")


def test_the_environment_variable_and_the_cli_refuse_a_planted_file(
    can_chown: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    path = own_token_file(tmp_path, "planted")
    os.chown(path, OTHER_UID, OTHER_UID)
    monkeypatch.setenv(rest_settings.TOKEN_FILE_ENV, str(path))
    with pytest.raises(ConfigurationError, match=rest_settings.TOKEN_FILE_ENV):
        rest_settings.rest_settings("127.0.0.1", 0)
    monkeypatch.delenv(rest_settings.TOKEN_FILE_ENV)
    monkeypatch.setenv(job_registry.HOME_ENV, str(tmp_path / "home"))
    job = tmp_path / "job.py"
    job.write_text("")
    rc = cli.main(
        ["submit", "--master", "spark://h:7077", "--rest-token-file", str(path), str(job)]
    )
    out, err = capsys.readouterr()
    assert rc == 2 and f"owned by uid {OTHER_UID}" in err, (out, err)
    assert TOKEN not in out + err
