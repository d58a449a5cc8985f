"""The code's layout rules: no function past the size ceilings of pyproject.toml (ruff's C901 complexity and PLR0915
statement count: big functions are split at their seams; `ruff check .` enforces it, `make lint`), and no code file
but the adapter registry names three or more source slugs (a fifth source must need no edit elsewhere)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

from upstream_adapters import ADAPTERS

REPO = Path(__file__).resolve().parent.parent
REGISTRY = REPO / "upstream_adapters" / "__init__.py"
LINT = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]


def code_files(root: Path) -> list[Path]:
    skip = {"tests", "build", "release"}  # top-level folders only (pipeline/release/ is code)
    # hidden top-level folders hold virtualenvs (.venv, lmms-eval's .venv-lmms) and tool state, not the project's code
    return sorted(
        p for p in root.rglob("*.py") if (top := p.relative_to(root).parts[0]) not in skip and not top.startswith(".")
    )


def naming_many_sources(files: list[Path], slugs: list[str]) -> list[str]:
    word = re.compile(r"\b(%s)\b" % "|".join(map(re.escape, slugs)))
    return [
        f"{p.name}: {sorted(found)}"
        for p in files
        if p != REGISTRY and len(found := set(word.findall(p.read_text()))) >= 3
    ]


def size_findings(path: Path) -> list[str]:
    """The function-size rules ruff reports for one file, with the repository's configuration."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--config",
            str(REPO / "pyproject.toml"),
            "--select",
            "C901,PLR0915",
            "--output-format",
            "concise",
            "--no-cache",
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return sorted(set(re.findall(r"\b(C901|PLR0915)\b", out.stdout)))


def test_the_function_size_rule_is_configured():
    assert {"C901", "PLR0915"} <= set(LINT["select"])
    assert LINT["mccabe"]["max-complexity"] <= 30 and LINT["pylint"]["max-statements"] <= 90


def test_only_the_registry_names_three_or_more_sources():
    assert naming_many_sources(code_files(REPO), sorted(ADAPTERS)) == []


def test_the_layout_rules_see_planted_violations(tmp_path):
    statements, complexity = LINT["pylint"]["max-statements"], LINT["mccabe"]["max-complexity"]
    (tmp_path / "long.py").write_text("def f():\n" + "    x = 1\n" * (statements + 1))
    (tmp_path / "short.py").write_text("def f():\n" + "    x = 1\n" * statements)
    (tmp_path / "branchy.py").write_text(
        "def f(x):\n" + "".join(f"    if x == {i}:\n        return {i}\n" for i in range(complexity))
    )
    assert size_findings(tmp_path / "long.py") == ["PLR0915"]
    assert size_findings(tmp_path / "short.py") == []
    assert size_findings(tmp_path / "branchy.py") == ["C901"]
    (tmp_path / "lists.py").write_text('SOURCES = ["gm100", "rh20t", "aist"]\n')
    (tmp_path / "one.py").write_text('SLUG = "gm100"  # rh20t too\n')
    files = code_files(tmp_path)
    assert naming_many_sources(files, sorted(ADAPTERS)) == ["lists.py: ['aist', 'gm100', 'rh20t']"]
