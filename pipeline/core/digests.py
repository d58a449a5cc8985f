"""Digests that decide whether stored work is still valid: of the code, of a file, of the config sections a
computation reads. assets/fingerprint.py builds the steps' fingerprints from them; the candidates stage keys its
per-family tables with them (pipeline/stages.py run_candidates)."""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent

# The config keys that change no byte the build writes, per configs/ section: where things lie on this machine (the
# work and release folders, a source's root: its content is fingerprinted on its own) and how the build spreads over
# processes (every engine, worker and shard count builds the same bytes). The ONE list: left out of the steps'
# fingerprints and the per-family / selection keys (config_part) and of the release's config hash
# (pipeline/publish/provenance.py config_hash), so editing one of them neither re-runs a step nor changes the release.
NO_OUTPUT_KEYS: dict[str, tuple[str, ...]] = {
    "build": ("work_dir", "release_dir", "executor"),
    "sources": ("root", "ingest_shards"),  # per source: sources.<slug>.root, sources.<slug>.ingest_shards
    "split": ("workers",),
    "release": ("max_file_bytes",),  # what the validator reads, not what the build writes
}


def without_no_output_keys(section: str, value, per_source: bool = False):
    """`value` (the config section `section`, or with `per_source` one source's entry of `sources`) without the
    NO_OUTPUT_KEYS of that section."""
    keys = NO_OUTPUT_KEYS.get(section, ())
    if not isinstance(value, dict) or not keys:
        return value
    if section == "sources" and not per_source:
        return {slug: without_no_output_keys(section, entry, per_source=True) for slug, entry in value.items()}
    return {k: v for k, v in value.items() if k not in keys}


@lru_cache(maxsize=None)
def code_digest(packages: tuple[str, ...] = ("pipeline", "upstream_adapters", "assets")) -> str:
    """sha256 over the path and bytes of every .py file of the given packages (of this repository)."""
    h = hashlib.sha256()
    for pkg in packages:
        for p in sorted((REPO / pkg).rglob("*.py")):
            h.update(p.relative_to(REPO).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def file_digest(path: Path) -> str | None:
    if not path.is_file():
        return None
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# What a key a computation does not read holds in its view of the settings (`hidden_view`): a text that fails any
# use as a template (str.format raises KeyError naming it), so code that reads it anyway breaks instead of going stale.
HIDDEN = "{not read by this step: assets/tables.py Step.hides}"


def hidden_keys(data: dict, patterns: tuple[str, ...]) -> list[str]:
    """The dotted keys of `data` (a settings dump) that `patterns` name; `*` stands for any key at its level
    (`tasks.*.question`: every template's question). A pattern that names no key is an error, so a renamed field
    cannot silently leave a step reading what its fingerprint leaves out."""
    out = []
    for pattern in patterns:
        found = [""]
        for part in pattern.split("."):
            found = [
                f"{prefix}.{k}" if prefix else k
                for prefix in found
                for k in (_at(data, prefix) if part == "*" else [part])
                if isinstance(_at(data, prefix), dict) and k in _at(data, prefix)
            ]
        if not found:
            raise KeyError(f"hidden config key {pattern!r} names no key of the settings")
        out += found
    return out


def _at(data: dict, dotted: str):
    for k in dotted.split(".") if dotted else ():
        data = data[k]
    return data


def hidden_view(settings, patterns: tuple[str, ...]):
    """`settings` with the keys `patterns` name set to HIDDEN: what a step that does not read them runs with (and its
    fingerprint covers), so an edit of those keys neither re-runs it nor can reach it."""
    if not patterns:
        return settings
    return settings.with_values({k: HIDDEN for k in hidden_keys(settings.model_dump(), patterns)})


def config_part(settings, sections: tuple[str, ...], hides: tuple[str, ...] = ()) -> dict:
    """The config sections a computation reads (of a pipeline.settings.root.Settings): `labels`, `sources.<slug>`
    (one source's entry), `tasks.<slug>` (the templates that list the source), `*` = all; the NO_OUTPUT_KEYS left
    out, and the keys `hides` names (hidden_keys) as HIDDEN."""
    cfg = settings.model_dump()
    for key in hidden_keys(cfg, hides):
        *head, last = key.split(".")
        _at(cfg, ".".join(head))[last] = HIDDEN

    def section(name: str):
        if name == "*":
            return {k: section(k) for k in sorted(cfg)}
        head, _, slug = name.partition(".")
        value = cfg.get(head)
        if slug and head == "tasks":
            value = {tid: t for tid, t in (value or {}).items() if slug in t["sources"]}
        elif slug:
            return without_no_output_keys(head, (value or {}).get(slug), per_source=True)
        return without_no_output_keys(head, value)

    return {s: section(s) for s in sections}


def digest(doc) -> str:
    """sha256 of a JSON-able document (sorted keys; paths and other objects by str)."""
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()
