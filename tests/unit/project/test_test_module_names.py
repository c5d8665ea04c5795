"""The test folders have no ``__init__.py``: pytest imports each test module by its
basename, so two modules of one name in different folders make the second fail to
collect ("import file mismatch") - in a full run only, never when either runs alone."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]


def test_every_test_module_has_a_name_of_its_own() -> None:
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in sorted(TESTS.rglob("*.py")):
        if "__pycache__" not in path.parts:
            by_name[path.name].append(str(path.relative_to(TESTS)))
    clashes = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not clashes, (
        f"test modules sharing a basename: {clashes}; rename one (e.g. a unit test of an "
        "operator as test_<thing>_operator.py)"
    )


def test_a_test_module_imports_other_test_modules_of_its_own_folder_only() -> None:
    """pytest puts each test folder on ``sys.path`` as it collects it, so an import of a
    test module from another folder works in a full run (that folder came first) and
    fails when the importing module runs alone. Shared helpers live in ``tests/``."""
    import re

    wrong = []
    for path in sorted(TESTS.rglob("test_*.py")):
        for match in re.finditer(r"^\s*(?:from|import) (test_\w+)", path.read_text(), re.M):
            if not (path.parent / f"{match.group(1)}.py").is_file():
                wrong.append(f"{path.relative_to(TESTS)} imports {match.group(1)}")
    assert not wrong, "imports of test modules from other folders: " + "; ".join(wrong)
