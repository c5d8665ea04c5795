"""Every public name the README and the documentation use exists: each ``lg.X.Y`` chain
and each ``from lockgate... import ...`` or ``import lockgate...`` in their code (fenced
blocks and inline code) resolves against the installed package. A module moved or a
class renamed without its docs fails here, naming the page and the name."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import lockgate

ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
INLINE = re.compile(r"`([^`\n]+)`")
CHAIN = re.compile(r"(?<![\w.])lg((?:\.[A-Za-z_]\w*)+)")
FROM_IMPORT = re.compile(r"^\s*from\s+(lockgate(?:\.\w+)*)\s+import\s+(\([^)]*\)|[^\n#]+)", re.M)
IMPORT = re.compile(r"^\s*import\s+(lockgate(?:\.\w+)*)", re.M)


def code_of(text: str) -> str:
    """The code of a markdown text: its fenced blocks and its inline code spans."""
    blocks = FENCE.findall(text)
    prose = FENCE.sub("", text)
    return "\n".join(blocks + INLINE.findall(prose))


def unresolved(code: str) -> list[str]:
    """The lockgate names ``code`` uses that do not exist."""
    bad: list[str] = []
    for chain in sorted(set(CHAIN.findall(code))):
        obj: object = lockgate
        for part in chain.strip(".").split("."):
            if isinstance(obj, type(lockgate)) and not hasattr(obj, part):
                try:  # a submodule not imported by its package's __init__
                    obj = importlib.import_module(f"{obj.__name__}.{part}")
                    continue
                except ImportError:
                    pass
            if not hasattr(obj, part):
                bad.append(f"lg{chain}")
                break
            obj = getattr(obj, part)
            if not isinstance(obj, (type, type(lockgate))):
                break  # a function or value: what follows is its own attribute or a call
    for module, names in FROM_IMPORT.findall(code):
        try:
            mod = importlib.import_module(module)
        except ImportError:
            bad.append(f"from {module} import ...")
            continue
        for name in re.split(r"[\s,()]+", names):
            name = name.split(" as ")[0].strip()
            if name and name != "as" and not hasattr(mod, name):
                bad.append(f"from {module} import {name}")
    for module in IMPORT.findall(code):
        try:
            importlib.import_module(module)
        except ImportError:
            bad.append(f"import {module}")
    return bad


def test_every_lockgate_name_in_the_readme_and_docs_exists() -> None:
    assert len(DOCS) > 10, "README.md and docs/*.md not found"
    found = {d.relative_to(ROOT).as_posix(): code_of(d.read_text(encoding="utf-8")) for d in DOCS}
    assert sum(len(CHAIN.findall(c)) for c in found.values()) > 100, "the scan found no names"
    missing = {page: bad for page, code in found.items() if (bad := unresolved(code))}
    assert not missing, f"names the docs use that lockgate does not have: {missing}"


def test_the_scan_catches_a_missing_name_and_a_missing_import() -> None:
    code = code_of(
        "Use `lg.StreamEnvironment` and `lg.NoSuchThing(1)`.\n"
        "```python\nfrom lockgate.connectors import KafkaSource, Nope\n"
        "import lockgate.nowhere\nx = lg.RestartStrategy.fixed_delay(attempts=1).anything\n```\n"
    )
    assert unresolved(code) == [
        "lg.NoSuchThing",
        "from lockgate.connectors import Nope",
        "import lockgate.nowhere",
    ]
