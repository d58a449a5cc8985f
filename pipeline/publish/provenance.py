"""Where a release came from, path-free: `metadata/provenance.json`.

    record = corpus_record(slug, root, options)     # ingest: the corpus's content fingerprint and its origin
    text = provenance_json(cfg, {slug: record})     # release: sources, scale, config hash, builder version

A corpus's fingerprint is the sha256 over its unit ids and each unit's adapter fingerprint (`SourceAdapter.fingerprint`:
relative file names, sizes, full-content sha256; no path, no mtime). Whether a corpus came from the sample generator is
decided by that fingerprint, never by where it lies: the generator's caller (`processbench samples`, `build --samples`)
leaves a record beside the corpus (`.<slug>.samples.json`: scale, seed, generator code hash, content fingerprint), and
a corpus is `samples` only when its fingerprint now equals the recorded one; anything else (a user's download, an
edited sample corpus) is `user`. Nothing here holds a clock, a host or a path, so the demo release stays
byte-reproducible.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.core.digests import REPO, digest, file_digest, without_no_output_keys
from pipeline.core.io import dumps_json, write_json
from pipeline.release.files import source_order
from pipeline.release.quotas import cell_line, new_cell

if TYPE_CHECKING:
    from pipeline.settings.root import Settings


def corpus_fingerprint(slug: str, root: Path, options: dict | None = None) -> dict:
    """{"units": n listed, "fingerprint": sha256} of the corpus at `root`; "unusable" when it cannot be listed."""
    from upstream_adapters import get_adapter
    from upstream_adapters.base import SourceError

    adapter = get_adapter(slug, **(options or {}))
    try:
        ids = adapter.discover(Path(root))
    except SourceError:
        return {"units": 0, "fingerprint": "unusable"}
    h = hashlib.sha256(slug.encode())
    for unit_id in ids:
        try:
            fp = adapter.fingerprint(Path(root), unit_id)
        except Exception as exc:  # noqa: BLE001 - an unreadable unit still counts, by what failed
            fp = f"unreadable:{type(exc).__name__}"
        h.update(f"\n{unit_id}\0{fp}".encode())
    return {"units": len(ids), "fingerprint": h.hexdigest()}


def _record_path(slug: str, root: Path) -> Path:
    root = Path(root)
    return root.parent / f".{slug}.samples.json"


def write_sample_record(
    slug: str, root: Path, scale: str, seed: int, options: dict | None = None, units_factor: int | float = 1
) -> dict:
    """After the generator wrote `root`: record what wrote it and the content it wrote (`units_factor`, when not 1:
    K times the release scale's units)."""
    from upstream_adapters import samples_fingerprint

    record = {
        "slug": slug,
        "scale": scale,
        "seed": seed,
        **({"units_factor": units_factor} if units_factor != 1 else {}),
        "generator": samples_fingerprint(slug),
        "corpus": corpus_fingerprint(slug, root, options),
    }
    write_json(_record_path(slug, root), record)
    return record


def forget_sample_record(slug: str, root: Path) -> None:
    _record_path(slug, root).unlink(missing_ok=True)


def sample_record(slug: str, root: Path) -> dict | None:
    try:
        return json.loads(_record_path(slug, root).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def sample_record_matches(slug: str, root: Path, scale: str, seed: int, options: dict | None = None) -> bool:
    """Is `root` exactly what the current generator writes for (scale, seed)? (Then `build --samples` reuses it.)"""
    from upstream_adapters import samples_fingerprint

    rec = sample_record(slug, root)
    return bool(
        rec
        and Path(root).is_dir()
        and rec.get("scale") == scale
        and rec.get("seed") == seed
        and rec.get("units_factor", 1) == 1
        and rec.get("generator") == samples_fingerprint(slug)
        and rec.get("corpus") == corpus_fingerprint(slug, root, options)
    )


def corpus_record(slug: str, root: Path, options: dict | None = None) -> dict:
    """What ingest records of the corpus it read (`ir/<slug>/corpus.json`): fingerprint, units listed, origin."""
    corpus = corpus_fingerprint(slug, root, options)
    rec = sample_record(slug, root)
    from_samples = bool(rec and rec.get("corpus") == corpus and corpus["fingerprint"] != "unusable")
    return {
        "source": slug,
        "corpus_fingerprint": corpus["fingerprint"],
        "units_listed": corpus["units"],
        "origin": "samples" if from_samples else "user",
        "samples": {k: rec[k] for k in ("scale", "seed", "units_factor", "generator") if k in rec}
        if from_samples
        else None,
    }


def config_hash(cfg: Settings) -> str:
    """sha256 of the merged, validated configuration without the keys that change no output (the one list:
    pipeline/core/digests.py NO_OUTPUT_KEYS, which the steps' fingerprints leave out too)."""
    doc = {k: without_no_output_keys(k, v) for k, v in sorted(cfg.model_dump().items())}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def config_sections(cfg: Settings) -> dict[str, str]:
    """sha256 of each part of the configuration (without the NO_OUTPUT_KEYS): one per configs/ section, one per
    built source's entry (`sources.<slug>`) and one per template (`tasks.<T>`, `step_tasks.<T>`), so that
    `processbench diff` can say which parts two releases were built with differ."""
    doc = cfg.model_dump()
    out = {}
    for section, value in sorted(doc.items()):
        if section in ("sources", "tasks", "step_tasks") and isinstance(value, dict):
            for name, entry in sorted(value.items()):
                if section != "sources" or name in cfg.build.sources:
                    out[f"{section}.{name}"] = digest(without_no_output_keys(section, entry, per_source=True))
        else:
            out[section] = digest(without_no_output_keys(section, value))
    return out


def code_versions(cfg: Settings) -> dict:
    """The versions of the code that wrote the release: the builder, split rule, prompt protocol, renderer and frame
    decoder versions, and the sha256 of requirements.lock (the dependency set). No digest of the source files: it
    would change the demo release's lock with every commit (docs/release-format.md "Item and release identity")."""
    from pipeline.frames.render import RENDER_VERSION
    from upstream_adapters.media.video import DECODER_VERSION

    rc = cfg.release
    return {
        "builder_version": rc.builder_version,
        "split_version": rc.split_version,
        "prompt_version": rc.prompt_version,
        "render_version": RENDER_VERSION,
        "decoder_version": DECODER_VERSION,
        "requirements_lock_sha256": file_digest(REPO / "requirements.lock"),
    }


def provenance(cfg: Settings, corpora: dict[str, dict], warnings=()) -> dict:
    """What provenance.json holds; `warnings`: the statistics the corpus could not meet (an eval level it cannot
    fill), present only when there are any (the card repeats them). The release identity (fingerprint, item_uid
    version, template variants) is added last, by the release step (pipeline/release/identity.py stamp_release)."""

    rc = cfg.release
    sources = {}
    for slug in cfg.build.sources:
        rec = corpora.get(slug) or {}
        origin = rec.get("origin", "unknown")
        # a sample corpus is named by its generator, scale and seed; its encoded bytes (so its fingerprint) vary with
        # the machine's video encoders while the frames the release uses do not: null keeps the release machine-free
        sources[slug] = {
            "name": cfg.sources[slug].name,
            "origin": origin,
            "corpus_fingerprint": None if origin == "samples" else rec.get("corpus_fingerprint"),
            "units_listed": rec.get("units_listed"),
            "samples": rec.get("samples"),
        }
    origins = sorted({s["origin"] for s in sources.values()})
    return {
        "builder_version": rc.builder_version,
        "release_version": rc.release_version,
        "scale": cfg.build.scale,
        "release_seed": cfg.build.release_seed,
        "config_sha256": config_hash(cfg),
        "config_sections": config_sections(cfg),
        "code": code_versions(cfg),
        "sources_built": list(sources),
        "from_sample_data": "samples" in origins,
        "sources": sources,
    } | ({"warnings": list(warnings)} if warnings else {})


def provenance_json(cfg: Settings, corpora: dict[str, dict], warnings=(), quotas=()) -> str:
    """provenance.json; `quotas`: what each (source, family) and each source's step track delivers against its quota
    and why a short one is short (pipeline/release/quotas.py), the record the card, the manifests and
    task_distribution.csv repeat; present when given."""
    return dumps_json(provenance(cfg, corpora, warnings) | ({"quotas": list(quotas)} if quotas else {}))


# ------------------------------------------------------------------------------------------------ the quota record
# The cells (pipeline/release/quotas.py: their fields, the words, the card's and the CSV's copies, the check) made
# from what the stages recorded: the frames stage's shortfall records and the step stage's summary.


def quota_cells(
    cfg: Settings,
    delivered: dict[tuple[str, str], int],
    shortfalls: list[dict],
    step_summary: dict | None = None,
) -> list[dict]:
    """Every cell the build's sources have a quota for, in source then task order. `delivered`: counts() of the
    release's rows (both tracks); `shortfalls`: the frames stage's records (pipeline/stages.py `shortfall`);
    `step_summary`: steps/summary.json (each source's `quota`, `items` and figures; None: no step track)."""
    from pipeline.items.selection import quotas
    from pipeline.steps.stage import step_reason

    records = {(r.get("source"), r.get("task_id")): r for r in shortfalls if isinstance(r, dict)}
    cells = []
    for slug in source_order(cfg):
        for task, quota in quotas(cfg, slug).items():
            if quota:
                n = delivered.get((slug, task), 0)
                rec = records.get((slug, task)) or {"source": slug, "selected": n, "quota": quota}
                cells.append(new_cell(slug, task, n, int(quota), _reason(rec, cfg)))
        for tid, tpl in cfg.step_tasks.items() if step_summary is not None else ():
            s = (step_summary.get("sources") or {}).get(slug)
            if slug not in tpl.sources or not isinstance(s, dict) or not s.get("quota"):
                continue
            n = delivered.get((slug, tid), 0)
            reason = step_reason(s)
            if n < int(s.get("items", n)):  # made, then dropped (frames that could not be read)
                reason += f"; {int(s['items']) - n} more were dropped because their frames could not be read"
            cells.append(new_cell(slug, tid, n, int(s["quota"]), reason))
    return cells


def shortfall_lines(records: list[dict], cfg: Settings) -> list[str]:
    """The frames stage's shortfall records (items/<slug>_shortfall.json) as cell_line sentences (the quotas_met
    check's words)."""
    out = []
    for r in records:
        if not isinstance(r, dict) or not {"source", "task_id", "quota"} <= set(r):
            continue
        quota = int(r["quota"])
        got = int(r.get("selected", quota - int(r.get("missing", 0))))
        out.append(
            cell_line(new_cell(r["source"], r["task_id"], got, quota, _reason({**r, "selected": got}, cfg)), cfg)
        )
    return out


def _reason(rec: dict, cfg: Settings) -> str:
    """The reason a shortfall record gives, else the one its figures give (a record written before reasons were)."""
    from pipeline.items.shortfall import shortfall_reason

    if isinstance(rec.get("reason"), str) and rec["reason"].strip():
        return rec["reason"]
    src = cfg.sources.get(rec.get("source")) if isinstance(rec.get("source"), str) else None
    return shortfall_reason(rec, src.unit_type if src is not None else "unit")
