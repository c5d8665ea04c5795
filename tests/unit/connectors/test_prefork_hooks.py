"""The connectors' pre-fork hook registry (issue 41, item 1): the Spark worker daemon
warms connectors up through it without naming any."""

from __future__ import annotations

import ast
import pathlib

import pytest

import lockgate
import lockgate.connectors
from lockgate.connectors import prefork


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> dict[str, prefork.PreforkHook]:
    hooks: dict[str, prefork.PreforkHook] = {}
    monkeypatch.setattr(prefork, "_HOOKS", hooks)
    return hooks


def test_hooks_run_once_each_in_the_order_registered(registry) -> None:
    ran: list[str] = []
    prefork.register_prefork_hook("a.one", lambda: ran.append("a"))
    prefork.register_prefork_hook("b.two", lambda: ran.append("b"))
    prefork.register_prefork_hook("a.one", lambda: ran.append("a2"))  # replaces, keeps place
    assert prefork.run_prefork_hooks() == {"a.one": "ok", "b.two": "ok"}
    assert ran == ["a2", "b"]


def test_a_failing_hook_is_contained_and_the_others_still_run(registry) -> None:
    ran: list[str] = []

    def broken() -> None:
        raise RuntimeError("no compiler here")

    prefork.register_prefork_hook("x.broken", broken)
    prefork.register_prefork_hook("y.fine", lambda: ran.append("y"))
    outcomes = prefork.run_prefork_hooks()
    assert outcomes["x.broken"].startswith("failed: RuntimeError('no compiler here')")
    assert outcomes["y.fine"] == "ok" and ran == ["y"]


def test_compiling_hooks_are_skipped_when_the_daemon_is_told_to(registry) -> None:
    ran: list[str] = []
    prefork.register_prefork_hook("k.imports", lambda: ran.append("imports"))
    prefork.register_prefork_hook("k.kernels", lambda: ran.append("kernels"), compiles=True)
    assert prefork.run_prefork_hooks(compile_kernels=False) == {
        "k.imports": "ok",
        "k.kernels": "skipped",
    }
    assert ran == ["imports"]


@pytest.mark.parametrize("name, run", [("", lambda: None), ("a.b", "not callable")])
def test_a_bad_registration_is_refused_saying_what_is_wrong(registry, name, run) -> None:
    with pytest.raises((ValueError, TypeError), match="pre-fork hook"):
        prefork.register_prefork_hook(name, run)


def test_importing_the_connectors_registers_kafkas_hooks() -> None:
    hooks = {h.name: h for h in prefork.prefork_hooks()}
    assert hooks["kafka.clients"].compiles is False
    assert hooks["kafka.kernels"].compiles is True


def test_the_spark_daemon_names_no_connector() -> None:
    """The daemon imports ``lockgate.connectors`` and the registry, nothing of any one
    connector (the registry is how a connector is warmed up)."""
    daemon = pathlib.Path(lockgate.__file__).parent / "executor" / "spark" / "daemon.py"
    imported: set[str] = set()
    for node in ast.walk(ast.parse(daemon.read_text())):
        if isinstance(node, ast.Import):
            imported.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
    connectors = {m for m in imported if m.startswith("lockgate.connectors")}
    assert connectors == {"lockgate.connectors", "lockgate.connectors.prefork"}
    assert "kafka" not in daemon.read_text().lower()
