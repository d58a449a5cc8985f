"""The code's layout rules: no non-test Python file over MAX_LINES lines (big files are split along their seams), and
no code file but the adapter registry names three or more source slugs (a fifth source must need no edit elsewhere)."""

from __future__ import annotations

import re
from pathlib import Path

from upstream_adapters import ADAPTERS

REPO = Path(__file__).resolve().parent.parent
MAX_LINES = 500
REGISTRY = REPO / "upstream_adapters" / "__init__.py"


def code_files(root: Path) -> list[Path]:
    skip = {"tests", ".venv", "build", "release"}
    return sorted(p for p in root.rglob("*.py") if not skip & set(p.relative_to(root).parts))


def too_long(files: list[Path]) -> list[str]:
    return [f"{p.name}: {n} lines" for p in files if (n := len(p.read_text().splitlines())) > MAX_LINES]


def naming_many_sources(files: list[Path], slugs: list[str]) -> list[str]:
    word = re.compile(r"\b(%s)\b" % "|".join(map(re.escape, slugs)))
    return [f"{p.name}: {sorted(found)}" for p in files
            if p != REGISTRY and len(found := set(word.findall(p.read_text()))) >= 3]


def test_no_code_file_over_the_line_limit():
    assert too_long(code_files(REPO)) == []


def test_only_the_registry_names_three_or_more_sources():
    assert naming_many_sources(code_files(REPO), sorted(ADAPTERS)) == []


def test_the_layout_rules_see_planted_violations(tmp_path):
    (tmp_path / "big.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "ok.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / "lists.py").write_text('SOURCES = ["gm100", "rh20t", "aist"]\n')
    (tmp_path / "one.py").write_text('SLUG = "gm100"  # rh20t too\n')
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "big_test.py").write_text("x = 1\n" * (MAX_LINES + 1))
    files = code_files(tmp_path)
    assert too_long(files) == [f"big.py: {MAX_LINES + 1} lines"]
    assert naming_many_sources(files, sorted(ADAPTERS)) == ["lists.py: ['aist', 'gm100', 'rh20t']"]
