"""Where a job's REST API listens and which token it takes, as the process was told.

``ExecutionConfig.rest_bind`` / ``rest_port`` say where a job's REST API listens, and the
token is a new random one per job. A driver started by someone else's tooling (``lockgate run
--rest-bind ... --rest-port ... --rest-token-file ...``, and so ``lockgate submit``, whose
driver runs on a cluster worker nobody logs in to) must be reachable at an address and with a
token known before it starts: these environment variables, when set, override the job's
configuration:

* ``LOCKGATE_REST_BIND``: the address to listen on (e.g. ``0.0.0.0``);
* ``LOCKGATE_REST_PORT``: the port (0: any free one);
* ``LOCKGATE_REST_TOKEN_FILE``: a file holding the token (at least 24 characters, no
  whitespace inside). The file must be the current user's own (owned by them, and not
  reached through a symlink another user owns: in a shared folder anyone can plant a
  0600 file whose token they know) and private (no group or other permission bits): a
  token anyone on the machine can read protects nothing.

Guarantees: :func:`rest_settings` either returns settings that pass the same checks as
``ExecutionConfig`` or raises :class:`~lockgate.errors.ConfigurationError` naming the variable,
what is wrong and how to fix it; the token is never part of a message.
"""

from __future__ import annotations

import os
import secrets
import stat
from dataclasses import dataclass

from ..errors import ConfigurationError

BIND_ENV = "LOCKGATE_REST_BIND"
PORT_ENV = "LOCKGATE_REST_PORT"
TOKEN_FILE_ENV = "LOCKGATE_REST_TOKEN_FILE"
#: the shortest token a token file may hold
MIN_TOKEN_LENGTH = 24
#: the largest token file read (bytes)
MAX_TOKEN_FILE_BYTES = 4096


@dataclass(frozen=True)
class RestSettings:
    """Where to listen and the token every request must carry (``repr`` hides it)."""

    bind: str
    port: int
    token: str

    def __repr__(self) -> str:
        return f"RestSettings(bind={self.bind!r}, port={self.port}, token=<hidden>)"


def parse_port(text: str, what: str) -> int:
    """``text`` as a port 0..65535; raises ``ConfigurationError`` naming ``what``."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ConfigurationError(
            f"{what}: expected a port from 0 (any free one) to 65535, got {text!r}"
        )
    return port


#: symlinks followed on the way to a token file before giving up (as the kernel's limit)
MAX_SYMLINKS = 40


def _user_name(uid: int) -> str:
    """``uid 65534 (nobody)``: the uid and, when known, its name."""
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def _foreign_symlink(path: str, me: int) -> tuple[str, int] | None:
    """The first symlink on the way to ``path`` (its folders' and its own) owned by
    neither ``me`` nor root, with its owner; None when there is none. Whoever owns a
    symlink chooses what it points to. Resolution as the kernel's (``..`` after a link
    goes up from where the link led); a missing part ends the walk (opening the file
    then reports it)."""
    pending = [p for p in os.path.abspath(path).split("/") if p]
    current = "/"
    hops = 0
    while pending:
        name = pending.pop(0)
        if name == ".":
            continue
        if name == "..":
            current = os.path.dirname(current)
            continue
        candidate = os.path.join(current, name)
        try:
            info = os.lstat(candidate)
        except OSError:
            return None
        if not stat.S_ISLNK(info.st_mode):
            current = candidate
            continue
        if info.st_uid not in (me, 0):
            return candidate, info.st_uid
        hops += 1
        if hops > MAX_SYMLINKS:
            return None  # a loop: opening the file reports it (ELOOP)
        target = os.readlink(candidate)
        if target.startswith("/"):
            current = "/"
        pending[:0] = [p for p in target.split("/") if p]
    return None


def read_token_file(path: str, what: str) -> str:
    """The token in the file ``path``; raises ``ConfigurationError`` naming ``what`` when
    the file is missing, not the current user's own (owned by another user, or reached
    through a symlink another user owns: its owner knows the token or picks the file),
    not private to its owner, too large, or holds no usable token.

    The checks are made on the file opened (``fstat`` of the descriptor read), so the
    file cannot be swapped between the checks and the read."""
    me = os.geteuid()
    link = _foreign_symlink(path, me)
    if link is not None:
        where, owner = link
        trusted = f"you ({_user_name(me)})" + ("" if me == 0 else " or root")
        raise ConfigurationError(
            f"{what} {path}: reached through the symlink {where} owned by "
            f"{_user_name(owner)}, not by {trusted}: its owner chooses which file is read; "
            "give the path of a token file of your own, reached through no other user's link"
        )
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOCTTY", 0) | os.O_NONBLOCK)
    except OSError as e:
        raise ConfigurationError(f"{what} {path}: cannot read it ({e.strerror})") from None
    with open(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ConfigurationError(f"{what} {path}: not a regular file")
        if info.st_uid != me:
            raise ConfigurationError(
                f"{what} {path}: the file is owned by {_user_name(info.st_uid)}, not by you "
                f"({_user_name(me)}): whoever created it knows the token (in a shared "
                f"folder such as /tmp anyone can plant one); create your own, e.g. "
                f"(umask 077; python -c 'import secrets; print(secrets.token_urlsafe(32))' "
                f"> ~/.lockgate-token) && chmod 600 ~/.lockgate-token, and pass that file"
            )
        if info.st_mode & 0o077:
            raise ConfigurationError(
                f"{what} {path}: the file is readable or writable by others "
                f"(mode {stat.S_IMODE(info.st_mode):o}); make it private with chmod 600 {path}"
            )
        if info.st_size > MAX_TOKEN_FILE_BYTES:
            raise ConfigurationError(f"{what} {path}: {info.st_size} bytes, more than a token")
        raw = f.read(MAX_TOKEN_FILE_BYTES + 1)
    try:
        token = raw.decode("utf-8", errors="strict").strip()
    except UnicodeDecodeError:
        token = ""
    if len(raw) > MAX_TOKEN_FILE_BYTES:
        raise ConfigurationError(
            f"{what} {path}: more than {MAX_TOKEN_FILE_BYTES} bytes, more than a token"
        )
    if len(token) < MIN_TOKEN_LENGTH or any(c.isspace() for c in token):
        raise ConfigurationError(
            f"{what} {path}: the file must hold one token of at least {MIN_TOKEN_LENGTH} "
            "characters without whitespace, e.g. the output of "
            "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    return token


def rest_settings(bind: str, port: int) -> RestSettings:
    """The job's REST settings: ``bind`` and ``port`` from its configuration unless the
    environment (``LOCKGATE_REST_BIND`` / ``_PORT`` / ``_TOKEN_FILE``) says otherwise; a
    new random token unless a token file is given."""
    environ = os.environ
    if environ.get(BIND_ENV, "").strip():
        bind = environ[BIND_ENV].strip()
    if environ.get(PORT_ENV, "").strip():
        port = parse_port(environ[PORT_ENV].strip(), PORT_ENV)
    token_file = environ.get(TOKEN_FILE_ENV, "").strip()
    token = read_token_file(token_file, TOKEN_FILE_ENV) if token_file else None
    return RestSettings(bind, port, token or secrets.token_urlsafe(32))
