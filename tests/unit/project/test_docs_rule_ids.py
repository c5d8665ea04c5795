"""The documentation in the repository stays whole: every mechanism rule id the code,
the tests or the benchmarks cite is defined in ``docs/mechanisms.md`` (as a heading or a
table row), and every relative link in ``README.md`` and ``docs/*.md`` points at a file
or folder that exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CITING_FOLDERS = ("lockgate", "tests", "bench")
CITING_SUFFIXES = {".py", ".sh", ".md", ".txt", ".toml", ".sql"}
RULE_ID = re.compile(r"\bM-[A-Z]+[0-9]+\b")
HEADING_ID = re.compile(r"^#{1,6}\s+\**(M-[A-Z]+[0-9]+)\b", re.MULTILINE)
TABLE_ROW_ID = re.compile(r"^\|\s*\**(M-[A-Z]+[0-9]+)\**\s*\|", re.MULTILINE)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")


def cited_rule_ids(root: Path = ROOT) -> dict[str, list[str]]:
    """Rule id -> the files (relative to ``root``) that cite it."""
    cited: dict[str, list[str]] = {}
    for folder in CITING_FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            if not path.is_file() or path.suffix not in CITING_SUFFIXES:
                continue
            if "__pycache__" in path.parts:
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            for rule in sorted(set(RULE_ID.findall(text))):
                cited.setdefault(rule, []).append(str(path.relative_to(root)))
    return cited


def defined_rule_ids(mechanisms_md: str) -> set[str]:
    """The rule ids a mechanisms document defines: as a heading or a table row's first cell."""
    return set(HEADING_ID.findall(mechanisms_md)) | set(TABLE_ROW_ID.findall(mechanisms_md))


def broken_relative_links(doc: Path) -> list[str]:
    """The relative link targets in the markdown file ``doc`` that name no existing path
    (links inside code are not links; URLs and in-page anchors are skipped)."""
    text = INLINE_CODE.sub("", FENCE.sub("", doc.read_text(encoding="utf-8")))
    broken = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        if path and not (doc.parent / path).exists():
            broken.append(target)
    return broken


def test_every_rule_id_cited_in_code_tests_and_bench_is_defined_in_docs_mechanisms():
    mechanisms = ROOT / "docs" / "mechanisms.md"
    assert mechanisms.is_file(), "docs/mechanisms.md is missing: it defines the rule ids"
    defined = defined_rule_ids(mechanisms.read_text(encoding="utf-8"))
    cited = cited_rule_ids()
    assert cited, "no rule id found in lockgate/, tests/ or bench/: the scan is broken"
    missing = {rule: files for rule, files in cited.items() if rule not in defined}
    assert not missing, (
        "rule ids cited but not defined (as a heading or table row) in docs/mechanisms.md: "
        + "; ".join(
            f"{rule} (cited in {', '.join(files[:3])})" for rule, files in sorted(missing.items())
        )
    )


def test_every_relative_link_in_readme_and_docs_points_at_an_existing_file():
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    assert len(docs) >= 4, (
        "expected README.md and docs/architecture.md, mechanisms.md, operations.md"
    )
    broken = {str(d.relative_to(ROOT)): links for d in docs if (links := broken_relative_links(d))}
    assert not broken, f"relative links to missing files: {broken}"


def test_the_docs_have_the_three_documents_and_the_readme_links_them():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name in ("architecture.md", "mechanisms.md", "operations.md"):
        assert (ROOT / "docs" / name).is_file(), f"docs/{name} is missing"
        assert f"](docs/{name})" in readme, f"README.md does not link docs/{name}"


def test_the_checks_catch_an_undefined_id_and_a_broken_link(tmp_path):
    """The scanners themselves: an id only in a paragraph is not defined; a link to a
    missing file is reported, one inside code or to a URL is not."""
    q1, q2, q3 = ("M-" + "Q" + str(n) for n in (1, 2, 3))  # not literal: this file is scanned
    md = f"# Rules\n\n### {q1} — defined\n\n| {q2} | also defined |\n\nText citing {q3}.\n"
    assert defined_rule_ids(md) == {q1, q2}
    (tmp_path / "there.md").write_text("x")
    doc = tmp_path / "doc.md"
    doc.write_text(
        "[ok](there.md) [gone](missing.md#a) [url](https://example.com/x) "
        "[anchor](#top) `[code](nowhere.md)`\n```\n[fenced](nowhere.md)\n```\n"
    )
    assert broken_relative_links(doc) == ["missing.md#a"]
    (tmp_path / "lockgate").mkdir()
    (tmp_path / "lockgate" / "m.py").write_text(f'"""Cites {q3} and {q1}."""\n')
    assert cited_rule_ids(tmp_path) == {q1: ["lockgate/m.py"], q3: ["lockgate/m.py"]}
