"""The build's stages as plain functions over the work folder: each reads its inputs from `work_dir`, computes
with the stage modules, writes its outputs atomically, and returns a small summary dict for the orchestrator.

Dagster calls these (assets/definitions.py) but so can anyone: every function takes the merged config and,
for per-source stages, the source slug.

Work folder layout (configs/build.yaml `work_dir`):
    ir/<slug>/{units,frames,signals,segments,quarantine}.parquet   ingest
    ir/<slug>/shards/<k>/*.parquet                                 ingest shard k (sources.<slug>.ingest_shards > 1)
    labels/<slug>/<table>.parquet                                  labels
    candidates/<slug>.parquet                                      candidate items (over-complete pool); its footer
                                                                   holds what each family's rules left out (left_out)
    candidates/<slug>/<task>.<key>.parquet                         one family's part of it and its figures (see
                                                                   run_candidates)
    items/<slug>.parquet, items/<slug>_quarantine.parquet          selected, visually gated, images hashed
    items/<slug>_frames.parquet                                    the items' frames: pixel hash, grey thumbnail
    frame_cache/                                                   content-addressed decoded frames
    split/{items,groups}.parquet, split/summary.json               split (with the answer letters)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import json
import logging
from pathlib import Path

import polars as pl

from pipeline.items import selection as items_mod
from pipeline.publish import provenance
from pipeline.release.identity import stamp_release
from . import source_help
from .source_help import missing_corpus
from . import split as split_mod
from pipeline.core import work_tables
from pipeline.release import writers
from pipeline.release.quotas import counts as quota_counts
from pipeline.items.choices import assign_letters, deal_options, display_order
from pipeline.settings.config import path_in_repo  # noqa: F401 - path_in_repo: tests resolve sample roots with it
from .exports import files_written, run_exports
from .validity import REPORT_FILES, run_validity, state_fingerprint
from pipeline.core.errors import ProjectError, SourceUnusable
from pipeline.core.digests import code_digest, config_part, digest, file_digest
from .families import Context, enabled_families, family_part, merge_candidates
from .families.no_items import units_without_items
from .frames.cache import FrameCache
from .frames.extract import FRAME_TABLE_SCHEMA, extract_from_config, item_frames, requests_from_items
from .frames.gate import gate_items
from pipeline.core.pool import run_beside
from .frames.readers import AdapterReaders
from .reconstruct import reconstruction_markdown
from .frames.render import add_image_hashes
from pipeline.ingest.run import (
    ingest_source,
    merge_shards,
    quarantine_frame,
    read_ir,
    summary_text,
    units_lost,
    write_ir,
)
from pipeline.core.io import ParquetTables, write_json, write_parquet
from .labels import compute_labels_isolated
from pipeline.release.prompts import prompt_templates_markdown, question_texts
from pipeline.settings.paths import release_dir, work_dir
from pipeline.release.scan import release_leaks
from .steps.write import write_step_files
from pipeline.publish.validate import validate_release

if TYPE_CHECKING:
    from pipeline.settings.root import Settings

log = logging.getLogger(__name__)


def sources(cfg: Settings) -> list[str]:
    return list(cfg.build.sources)


# --------------------------------------------------------------------------------------------------- ingest
class MissingCorpus(FileNotFoundError, ProjectError):
    """A source root that does not exist: a setup error of the build (no corpus made or a mistyped path), not bad
    data to quarantine; the build stops before any stage runs on nothing."""


def stop_if_unusable(cfg: Settings, slug: str, result) -> None:
    """A source of which ingest kept no unit stops its chain here (SourceUnusable, one line saying what to do), instead
    of running its labels, candidates and items on nothing. Its IR (with the quarantine rows) is written first."""
    if result.units.height:
        return
    q = result.quarantine
    whole = q.filter(pl.col("unit_id") == "*")["reason"].to_list()
    prefix = f"{slug}: "
    if whole:
        reason = whole[0][len(prefix) :] if whole[0].startswith(prefix) else whole[0]
    elif q.height:
        reason = f"none of its {units_lost(q)} unit(s) could be read (first: {q['unit_id'][0]}: {q['reason'][0]})"
    else:
        reason = "no unit found"
    src = cfg.sources[slug]
    raise SourceUnusable(source_help.unusable_message(slug, src.root, reason, src.adapter.options()))


def ingest_shards(cfg: Settings, slug: str) -> int:
    return int(cfg.sources[slug].ingest_shards)


def shard_dir(cfg: Settings, slug: str, k: int) -> Path:
    return work_dir(cfg) / "ir" / slug / "shards" / str(k)


def run_ingest_shard(cfg: Settings, slug: str, k: int) -> dict:
    """Shard k of a source's ingest (sources.<slug>.ingest_shards > 1): the units whose stable hash falls in it."""
    if problem := missing_corpus(cfg, slug):
        raise MissingCorpus(problem)
    src = cfg.sources[slug]
    result = ingest_source(
        slug,
        src.root,
        src.adapter.options(),
        limits=cfg.build.ir_limits.model_dump(),
        shard=(k, ingest_shards(cfg, slug)),
        state=shard_dir(cfg, slug, k),
    )
    write_ir(result, shard_dir(cfg, slug, k))
    return {"units": result.units.height, "quarantined": units_lost(result.quarantine)}


def run_ingest(cfg: Settings, slug: str) -> dict:
    """The source's IR: read through its adapter, or merged from its shards' IR when it is read in shards."""
    if problem := missing_corpus(cfg, slug):
        raise MissingCorpus(problem)
    src = cfg.sources[slug]
    if ingest_shards(cfg, slug) > 1:
        result = merge_shards(slug, [read_ir(shard_dir(cfg, slug, k)) for k in range(ingest_shards(cfg, slug))])
    else:
        result = ingest_source(
            slug,
            src.root,
            src.adapter.options(),
            limits=cfg.build.ir_limits.model_dump(),
            state=work_dir(cfg) / "ir" / slug,
        )
    write_ir(result, work_dir(cfg) / "ir" / slug)
    stop_if_unusable(cfg, slug, result)
    # the corpus's content fingerprint and origin (sample generator or user root), for the release's provenance
    write_json(
        work_dir(cfg) / "ir" / slug / "corpus.json", provenance.corpus_record(slug, src.root, src.adapter.options())
    )
    log.info("%s", summary_text(slug, result))
    lost = units_lost(result.quarantine)
    return {
        "units": result.units.height,
        "quarantined": lost,
        "absent": result.absent.height,
        "frames": result.frames.height,
        "signals": result.signals.height,
        "segments": result.segments.height,
        "quarantine_share": lost / max(1, lost + result.units.height),
    }


def load_ir(cfg: Settings, slug: str) -> dict[str, pl.DataFrame]:
    return read_ir(work_dir(cfg) / "ir" / slug)


# --------------------------------------------------------------------------------------------------- labels
def run_labels(cfg: Settings, slug: str) -> dict:
    # the IR read table by table when the rules ask for it: the labels step never holds every IR table at once
    tables, bad = compute_labels_isolated(slug, ParquetTables(work_dir(cfg) / "ir" / slug), cfg)
    out = work_dir(cfg) / "labels" / slug
    for name, df in tables.items():
        write_parquet(out / f"{name}.parquet", df)
    write_parquet(work_dir(cfg) / "labels" / f"{slug}_quarantine.parquet", quarantine_frame(bad))
    for b in bad:
        log.warning("%s/%s: quarantined at labels: %s", slug, b["unit_id"], b["reason"])
    return {**{name: df.height for name, df in tables.items()}, "quarantined": len(bad)}


def load_labels(cfg: Settings, slug: str) -> dict[str, pl.DataFrame]:
    return {p.stem: pl.read_parquet(p) for p in sorted((work_dir(cfg) / "labels" / slug).glob("*.parquet"))}


# --------------------------------------------------------------------------------------------------- candidates
def family_keys(cfg: Settings, slug: str, families: list[str]) -> dict[str, str]:
    """What one family's candidates of a source depend on, and the figures of what its rules left out: the code, the
    labels and build settings, the source's unit word (in the figures' words), the source's IR and label tables, and
    the family's own template. One key per family, so a template edit changes one key."""
    wd = work_dir(cfg)
    inputs = {
        p.relative_to(wd).as_posix(): file_digest(p)
        for d in (wd / "ir" / slug, wd / "labels" / slug)
        for p in sorted(d.glob("*.parquet"))
    }
    base = {
        "source": slug,
        "code": code_digest(("pipeline", "upstream_adapters")),
        "config": config_part(cfg, ("labels", "build")),
        "unit_type": cfg.sources[slug].unit_type,
        "inputs": inputs,
    }
    return {t: digest({**base, "family": t, "template": cfg.tasks[t].model_dump()}) for t in families}


LEFT_OUT = "processbench.left_out"  # the parquet footer key of a pool's (or a part's) left_out figures


def left_out(path: Path) -> dict | list | None:
    """The left_out figures a candidate pool (or one family's part of it) holds in its footer: {task: [figures]}
    of a pool, [figures] of a part (pipeline/families/common.py LeftOut); None when it holds none."""
    try:
        text = pl.read_parquet_metadata(path).get(LEFT_OUT)
        return json.loads(text) if text is not None else None
    except (OSError, ValueError, pl.exceptions.PolarsError):
        return None


def run_candidates(cfg: Settings, slug: str) -> dict:
    """The candidate pool of one source. Each family's part is kept in candidates/<slug>/<task>.<key>.parquet (key:
    family_keys) with, in its footer, what the family's rules left out (the figures the frames stage words a
    shortfall's reason with); a family whose key is unchanged is read back, figures and all, the others are
    generated, so editing one template regenerates that family only. The pool is the parts merged (the same bytes
    either way), its footer the families' figures ({task: [figures]})."""
    wd = work_dir(cfg)
    memo = wd / "candidates" / slug
    families = enabled_families(cfg, slug)
    names = {t: f"{t}.{k[:24]}.parquet" for t, k in family_keys(cfg, slug, families).items()}
    ctx, parts, generated, figures = None, [], [], {}
    for t in families:
        path = memo / names[t]
        # a part is used only with the bytes its record holds (figures included): a cut or edited one is made again
        if (part := work_tables.read_checked(path, f"candidates_{slug}")) is not None and isinstance(
            kept := left_out(path), list
        ):
            parts.append(part)
            figures[t] = kept
            continue
        if ctx is None:  # the tables are read only when a family has to be generated, each when first needed
            ctx = Context(slug, ParquetTables(wd / "ir" / slug), ParquetTables(wd / "labels" / slug), cfg)
        part, figures[t] = family_part(t, slug, ctx)
        parts.append(part)
        work_tables.write_checked(path, part, {LEFT_OUT: json.dumps(figures[t], sort_keys=True)})
        generated.append(t)
    for p in memo.glob("*.parquet"):  # parts of old keys, or of families the source no longer has
        if p.name not in names.values():
            work_tables.remove(p)
    pool = merge_candidates(slug, parts)
    write_parquet(wd / "candidates" / f"{slug}.parquet", pool, {LEFT_OUT: json.dumps(figures, sort_keys=True)})
    ctx = None  # the generators' per-unit arrays are no longer needed
    kept = pl.read_parquet(wd / "ir" / slug / "units.parquet", columns=["unit_id"])
    # kept units that give nothing, with why (none: the units table alone says so, no other table is read)
    silent = (
        units_without_items(slug, load_ir(cfg, slug), load_labels(cfg, slug), pool)
        if not kept["unit_id"].is_in(pool["unit_id"].unique().implode()).all()
        else units_without_items(slug, {"units": kept}, {}, pool)
    )
    for r in silent.iter_rows(named=True):
        log.warning("%s/%s: no candidate items: %s", slug, r["unit_id"], r["reason"])
    return {
        "candidates": pool.height,
        "families_generated": generated,
        "per_family": {
            r["task_id"]: r["len"] for r in pool.group_by("task_id").len().sort("task_id").iter_rows(named=True)
        },
        "no_items": silent.height,  # and the first 50 units with their reason:
        "no_items_units": {r["unit_id"]: r["reason"] for r in silent.head(50).iter_rows(named=True)},
        # what each family's rules left out: `rule: excluded of considered what`
        "left_out": {
            t: [f"{r['name']}: {r['excluded']:,} of {r['considered']:,} {r['what']}" for r in rules if r["excluded"]]
            for t, rules in figures.items()
        },
    }


# --------------------------------------------------------------------------------------------------- frames
def run_frames(cfg: Settings, slug: str, progress=None) -> dict:
    """Select each family's quota, decode its frames, gate them, and ask for replacements until the quotas hold or the
    pool runs out; then fix the T8/T9 display order (pipeline/items/choices.py) and hash the images each item shows.
    Answer letters are the split's (run_split); question texts are the release's (the items carry their fields)."""
    seed = cfg.build.release_seed
    gate_cfg = cfg.build.items
    wd = work_dir(cfg)
    pool = pl.read_parquet(wd / "candidates" / f"{slug}.parquet")
    rules = left_out(wd / "candidates" / f"{slug}.parquet")
    quotas = items_mod.quotas(cfg, slug)
    d = wd / "items"
    cache = FrameCache.from_config(cfg)
    readers = AdapterReaders.from_config(cfg)
    tried: set[str] = set()
    survivors = None  # items that passed the gate so far, over all rounds
    quarantine_parts, frame_parts = [], []
    need = {t: q for t, q in quotas.items() if q}
    gate_dropped: dict[str, int] = {}  # per family: candidates the gate rejected (the shortfall record says so)
    for _ in range(int(gate_cfg.max_gate_rounds)):
        if not need:
            break
        batch = items_mod.select_candidates(
            pool, need, seed, exclude_keys=tried, extra=gate_cfg.gate_margin, cfg_tasks=cfg.tasks, prior=survivors
        )
        if not batch.height:
            break
        tried |= set(batch["candidate_key"].to_list())
        table = extract_from_config(requests_from_items(batch), readers, cache, cfg, progress=progress)
        kept, quarantined = gate_items(batch, table, cfg)
        dropped = batch.filter(~pl.col("candidate_key").is_in(kept["candidate_key"].implode()))
        for t, n in dropped.group_by("task_id").len().iter_rows():
            gate_dropped[t] = gate_dropped.get(t, 0) + int(n)
        kept = kept.drop("select_rank")
        survivors = kept if survivors is None else pl.concat([survivors, kept], how="vertical_relaxed")
        quarantine_parts.append(quarantined)
        frame_parts.append(table)
        have = dict(survivors.group_by("task_id").len().iter_rows())
        need = {t: q - have.get(t, 0) for t, q in quotas.items() if q and q - have.get(t, 0) > 0}
    if survivors is not None:  # the survivors hold each quota plus a margin: select the quota again among them, so
        # the final set keeps the selection's spread, label balance and unit coverage (a plain cut by rank would not)
        kept = items_mod.select_candidates(survivors, quotas, seed, cfg_tasks=cfg.tasks).drop("select_rank")
    else:
        kept = pool.clear()
    items = display_order(kept, seed)
    frame_table = pl.concat(frame_parts, how="vertical_relaxed") if frame_parts else None
    if frame_table is not None:
        items = add_image_hashes(
            items, frame_table, cache, cfg.frames.image.model_dump(), open_reader=readers, workers=cfg.frames.workers
        )
    frames = item_frames(items, frame_table if frame_table is not None else pl.DataFrame(schema=FRAME_TABLE_SCHEMA))
    quarantine = pl.concat(quarantine_parts, how="vertical_relaxed") if quarantine_parts else quarantine_frame([])
    unit_word = cfg.sources[slug].unit_type
    short = items_mod.shortfall(
        items,
        quotas,
        source=slug,
        pool=pool,
        gate_dropped=gate_dropped,
        unit_word=unit_word,
        left_out=rules if isinstance(rules, dict) else None,
    )
    write_parquet(d / f"{slug}.parquet", items)
    write_parquet(d / f"{slug}_quarantine.parquet", quarantine)
    write_parquet(d / f"{slug}_frames.parquet", frames)
    write_json(d / f"{slug}_shortfall.json", short)
    return {
        "items": items.height,
        "quota": int(sum(quotas.values())),
        "gate_dropped": quarantine.height,
        "frames_decoded": cache.counters["decoded"],
        "frames_cached": cache.counters["hits"],
        "frame_cache_bad_entries": cache.counters["bad_entries"] + cache.counters["bad_renders"],
        "shortfall": short,
    }


# --------------------------------------------------------------------------------------------------- split
def _concat(frames: list[pl.DataFrame]) -> pl.DataFrame:
    return pl.concat(frames, how="diagonal_relaxed")


def all_units(cfg: Settings) -> pl.DataFrame:
    return _concat([pl.read_parquet(work_dir(cfg) / "ir" / s / "units.parquet") for s in sources(cfg)])


def run_split(cfg: Settings) -> dict:
    wd = work_dir(cfg)
    items = _concat([pl.read_parquet(wd / "items" / f"{s}.parquet") for s in sources(cfg)])
    policy, seed = cfg.split.model_dump(), cfg.split_seed
    groups = split_mod.build_groups(items, all_units(cfg), policy)
    # the eval selection balances each family's answer labels (objective.balance_on: answer_text); only a policy
    # that balances letters needs letters before the split (they are dealt again per release file below)
    if policy["objective"]["balance_on"] == "answer":
        items = assign_letters(items, seed)
    split_df, summary = split_mod.split_items(items, groups, policy, seed)
    per_file = ("split", "eval_level") if "eval_level" in split_df.columns else ("split",)
    # options drawn uniformly from a source-wide pool are dealt again per release file, so that in each file every
    # label of an option set is the answer equally often; then the letters, balanced per file
    uniform = {t for t, tpl in cfg.tasks.items() if tpl.distractors.policy == "uniform"}
    split_df = deal_options(split_df, seed, uniform, within=per_file)
    split_df = assign_letters(split_df, seed, within=per_file).sort("source", "task_id", "candidate_key")
    for slug, s in summary["sources"].items():  # what the release finally holds, after the per-split letters
        s["letter_balance_eval"] = split_mod.eval_letter_report(split_df, policy, slug)
    write_parquet(wd / "split" / "items.parquet", split_df)
    write_parquet(wd / "split" / "groups.parquet", groups)
    write_json(wd / "split" / "summary.json", summary)
    return {
        "eval_items": summary["eval_items"],
        "sft_items": summary["sft_items"],
        "eval_groups": {s: v["eval_groups"] for s, v in sorted(summary["sources"].items())},
    }


def _split_items(cfg: Settings) -> pl.DataFrame:
    return pl.read_parquet(work_dir(cfg) / "split" / "items.parquet")


def _step_items(cfg: Settings) -> tuple[pl.DataFrame, dict]:
    folder = work_dir(cfg) / "steps"
    return pl.read_parquet(folder / "items.parquet"), json.loads((folder / "summary.json").read_text())


def _split_summary(cfg: Settings) -> dict:
    return json.loads((work_dir(cfg) / "split" / "summary.json").read_text())


# --------------------------------------------------------------------------------------------------- release
def run_release(cfg: Settings) -> dict:
    items = _split_items(cfg)
    items = items.with_columns(question_texts(items, cfg))  # the questions' text is made here, from the templates
    eval_df, sft_df = writers.release_tables(items, all_units(cfg), cfg)
    corpora = {
        s: json.loads((work_dir(cfg) / "ir" / s / "corpus.json").read_text(encoding="utf-8")) for s in sources(cfg)
    }
    warnings = eval_level_warnings(cfg)
    step_rows, step_summary = _step_items(cfg)
    cells = provenance.quota_cells(cfg, quota_counts(eval_df, sft_df, step_rows), shortfall(cfg), step_summary)
    documents = {
        "prompt_templates": prompt_templates_markdown(cfg),
        "reconstruction": reconstruction_markdown(cfg),
        "provenance": provenance.provenance_json(cfg, corpora, warnings, cells),
    }
    out = writers.write_release(
        eval_df,
        sft_df,
        _split_summary(cfg),
        cfg,
        release_dir(cfg),
        documents,
        checksums=False,
        warnings=warnings,
        quotas=cells,
    )
    out["files"] += write_step_files(step_rows, step_summary, cfg, release_dir(cfg))  # the T13 step track
    del step_rows
    del eval_df, sft_df  # the exports read the files back (the main eval file holds L1 only): free these first
    # card, Croissant, trainer/harness files here, and the validity audit's report in a worker: each reads the files
    # just written and writes files of its own, so the two run side by side
    exported, validity = run_beside(_validity_part, cfg, lambda: run_exports(cfg, release_dir(cfg), checksums=False))
    # every file it covers written: the release fingerprint, stated in provenance.json, the card and the validity report
    fingerprint, sums = stamp_release(release_dir(cfg), cfg)
    state_fingerprint(release_dir(cfg), fingerprint)
    # last, once: an interrupted step leaves checksums that do not match, never a release that looks complete
    writers.write_checksums(release_dir(cfg), cfg, known=sums)
    return {k: v for k, v in out.items() if k != "files"} | {
        "files": len(out["files"]) + len(files_written(exported)),
        "validity_problems": len(validity["problems"]),
        "release_fingerprint": fingerprint,
        # each export's rows and files: the materialization of its asset (assets/tables.py export_tables)
        "exports": {name: {"rows": r["rows"], "files": len(r["files"])} for name, r in exported.items()},
    }


def _validity_part(cfg: Settings) -> dict:
    return run_validity(cfg, checksums=False)


# --------------------------------------------------------------------------------------------------- checks
def quarantine_shares(cfg: Settings, slug: str | None = None) -> dict[str, float]:
    """Share of each source's units (plus whole-source rows) that ingest quarantined, and the labels stage after it
    (once it has run); a row standing for several units (its `units` column) counts each of them."""
    out = {}
    for s in [slug] if slug else sources(cfg):
        ir = work_dir(cfg) / "ir" / s
        if not (ir / "units.parquet").exists():
            continue
        n_kept = pl.read_parquet(ir / "units.parquet").height  # units ingest kept, including any labels dropped
        n_ingest = units_lost(pl.read_parquet(ir / "quarantine.parquet"))
        at_labels = work_dir(cfg) / "labels" / f"{s}_quarantine.parquet"
        n_labels = units_lost(pl.read_parquet(at_labels)) if at_labels.exists() else 0
        out[s] = round((n_ingest + n_labels) / max(1, n_kept + n_ingest), 4)
    return out


def quarantine_reasons(cfg: Settings, slug: str) -> list[tuple[str, int]]:
    """The reasons a source's units were quarantined (ingest, then labels), most units first: (reason, units)."""
    frames = [
        pl.read_parquet(p)
        for p in (
            work_dir(cfg) / "ir" / slug / "quarantine.parquet",
            work_dir(cfg) / "labels" / f"{slug}_quarantine.parquet",
        )
        if p.exists()
    ]
    counts: dict[str, int] = {}
    for df in frames:
        for r in df.iter_rows(named=True):
            counts[r["reason"]] = counts.get(r["reason"], 0) + int(r.get("units") or 1)
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def shortfall(cfg: Settings, slug: str | None = None) -> list[dict]:
    """Families below their quota, from the frames stage's reports (all sources when slug is None)."""
    out = []
    for s in [slug] if slug else sources(cfg):
        path = work_dir(cfg) / "items" / f"{s}_shortfall.json"
        if path.exists():
            out += json.loads(path.read_text())
    return out


def leaked_groups(cfg: Settings) -> list[str]:
    return split_mod.leaked_groups(_split_items(cfg))


def eval_group_count_problems(cfg: Settings) -> list[str]:
    return split_mod.group_count_problems(_split_summary(cfg), cfg.split.model_dump())


def split_isolation_problems(cfg: Settings) -> list[str]:
    """Isolation keys (composite ones too) and held-out OOD values that reach both sides, over the units' own fields
    (the split's groups table carries them)."""
    items = _split_items(cfg)
    policy = cfg.split.model_dump()
    groups = pl.read_parquet(work_dir(cfg) / "split" / "groups.parquet")
    return split_mod.isolation_key_problems(items, groups, policy) + split_mod.held_out_problems(
        items, groups, _split_summary(cfg)
    )


def eval_level_problems(cfg: Settings) -> list[str]:
    return split_mod.level_count_problems(_split_items(cfg), _split_summary(cfg), cfg.split.model_dump())


def eval_level_warnings(cfg: Settings) -> list[str]:
    """Eval levels the corpus cannot fill (a warning check; recorded in provenance.json and the card)."""
    return split_mod.level_share_warnings(_split_summary(cfg), cfg.split.model_dump())


def validity_problems(cfg: Settings) -> list[str]:
    """Families past the validity limits (configs/validity.yaml), as the release's validity report states them."""
    path = release_dir(cfg) / "metadata" / REPORT_FILES[0]
    if not path.is_file():
        return [f"metadata/{REPORT_FILES[0]}: missing"]
    return list(json.loads(path.read_text(encoding="utf-8"))["problems"])


def release_problems(cfg: Settings) -> list[str]:
    """What `processbench validate` finds but the path scan, which is release_path_leaks' check."""
    return validate_release(release_dir(cfg), cfg, leaks=False)


def release_path_leaks(cfg: Settings) -> list[str]:
    return release_leaks(release_dir(cfg), cfg)
