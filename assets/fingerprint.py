"""Input fingerprints: a step whose code, config and inputs are unchanged is skipped.

A step's fingerprint is the sha256 of (its name, the digest of the build's code, the config sections it depends on,
the sha256 of every table it reads, and for ingest a listing of the upstream folder: relative path, size and the
sha256 of every byte, cached by the file's identity in `<work_dir>/_content_hashes`: upstream_adapters/content_hash.py).
After a step runs, `<work_dir>/_fingerprints/<step>.json` records the fingerprint, the step's summary and the
sha256 of every file it wrote; the next build skips the step when the fingerprint matches and every output is still
there with the recorded bytes. Code is hashed as a whole (pipeline/, upstream_adapters/, assets/): any code change
recomputes everything, which is safe; config and data changes recompute only the steps that read them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import hashlib
import json
import os
from pathlib import Path

import polars as pl

from pipeline.settings.paths import work_dir
from pipeline.core import work_tables
from pipeline.core.digests import REPO, code_digest, config_part, digest, hidden_view  # noqa: F401 (REPO: for tests)
from pipeline.core.errors import ProjectError
from pipeline.core.io import write_json
from upstream_adapters import content_hash

from .tables import Step, tables_by_name

if TYPE_CHECKING:
    from pipeline.settings.root import Settings

CODE_PACKAGES = ("pipeline", "upstream_adapters", "assets")


class DamagedInput(ProjectError):
    """A table a step would read is not what its writer recorded."""


def tree_listing(root: Path) -> str:
    """sha256 over (relative path, size, sha256 of the content) of every file under root. A file's content hash is
    read again only when its identity (size, mtime, ctime, inode) changed, so a touched file re-runs nothing and an
    edit that keeps the size and the mtime is still seen. Paths stay strings: a corpus has tens of thousands of
    files and this runs in every build, the no-op one included."""
    h = hashlib.sha256()
    if not root.exists():
        return "missing"
    top = os.fspath(root)
    cut = len(os.path.join(top, ""))
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames.sort()
        for name in sorted(filenames):
            p = os.path.join(dirpath, name)
            try:
                size, sha = content_hash.content_sha256(p)
            except OSError as exc:  # unreadable: its ingest reports it; the listing says so, and changes with it
                size, sha = -1, f"unreadable:{exc.errno}"
            rel = p[cut:] if os.sep == "/" else Path(p[cut:]).as_posix()
            h.update(f"{rel}\0{size}\0{sha}\n".encode())
    content_hash.flush()
    return h.hexdigest()


def file_digest(path: Path) -> str | None:
    """sha256 of a work table (None when it is not there), from the content-hash store while the file's identity
    holds, as for upstream files: a table edited after its step recorded it has another ctime and is read again."""
    if not path.is_file():
        return None
    return content_hash.content_sha256(path)[1]


def use_hash_store(cfg: Settings, verify: bool | None = None) -> None:
    """This process caches upstream content hashes in the work folder (`verify`: read every file again)."""
    content_hash.use_store(work_dir(cfg) / "_content_hashes", verify=verify)


def fingerprint(step: Step, cfg: Settings, tables: dict, listings: dict | None = None) -> str:
    """`listings`: {upstream root: tree_listing} already made in this plan (steps of one source share a root)."""
    use_hash_store(cfg)
    listings = {} if listings is None else listings
    root = step.external(cfg) if step.external else None
    if root is not None and root not in listings:
        listings[root] = tree_listing(root)
    inputs = {name: file_digest(tables[name].file(cfg)) for name in step.reads if name in tables}
    doc = {
        "step": step.name,
        "code": code_digest(CODE_PACKAGES),
        "config": config_part(cfg, step.config, step.hides),
        "inputs": inputs,
        "external": listings[root] if root is not None else None,
    }
    return digest(doc)


def _record_path(cfg: Settings, step: Step) -> Path:
    return work_dir(cfg) / "_fingerprints" / f"{step.name}.json"


def recorded(cfg: Settings, step: Step) -> dict | None:
    p = _record_path(cfg, step)
    try:
        return json.loads(p.read_text()) if p.is_file() else None
    except json.JSONDecodeError:
        return None


def is_fresh(step: Step, cfg: Settings, tables: dict, fp: str | None = None, listings: dict | None = None) -> bool:
    rec = recorded(cfg, step)
    if not rec or rec.get("fingerprint") != (fp or fingerprint(step, cfg, tables, listings)):
        return False
    if not all(file_digest(t.file(cfg)) == rec["outputs"].get(t.name) for t in step.writes):
        return False
    # the published release, every file of it (not only the step's tables) against its checksums.sha256, which the
    # step's record covers: a damaged release is published again
    return not (step.publishes and release_damage(cfg))


def release_damage(cfg: Settings) -> list[str]:
    """How the published release differs from its checksums.sha256 ([] when intact or when there is none). A file's
    hash comes from the build's content-hash store while its identity (device, inode, size, mtime, ctime) is the one
    it had when last read whole: any write to it changes its ctime, so it is read again; a no-op build then reads no
    release byte. `processbench build --verify` reads every file again; `processbench validate` always does."""
    from pipeline.settings.paths import release_dir
    from pipeline.release.files import release_damage as damage

    root = release_dir(cfg)
    if not root.is_dir():
        return []
    use_hash_store(cfg)
    out = damage(root, cfg, sha256=lambda p: content_hash.content_sha256(p)[1])
    content_hash.flush()
    return out


def forget(step: Step, cfg: Settings) -> None:
    """Drop the step's record: it runs again next time (a release whose checks failed was never published)."""
    _record_path(cfg, step).unlink(missing_ok=True)


def damaged_inputs(step: Step, cfg: Settings, tables: dict) -> dict[str, str]:
    """{table file: the step that wrote it, and how the table differs from its record} of the tables `step` reads
    whose bytes are not those their step recorded (a table cut or edited after it was written; a step the build ran
    first always matches its record). The record's row count says how many rows the table had."""
    wanted = {name for name in step.reads if name in tables}
    out = {}
    for path in sorted((work_dir(cfg) / "_fingerprints").glob("*.json")):
        try:
            rec = json.loads(path.read_text(encoding="utf-8"))
            outputs = rec.get("outputs") or {}
        except (OSError, ValueError, AttributeError):
            continue
        rows = rec.get("rows") or {}
        for name in wanted & set(outputs):
            if file_digest(tables[name].file(cfg)) != outputs[name]:
                why = work_tables.check(tables[name].file(cfg), {"sha256": outputs[name], "rows": rows.get(name)})
                out[tables[name].path] = f"{path.stem}" + (f": {why}" if name in rows else "")
    return out


def _rows(path: Path) -> int | None:
    """The row count of a parquet table just written (None when there is no readable table)."""
    try:
        return int(pl.scan_parquet(path).select(pl.len()).collect().item())
    except Exception:  # noqa: BLE001 - a table the step did not write (optional output): no count to record
        return None


def run_step(step: Step, cfg: Settings, tables: dict) -> tuple[dict, bool, str]:
    """Run the step unless it is fresh. Returns (summary, skipped, fingerprint). A step never reads a table whose
    bytes differ from its writer's record: it fails naming them, and their writers run again in the next build."""
    fp = fingerprint(step, cfg, tables)
    if is_fresh(step, cfg, tables, fp):
        return recorded(cfg, step)["summary"], True, fp
    _record_path(cfg, step).unlink(missing_ok=True)  # a crash mid-step leaves no stale record
    if damaged := damaged_inputs(step, cfg, tables):
        for writer in {w.split(":")[0] for w in damaged.values()}:
            (work_dir(cfg) / "_fingerprints" / f"{writer}.json").unlink(missing_ok=True)
        raise DamagedInput(
            f"{step.name}: work table(s) changed since their step wrote them: "
            f"{'; '.join(f'{t} ({w})' for t, w in sorted(damaged.items()))}; not read. Their steps "
            "run again in the next build (processbench build, or materialize them in the UI)"
        )
    summary = step.run(hidden_view(cfg, step.hides))  # what its fingerprint leaves out, the step does not see
    content_hash.flush()  # what the step hashed (the frames stage's unit fingerprints)
    outputs = {t.name: file_digest(t.file(cfg)) for t in step.writes}
    rows = {t.name: _rows(t.file(cfg)) for t in step.writes if t.parquet}  # parquet tables
    write_json(
        _record_path(cfg, step),
        {
            "fingerprint": fp,
            "summary": summary,
            "outputs": outputs,
            "rows": {k: v for k, v in rows.items() if v is not None},
        },
    )
    return summary, False, fp


def stale_steps(steps: list[Step], cfg: Settings) -> list[Step]:
    """The steps a build must run: those not fresh, and everything downstream of them (their inputs will change)."""
    tables = tables_by_name(steps)
    stale: list[Step] = []
    changed: set[str] = set()
    listings: dict = {}  # one listing per upstream root: its ingest and frames steps both cover it
    for step in steps:  # dependency order
        if changed & set(step.reads) or not is_fresh(step, cfg, tables, listings=listings):
            stale.append(step)
            changed |= {t.name for t in step.writes}
    return stale
