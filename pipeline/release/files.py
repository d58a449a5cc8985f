"""The release's names and files, shared by the writers and the validator: configured source/task names, the
release file-name table, and the checksum file over what is on disk.

    file_names(cfg)["eval_parquet"]   # "eval.parquet" (configs/release.yaml `files`)
    write_checksums(release_dir, cfg)  # checksums.sha256 over every file now in the release
    release_damage(release_dir, cfg)   # [] when every file is what checksums.sha256 says
    step_files(cfg[, release_dir])     # the step track's files: {part: (parquet, jsonl)}, L1 / L2 / L3 / sft
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import hashlib
import os
import re
from pathlib import Path

import numpy as np

from pipeline.core import io

if TYPE_CHECKING:
    from pipeline.settings.root import Settings

# The validity audit's report, in the release's metadata/ folder (pipeline/validity writes it).
VALIDITY_REPORT_FILES = ("validity_report.json", "validity_report.md")
# Keys that betray wall-clock time or the machine; refused in any metadata handed to the writers
# (docs/release-format.md, "Determinism").
FORBIDDEN_KEYS = frozenset(
    {"created_at", "updated_at", "generated_at", "build_time", "timestamp", "datetime", "hostname", "username", "cwd"}
)


def source_order(cfg: Settings) -> list[str]:
    """Source slugs in their configured order (build.sources, else the order of configs/sources.yaml)."""
    return list(cfg.build.sources or cfg.sources)


def source_names(cfg: Settings) -> dict[str, str]:
    """slug -> public display name (configs/sources.yaml `name`), in configured order."""
    return {slug: cfg.sources[slug].name for slug in source_order(cfg)}


def schema_source_names(cfg: Settings) -> dict[str, str]:
    """Every known source in configs/sources.yaml order: a build of a subset documents the same schema as a full one."""
    return {slug: src.name for slug, src in cfg.sources.items()}


def task_number(task_id: str) -> int:
    if not re.fullmatch(r"T[1-9][0-9]*", task_id or ""):
        raise ValueError(f"malformed task_id {task_id!r}")
    return int(task_id[1:])


def image_filename(item_id: str, k: int) -> str:
    """Deterministic file name of an item's k-th image (0-based), as `processbench reconstruct` writes it and the
    exports name it."""
    return f"{item_id}_{k}.png"


def file_names(cfg: Settings) -> dict[str, str]:
    files = cfg.release.files.model_dump()  # artefact key -> file name (the keys as configs/release.yaml spells them)
    for key, rel in files.items():
        p = Path(rel)
        if p.is_absolute() or ".." in p.parts or "\\" in rel:
            raise ValueError(f"release file {key} = {rel!r} must be a relative posix path inside the release")
    if len(set(files.values())) != len(files):
        raise ValueError("two release artefacts share one file name in configs/release.yaml")
    return files


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def release_files_on_disk(out_dir: Path, cfg: Settings) -> list[str]:
    """Every regular file of the release (posix, relative, sorted), except the checksum file itself and dot files
    (temporary files of an atomic write)."""
    out_dir = Path(out_dir)
    checksums = file_names(cfg)["checksums"]
    rels = []
    for dirpath, dirnames, filenames in os.walk(out_dir):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for f in filenames:
            if f.startswith("."):
                continue
            rel = (Path(dirpath) / f).relative_to(out_dir).as_posix()
            if rel != checksums:
                rels.append(rel)
    return sorted(rels)


def write_checksums(out_dir: Path, cfg: Settings, known: dict[str, str] | None = None) -> dict[str, str]:
    """(Re)write checksums.sha256 over every file now in the release (`sha256sum -c` format, sorted by path). A later
    stage that adds files to the release (exports) calls this again when it is done. `known`: digests the caller has
    just computed of files it has not written since (not hashed again)."""
    out_dir = Path(out_dir)
    known = known or {}
    sums = {rel: known.get(rel) or sha256_file(out_dir / rel) for rel in release_files_on_disk(out_dir, cfg)}
    io.atomic_write_text(out_dir / file_names(cfg)["checksums"], "".join(f"{h}  {rel}\n" for rel, h in sums.items()))
    return sums


def release_damage(out_dir: Path, cfg: Settings, sha256=sha256_file) -> list[str]:
    """How a written release differs from its checksums.sha256, one line per file (a file listed but missing or with
    other bytes, a file not listed, an unreadable list); [] when every byte is what was published. `sha256(path)`:
    a file's digest (the build passes one cached by the file's identity: assets/fingerprint.py release_damage)."""
    out_dir = Path(out_dir)
    rel = file_names(cfg)["checksums"]
    try:
        text = (out_dir / rel).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return [f"{rel}: unreadable ({type(exc).__name__})"]
    listed = {}
    for line in text.splitlines():
        digest, sep, name = line.partition("  ")
        if not sep or not re.fullmatch(r"[0-9a-f]{64}", digest):
            return [f"{rel}: not a sha256sum line: {line[:80]!r}"]
        listed[name] = digest
    out = []
    for name, digest in listed.items():
        path = out_dir / name
        if Path(name).is_absolute() or ".." in Path(name).parts or not path.is_file():
            out.append(f"{name}: missing")
        elif sha256(path) != digest:
            out.append(f"{name}: other bytes than its checksum")
    out += [f"{name}: not in {rel}" for name in release_files_on_disk(out_dir, cfg) if name not in listed]
    return out


def not_a_release(root: Path, files: dict[str, str]) -> str | None:
    """One line when the folder holds none of a release's files (a wrong folder, not a damaged release)."""
    names = [files["checksums"], *sorted(v for k, v in files.items() if k != "checksums")]
    if any((root / rel).exists() for rel in names):
        return None
    return (
        f"{Path(root).absolute()} is not a ProcessBench release: none of its files is there ({names[0]}, "
        f"{names[1]}, ...); give the folder a build published (release/ by default)"
    )


def level_file_name(rel: str, level: str | None) -> str:
    """The name of one file of an eval level: `rel` itself for L1 (or no level), else `_<level>` after `eval` in the
    name (or before the extension when it has no `eval`): splits/processbench_eval_L2.parquet, ProcessBench_L2.tsv."""
    if level in (None, "L1"):
        return rel
    p = Path(rel)
    stem = p.stem.replace("eval", f"eval_{level}", 1) if "eval" in p.stem else f"{p.stem}_{level}"
    return (p.parent / f"{stem}{p.suffix}").as_posix()


def level_file_names(cfg: Settings, level: str) -> dict[str, str]:
    """File names of one out-of-distribution eval level (L2, L3, ...): the eval files' names with `_<level>` before
    the extension (splits/processbench_eval_L2.parquet, metadata/eval_L2_manifest.json, ...)."""
    files = file_names(cfg)
    return {
        key: level_file_name(files[f"{name}"], level)
        for key, name in (
            ("parquet", "eval_parquet"),
            ("jsonl", "eval_jsonl"),
            ("manifest", "eval_manifest"),
            ("split_groups", "split_groups_eval"),
        )
    }


def eval_level_files(release_dir: Path, cfg: Settings) -> dict[str, str]:
    """{level: release-relative eval parquet} of a written release: the main eval file (L1, or "all" without levels)
    and every other level's own file, as metadata/split_summary.json `eval_levels` names them."""
    import json

    files = file_names(cfg)
    summary = Path(release_dir) / files["split_summary"]
    levels = (json.loads(summary.read_text(encoding="utf-8")).get("eval_levels") or {}) if summary.is_file() else {}
    out = {"L1" if levels else "all": files["eval_parquet"]}
    out.update({lv: v["files"]["parquet"] for lv, v in sorted(levels.items()) if lv != "L1"})
    return out


STEP_LEVELS = ("L1", "L2", "L3")  # the eval levels the step track has a file for


def step_files(cfg: Settings, release_dir: Path | None = None) -> dict[str, tuple[str, str]]:
    """The step files by part, {part: (parquet, jsonl)} (release-relative, configs/release.yaml `files.steps_*`): each
    eval level (L1 under the plain names, L2 / L3 with `_L2` / `_L3` after `eval`, as the MCQ eval files), then "sft".
    Empty when the configuration names no step files. With `release_dir`: only the parts whose parquet is there, and
    none when the main eval file (L1) is not (a release without the step track). The writer and every reader take
    the names from here."""
    files = file_names(cfg)
    keys = ("steps_eval_parquet", "steps_eval_jsonl", "steps_sft_parquet", "steps_sft_jsonl")
    if not all(files.get(k) for k in keys):
        return {}
    out = {
        lv: (level_file_name(files["steps_eval_parquet"], lv), level_file_name(files["steps_eval_jsonl"], lv))
        for lv in STEP_LEVELS
    }
    out["sft"] = (files["steps_sft_parquet"], files["steps_sft_jsonl"])
    if release_dir is None:
        return out
    root = Path(release_dir)
    if not (root / out["L1"][0]).is_file():
        return {}
    return {part: names for part, names in out.items() if (root / names[0]).is_file()}


def plain_json(obj, where: str = "split_summary"):
    """JSON-ready copy of `obj` (numpy scalars -> Python, tuples -> lists); refuses machine-specific content."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if not isinstance(k, str):
                k = str(k)
            if k.lower() in FORBIDDEN_KEYS:
                raise ValueError(f"{where}.{k}: wall-clock or machine-specific fields are not allowed in the release")
            out[k] = plain_json(v, f"{where}.{k}")
        return out
    if isinstance(obj, (list, tuple)):
        return [plain_json(v, f"{where}[{i}]") for i, v in enumerate(obj)]
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, float) and not np.isfinite(obj):
        raise ValueError(f"{where}: non-finite float {obj}")
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    raise ValueError(f"{where}: {type(obj).__name__} is not JSON data")


def merge_checked(base: dict, extra: dict, where: str = "split_summary") -> dict:
    """Deep-merge `extra` (the split stage's summary) into `base` (what the tables say). A key present in both with
    different values is an inconsistency between the split stage and the release tables: raise."""
    out = dict(base)
    for k, v in extra.items():
        if k not in out:
            out[k] = v
        elif isinstance(out[k], dict) and isinstance(v, dict):
            out[k] = merge_checked(out[k], v, f"{where}.{k}")
        elif out[k] != v:
            raise ValueError(f"{where}.{k}: the split stage says {v!r}, the release tables/configs give {out[k]!r}")
    return out
