"""What to tell a user whose source root is missing or unusable: the full path, what the adapter expects there, the
nearest folder that does hold that layout, and the fix (for real data: point --upstream there; for the repository's
sample corpus: make it). Never a command that writes sample corpora next to a user's own data.

The nearest match is found by the adapter itself: `discover` is tried on the folders around the root (its
subfolders up to `DEPTH` levels, breadth first, then its parents), so every source's layout rules are its adapter's
own. A Hugging Face cache folder of a repository (`blobs/ refs/ snapshots/`) gets its own hint: the data is under
`snapshots/<commit>/`."""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING
import os
from pathlib import Path

from upstream_adapters import get_adapter

from pipeline.settings.config import path_in_repo

if TYPE_CHECKING:
    from pipeline.settings.root import Settings

DEPTH = 3  # subfolder levels searched below the root
MAX_DIRS = 200  # folders tried at most (a big wrong folder is not crawled)


def is_sample_root(root: Path) -> bool:
    """The repository's own sample corpus folder (build/samples/...), which `make rebuild` / --samples writes."""
    return Path(root).resolve().is_relative_to(path_in_repo("build/samples").resolve())


def hf_snapshots(folder: Path) -> list[Path]:
    """The `snapshots/<commit>` folders when `folder` is a Hugging Face hub cache folder of one repository."""
    snaps = folder / "snapshots"
    if not (snaps.is_dir() and ((folder / "refs").is_dir() or (folder / "blobs").is_dir())):
        return []
    return sorted(p for p in snaps.iterdir() if p.is_dir())


def _candidates(root: Path):
    seen = 0
    level = [root]
    for _ in range(DEPTH):
        nxt = []
        for folder in level:
            try:
                subs = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
            except OSError:
                continue
            for p in subs:
                seen += 1
                if seen > MAX_DIRS:
                    return
                yield p
                nxt.append(p)
        level = nxt
    yield from list(root.parents)[:2]


def nearest_match(slug: str, root: Path, options: dict | None = None) -> Path | None:
    """The nearest folder around `root` where the adapter finds units (None when there is none)."""
    adapter = get_adapter(slug, **(options or {}))
    for folder in _candidates(root):
        try:
            if adapter.discover(folder):
                return folder
        except Exception:  # noqa: BLE001 - not this folder
            continue
    return None


def _layout(slug: str) -> str:
    from upstream_adapters import ADAPTERS
    import importlib

    module, cls = ADAPTERS[slug].split(":")
    adapter = getattr(importlib.import_module(module), cls)
    return getattr(adapter, "layout", "") or f"the {slug} layout (docs/upstream-formats.md)"


def _fix(slug: str, root: Path, found: Path | None) -> str:
    if found is not None:
        return f"build with --upstream {slug}={found} (or set sources.{slug}.root to it)"
    if is_sample_root(root):
        return "regenerate the sample corpus: `make rebuild` or `processbench build --samples`"
    return (
        f"point --upstream {slug}=PATH (or sources.{slug}.root) at the folder that holds this layout "
        "(docs/upstream-formats.md)"
    )


def unusable_message(slug: str, root: Path, reason: str, options: dict | None = None) -> str:
    """One line: the full path, why it is unusable, what is expected there, the nearest match, the fix."""
    root = Path(root).absolute()
    snaps = hf_snapshots(root)
    found = snaps[-1] if len(snaps) == 1 else None
    if found is None and not snaps:
        found = nearest_match(slug, root, options)
    text = f"{slug}: no usable source at {root}: {reason}. Expected there: {_layout(slug)}."
    if snaps:
        shown = ", ".join(str(p) for p in snaps)
        text += (
            f" This is a Hugging Face cache folder of a repository: the files are under snapshots/<commit>/ "
            f"(here: {shown})."
        )
    elif found is not None:
        text += f" Nearest match: {found}."
    return f"{text} Fix: {_fix(slug, root, found)}."


def missing_corpus(cfg: Settings, slug: str) -> str | None:
    """What to tell the user when the source's root does not exist (None when it does)."""
    root = Path(cfg.sources[slug].root)
    return None if root.exists() else missing_message(slug, root, cfg.build.scale)


def missing_message(slug: str, root: Path, scale: str) -> str:
    """One line for a root that does not exist: for the sample corpus, how to make it; for a user's path, the
    nearest existing folder and the names there closest to the one mistyped (nothing is written anywhere)."""
    root = Path(root).absolute()
    if is_sample_root(root):
        shown = root.relative_to(path_in_repo(".")) if root.is_relative_to(path_in_repo(".")) else root
        return (
            f"no corpus at {shown} for source {slug}: run `make rebuild` (or `processbench build --samples`, or "
            f"`processbench samples --scale {scale} --out {shown.parent} --sources {slug}`), or pass "
            f"--upstream {slug}=PATH to read your own copy"
        )
    existing = next((p for p in root.parents if p.is_dir()), Path("/"))
    missing_part = root.relative_to(existing).parts[0]
    try:
        names = sorted(e for e in os.listdir(existing) if not e.startswith("."))
    except OSError:
        names = []
    close = difflib.get_close_matches(missing_part, names, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(str(existing / c) for c in close)}?" if close else ""
    return (
        f"{slug}: no folder at {root} (the nearest existing folder is {existing}, which has no "
        f"{missing_part!r}{hint}) Fix: pass --upstream {slug}=PATH with the folder that holds "
        f"{_layout(slug)}"
    )


# `processbench ingest --help`: every source with its adapter's options
OPTIONS_HELP = "<the sources and their adapter options>"  # replaced lazily: listing them imports every adapter


def options_help() -> str:
    """The help text listing every registered source with its adapter's options and what each means."""
    import importlib
    import textwrap

    from upstream_adapters import ADAPTERS

    lines = ["sources and their adapter options (--option KEY=VALUE; defaults from configs/sources.yaml):"]
    for slug, spec in ADAPTERS.items():
        module, cls = spec.split(":")
        adapter = getattr(importlib.import_module(module), cls)
        lines.append(f"  {slug} ({adapter.name}, unit = {adapter.unit_type})")
        for key, meaning in adapter.options.items():
            lines.extend(textwrap.wrap(f"{key}: {meaning}", 100, initial_indent="      ", subsequent_indent="        "))
    return "\n".join(lines)


class IngestHelpFormatter:
    """argparse formatter factory: RawDescriptionHelpFormatter that expands OPTIONS_HELP only when help is shown."""

    def __new__(cls, *args, **kwargs):
        import argparse

        class _Formatter(argparse.RawDescriptionHelpFormatter):
            def add_text(self, text):
                super().add_text(options_help() if text == OPTIONS_HELP else text)

        return _Formatter(*args, **kwargs)
