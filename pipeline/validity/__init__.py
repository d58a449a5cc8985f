"""The validity audit: what a model could score without looking, per (source, family, eval level), and what eval and
SFT share.

    audit(eval_rows, sft_rows, vcfg, thumbs=None, fps_of=None, column_values=None) -> report (JSON-able, deterministic)
    problems(report, vcfg) -> list of "source/family: what" strings (empty when every configured limit holds; the
                              step track's blind gates, report["steps"], included)
    warnings(report, vcfg) -> model-facing metadata leaks whose limit is null (reported, not blocking)
    run_validity(cfg) -> summary    the stage: reads the release splits, writes metadata/validity_report.{json,md}

Thresholds are in configs/validity.yaml (`limits`, with `level_limits` overriding them per eval level). Every eval
level (L1 and the out-of-distribution L2 / L3 files) is audited against the same SFT rows. A release with the T13 step
files gets the step track's blind gates too (pipeline/steps/gates.py, `steps` in the report and the limits). Metadata baselines
(metadata.py): each public column alone and a unit's row count; those a model-facing file exposes are checked.
A cell whose eval labels are not balanced (its most frequent eval answer label
above random by more than `balance_tolerance`) is checked against its label prior instead of random (random where the
prior is lower).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import json
from collections import defaultdict
from pathlib import Path

from pipeline.release.files import VALIDITY_REPORT_FILES
from pipeline.release.schema import CHOICE_COLUMNS
from .baselines import cell_baselines
from pipeline.core.seeding import py_rng
from .metadata import (
    column_accuracy,
    metadata_problems,
    predictor_columns,
    row_count_accuracy,
    row_count_null,
    row_counts,
)
from .images import FrameThumbs, shared_images, temporal_gaps
from .report import render_markdown

if TYPE_CHECKING:
    from pipeline.settings.models import ValidityFile
    from pipeline.settings.root import Settings

__all__ = ["audit", "problems", "run_validity"]


REPORT_FILES = VALIDITY_REPORT_FILES  # in the release's metadata/ folder (named in pipeline/release/files.py)
# the release columns the audit reads: the rest of a row (prompts, targets, specs) would only cost the worker memory
AUDIT_COLUMNS = (
    "source_slug",
    "task_id",
    "source_unit_id",
    "camera",
    "frame_indices_json",
    "image_hashes_json",
    "question",
    *CHOICE_COLUMNS,
    "num_choices",
    "answer",
    "answer_text",
    "split_group_id",
    "eval_level",
)


def _level(r: dict):
    return r.get("eval_level")


def _cells(rows: list[dict]) -> dict[tuple, list[int]]:
    out: dict[tuple, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        out[(r["source_slug"], r["task_id"], _level(r))].append(i)
    return out


def _family_order(t: str) -> tuple[int, str]:
    return (int(t[1:]) if t[1:].isdigit() else 999, t)


def _own_values(rows: list[dict]):
    return lambda col: [r.get(col) for r in rows]


def audit(
    eval_rows: list[dict], sft_rows: list[dict], vcfg: ValidityFile, thumbs=None, fps_of=None, column_values=None
) -> dict:
    """Per (source, family, eval level): baselines against the (source, family)'s SFT rows, metadata baselines,
    shared images (needs `thumbs`), T8/T9 gaps (needs `fps_of`). `column_values(col) -> (eval values, sft values)`
    aligned with the rows gives the public columns the rows themselves do not carry (run_validity reads them one at a
    time); without it the rows' own columns are judged."""
    ev = _cells(eval_rows)
    sf: dict[tuple, list[int]] = defaultdict(list)
    for i, r in enumerate(sft_rows):
        sf[(r["source_slug"], r["task_id"])].append(i)
    k = int(vcfg.near_duplicate.hamming)
    tfam = set(vcfg.temporal.families)
    keys = sorted(
        set(ev) | {(s, t, None) for s, t in sf if not any(c[:2] == (s, t) for c in ev)},
        key=lambda c: (c[0], _family_order(c[1]), str(c[2] or "")),
    )
    present = set().union(*(r.keys() for r in eval_rows[:1] + sft_rows[:1])) if (eval_rows or sft_rows) else set()
    if column_values is None:
        columns = predictor_columns(present)
        column_values = lambda col: (_own_values(eval_rows)(col), _own_values(sft_rows)(col))
    else:
        columns = column_values(None)
    meta: dict[tuple, dict] = defaultdict(dict)
    null: dict[tuple, float | None] = {}  # the row count's chance level per cell (metadata.row_count_null)
    if eval_rows:
        for col in columns:
            ev_vals, sf_vals = column_values(col)
            for key in keys:
                e, s = ev.get(key, []), sf.get(key[:2], [])
                if e:
                    meta[key][col] = column_accuracy(
                        [sf_vals[i] for i in s],
                        [sft_rows[i] for i in s],
                        [ev_vals[i] for i in e],
                        [eval_rows[i] for i in e],
                    )
        e_cnt, s_cnt = row_counts(eval_rows, _level), row_counts(sft_rows, lambda r: None)
        rc_null = vcfg.row_count_null
        for key in keys:
            e, s = ev.get(key, []), sf.get(key[:2], [])
            if e:
                args = (
                    [s_cnt[i] for i in s],
                    [sft_rows[i] for i in s],
                    [e_cnt[i] for i in e],
                    [eval_rows[i] for i in e],
                )
                meta[key]["row_count"] = row_count_accuracy(*args)
                null[key] = row_count_null(
                    *args,
                    int(rc_null.permutations),
                    float(rc_null.quantile),
                    py_rng(0, "validity.row_count_null", *map(str, key)),
                )
    cells = []
    for source, task, level in keys:
        e = [eval_rows[i] for i in ev.get((source, task, level), [])]
        s = [sft_rows[i] for i in sf.get((source, task), [])]
        cell = {"source": source, "family": task, "level": level, **cell_baselines(s, e, vcfg.bag_of_words)}
        cell["metadata"] = dict(sorted(meta.get((source, task, level), {}).items()))
        if null.get((source, task, level)) is not None:
            cell["row_count_null"] = null[(source, task, level)]
        if thumbs is not None:
            cell["images"] = shared_images(s, e, thumbs, k)
        if fps_of is not None and task in tfam:
            cell["temporal"] = temporal_gaps(e + s, fps_of, thumbs or (lambda *a: None))
        cells.append(cell)
    return {
        "version": 2,
        "eval_items": len(eval_rows),
        "sft_items": len(sft_rows),
        "near_duplicate_hamming": k,
        "cells": cells,
    }


def limits_of(vcfg: ValidityFile, level) -> dict:
    """The limits of one eval level: `limits`, with `level_limits[level]` over them."""
    return {**vcfg.limits.model_dump(), **(vcfg.level_limits.get(level) or {})}  # limit name -> bound


def _reference(c: dict, tol: float, prior_levels=()) -> tuple[bool, float, str]:
    """Whether the cell's eval labels are balanced, and what a model gets without looking: random, or where the labels
    are not balanced the label prior, but never less than guessing (an SFT majority label that is rare in eval puts
    the prior below random). In `prior_levels` (the held-out levels, balanced only as far as their pool allows) never
    less than the cell's own top-label share either: the level's prior, which the scorer reports beside its score."""
    balanced = c["eval_label_share"] <= c["random"] + tol
    ref, name = (
        (c["random"], "random") if balanced or c["label_prior"] <= c["random"] else (c["label_prior"], "label prior")
    )
    if c.get("level") in prior_levels and c["eval_label_share"] > ref:
        ref, name = c["eval_label_share"], "level prior"
    return balanced, ref, name


def warnings(report: dict, vcfg: ValidityFile) -> list[str]:
    """Model-facing metadata leaks whose limit is null (reported, not blocking), judged by metadata_over_reference."""
    out = []
    for c in report["cells"]:
        if c["eval_n"] < int(vcfg.min_eval_items) or c["blind"] is None:
            continue
        lim = limits_of(vcfg, c.get("level"))
        where = f"{c['source']}/{c['family']}" + (f"/{c['level']}" if c.get("level") else "")
        ref = _reference(c, float(vcfg.balance_tolerance), vcfg.prior_reference_levels)[1]
        out += [f"{where}: {m} (not blocking: its limit is null)" for m in metadata_problems(c, ref, lim, True)]
    return out


def problems(report: dict, vcfg: ValidityFile) -> list[str]:
    """Every (source, family, level) past a configured limit, as 'source/family[/level]: reason'."""
    out = []
    tol, min_n = float(vcfg.balance_tolerance), int(vcfg.min_eval_items)
    tcfg = vcfg.temporal
    for c in report["cells"]:
        lim = limits_of(vcfg, c.get("level"))
        where = f"{c['source']}/{c['family']}" + (f"/{c['level']}" if c.get("level") else "")
        img = c.get("images") or {}
        if img and c["eval_n"]:
            exact, near = img["exact_shared"] / c["eval_n"], img["near_shared_fraction"]
            if lim.get("exact_shared_fraction") is not None and exact > float(lim["exact_shared_fraction"]):
                out.append(f"{where}: {img['exact_shared']} eval items show an image identical to an SFT image")
            if lim.get("near_shared_fraction") is not None and near > float(lim["near_shared_fraction"]):
                out.append(f"{where}: {near:.3f} of eval items have a near-duplicate SFT image")
        t = c.get("temporal")
        if t and t["median_gap_s"] is not None:
            need = float(tcfg.for_source(c["source"]).min_median_gap_s or 0.0)
            if t["median_gap_s"] < need:
                out.append(f"{where}: median frame gap {t['median_gap_s']} s < {need} s")
            vd = float(tcfg.min_median_visual_diff)
            if t["median_visual_diff"] is not None and t["median_visual_diff"] < vd:
                out.append(f"{where}: median visual difference {t['median_visual_diff']} < {vd}")
        if c["eval_n"] < min_n or c["blind"] is None:
            continue
        balanced, ref, ref_name = _reference(c, tol, vcfg.prior_reference_levels)
        blind_lim = float(lim["blind_over_random"] if balanced else lim["blind_over_prior"])
        if c["blind"] - ref > blind_lim + 1e-9:
            out.append(
                f"{where}: blind text-only {c['blind']:.3f} exceeds {ref_name} {ref:.3f} by more than {blind_lim:.2f}"
            )
        if c["option_only"] - ref > float(lim["option_only_over_reference"]) + 1e-9:
            out.append(
                f"{where}: option-set-only {c['option_only']:.3f} exceeds {ref_name} {ref:.3f} by more than "
                f"{float(lim['option_only_over_reference']):.2f}"
            )
        out += [f"{where}: {m}" for m in metadata_problems(c, ref, lim)]
    if report.get("steps"):  # the T13 step track's blind gates (pipeline/steps/gates.py)
        from ..steps.gates import gate_problems

        out += gate_problems(report["steps"], vcfg.steps)
    return out


def _fps_table(wd: Path, sources: list[str]):
    import polars as pl

    fps = {}
    for s in sources:
        p = wd / "ir" / s / "units.parquet"
        if p.exists():
            for u, f in pl.read_parquet(p, columns=["unit_id", "fps"]).iter_rows():
                fps[(s, u)] = float(f)
    return lambda source, unit_id: fps.get((source, unit_id))


def run_validity(
    cfg: Settings,
    release_dir: Path | None = None,
    work_dir: Path | None = None,
    checksums: bool = True,
    fingerprint: str | None = None,
) -> dict:
    """The stage: audit the written release splits (+ the items' frame thumbnails, the IR's fps), write
    metadata/validity_report.json and .md, re-write checksums.sha256 to cover them (when the release has one and
    `checksums`; the release stage writes it once at its end), and return {"problems": [...], "cells": n}.
    `fingerprint`: the audited release's (`release_fingerprint` in the report; inside the build the release step
    states it once it is known: pipeline/release/identity.py stamp_release)."""
    import polars as pl

    from pipeline.settings.config import path_in_repo

    vcfg = cfg.validity  # configs/validity.yaml, validated by pipeline.settings.models.ValidityFile
    rel = Path(release_dir or path_in_repo(cfg.build.release_dir))
    wd = Path(work_dir or path_in_repo(cfg.build.work_dir))
    from pipeline.release.files import eval_level_files
    from pipeline.release.writers import file_names, write_checksums

    names = file_names(cfg)
    paths = {"eval": [rel / f for f in eval_level_files(rel, cfg).values()], "sft": [rel / names["sft_parquet"]]}
    have = {k: [set(pl.read_parquet_schema(f)) for f in v] for k, v in paths.items()}

    def read(split: str, cols: list[str]) -> pl.DataFrame:  # the same columns of every file of a split, in order
        return pl.concat(
            [pl.read_parquet(f, columns=[c for c in cols if c in h]) for f, h in zip(paths[split], have[split])],
            how="diagonal_relaxed",
        )

    ev, sf = (read(k, list(AUDIT_COLUMNS)).to_dicts() for k in ("eval", "sft"))
    common = set.intersection(*have["eval"], *have["sft"])

    def column_values(col):  # one public column at a time: the whole rows would cost the worker memory
        if col is None:
            return predictor_columns(common)
        return tuple(read(k, [col])[col].to_list() for k in ("eval", "sft"))

    sources = sorted({r["source_slug"] for r in ev + sf})
    report = audit(
        ev, sf, vcfg, thumbs=FrameThumbs(wd, sources), fps_of=_fps_table(wd, sources), column_values=column_values
    )
    from ..steps.gates import step_gates
    from ..steps.tables import read_step_tables

    steps = read_step_tables(rel, cfg)  # None without step files: the report is as before the step track
    if steps is not None:
        report["steps"] = step_gates(steps["eval"], steps["sft"], vcfg.steps)
    report["problems"] = problems(report, vcfg)
    report["warnings"] = warnings(report, vcfg)
    if fingerprint is not None:
        report["release_fingerprint"] = fingerprint
    write_report(report, rel / "metadata")
    if checksums and (rel / names["checksums"]).exists():  # the report is part of the release: cover it
        write_checksums(rel, cfg)
    return {"problems": report["problems"], "cells": len(report["cells"])}


def write_report(report: dict, metadata_dir: Path) -> None:
    from pipeline.core.io import atomic_write_bytes

    atomic_write_bytes(metadata_dir / REPORT_FILES[0], (json.dumps(report, indent=1, sort_keys=True) + "\n").encode())
    atomic_write_bytes(metadata_dir / REPORT_FILES[1], render_markdown(report).encode())


def state_fingerprint(release_dir: Path, fingerprint: str) -> None:
    """Name the audited release in its validity report (`release_fingerprint`, json and md) when there is one: the
    release step does once the fingerprint is known (pipeline/release/identity.py stamp_release)."""
    path = Path(release_dir) / "metadata" / REPORT_FILES[0]
    if path.is_file():
        report = json.loads(path.read_text(encoding="utf-8"))
        report["release_fingerprint"] = fingerprint
        write_report(report, path.parent)


def merge_human(
    cfg: Settings, release_dir: Path, files: list[Path], drop_unknown: bool = False, fingerprint: str | None = None
) -> dict:
    """Add the human check (verdict files of pipeline/review.py pages) to the release's validity report as its
    `human` section (json + md; checksums re-written when the release has them); returns that section. Verdicts are
    matched by item uid (pipeline/validity/human.py); every file is read and matched before the report is touched, so
    a bad file (ValueError naming it) changes nothing. `fingerprint`: the release's, when the caller has read it."""
    from pipeline.release.identity import release_fingerprint
    from pipeline.release.writers import file_names, write_checksums
    from .human import human_report, load_verdicts, match_verdicts, release_keys

    rel = Path(release_dir)
    path = rel / "metadata" / REPORT_FILES[0]
    if not path.exists():
        raise FileNotFoundError(f"{path}: no validity report to merge into (run the audit first: --work-dir)")
    report = json.loads(path.read_text(encoding="utf-8"))
    keys = release_keys(rel, cfg)
    fingerprint = fingerprint or release_fingerprint(rel, cfg)
    merged = match_verdicts(load_verdicts(files), keys, fingerprint, drop_unknown)
    report["human"] = human_report(merged, keys, cfg.validity.human)
    write_report(report, rel / "metadata")
    if (rel / file_names(cfg)["checksums"]).exists():
        write_checksums(rel, cfg)
    return report["human"]


def command(args) -> int:
    """`processbench validity --release DIR [--work-dir DIR] [--human FILE ... [--drop-unknown]]`: audit a written
    release (with --work-dir), merge human verdicts into its report (with --human), print its problems."""
    from pipeline.settings.config import load_settings

    cfg = load_settings()
    if not args.work_dir and not args.human:
        print("processbench validity: give --work-dir (the audit), --human FILE ... (merge verdicts), or both")
        return 2
    from pipeline.release.identity import ReleaseIdentityError, release_fingerprint

    try:  # the report names the release it audits
        fingerprint = release_fingerprint(Path(args.release), cfg)
    except ReleaseIdentityError as exc:
        print(f"processbench validity: error: {exc}")
        return 2
    print(f"release {args.release}: fingerprint {fingerprint}")
    rc = 0
    if args.work_dir:
        summary = run_validity(
            cfg, release_dir=Path(args.release), work_dir=Path(args.work_dir), fingerprint=fingerprint
        )
        for p in summary["problems"]:
            print(f"VALIDITY: {p}")
        print(
            f"{args.release}/metadata/validity_report.md: {summary['cells']} cells, "
            f"{len(summary['problems'])} problem(s)"
        )
        rc = 1 if summary["problems"] else 0
    if args.human:
        from .human import short

        try:
            files = [Path(f) for f in args.human]
            human = merge_human(cfg, Path(args.release), files, bool(args.drop_unknown), fingerprint)
        except (ValueError, FileNotFoundError) as exc:
            for line in str(exc).splitlines():
                print(f"processbench validity: {line}")
            return 2
        for r in human["files"]:
            print(
                f"HUMAN: {r['file']} ({r['annotator']}, {r['source']} {r['family']}): {r['merged']} of "
                f"{r['verdicts']} verdicts merged"
                + (f", {r['refused']} on items not in this release left out" if r["refused"] else "")
                + ("" if r["this_release"] else f"; made for another release ({short(r['release_fingerprint'])})")
            )
        for c in human["cells"]:
            print(
                f"HUMAN: {c['source']}/{c['family']}: accuracy {c['accuracy']:.3f} over {c['judgments']} "
                f"judgments (chance {c['chance']:.3f}){'' if c['decidable'] else ' NOT DECIDABLE'}"
            )
        for c in human["steps"]:
            if c["source"] == "all":
                agrees = "no label verdict" if c["agreement"] is None else f"agrees {c['agreement']:.3f}"
                print(
                    f"HUMAN: steps/{c['class']}: {agrees} over {c['judgments']} judgments (right {c['right']:.3f}, "
                    f"wrong {c['wrong']:.3f}, unsure {c['unsure']:.3f})"
                )
    return rc
