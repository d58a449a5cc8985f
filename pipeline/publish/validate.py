"""The release validator (`processbench validate DIR`); the path-leak scanner is pipeline/core/leaks.py, its scan of every
release file pipeline/release/scan.py.

    problems = validate_release(Path("release"))      # [] when the release is valid

The validator trusts nothing it did not recompute: it reads the files back, compares parquet with its jsonl mirror,
recomputes every count, baseline, group list and reference string from the rows, and checks them against the
manifests, split_summary.json, task_distribution.csv, the group lists and checksums.sha256.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import csv
import json
import re
from collections import defaultdict
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from pipeline.release import writers
from pipeline.core.io import strict_json
from pipeline.exports.facing import release_problems as model_facing_problems
from pipeline.exports.common import recorded_warnings
from pipeline.ingest.run import unit_id_problem
from pipeline.core.io import compact_json
from pipeline.core.leaks import find_path_leaks
from pipeline.steps.write import step_problems, step_tables
from pipeline.release.quotas import counts as quota_counts, quota_problems, recorded_quotas
from pipeline.release.scan import release_leaks
from pipeline.publish.validate_derived import export_problems, provenance_problems, validity_problems
from pipeline.publish.validate_files import check_files, max_file_bytes
from pipeline.release.files import not_a_release
from pipeline.release.schema import (
    CHOICE_COLUMNS,
    CHOICE_LETTERS,
    COLUMN_NAMES,
    NON_NULLABLE,
    polars_schema,
    reconstruction_key_json,
    schema_markdown,
    sft_target,
    source_episode_ref,
    visual_ref,
)

if TYPE_CHECKING:
    from pipeline.settings.root import Settings
    from pipeline.settings.models import ReleaseFile

# ---------------------------------------------------------------- helpers


class _Report:
    def __init__(self) -> None:
        self.problems: list[str] = []
        self.rows: dict[tuple[str, str], list[str]] = defaultdict(list)
        self.too_big: set[Path] = set()  # files past release.max_file_bytes: reported once, never read

    def text(self, path: Path) -> str:
        """A release text file as UTF-8 (with replacement); empty when it is too large to read."""
        return "" if path in self.too_big else path.read_bytes().decode("utf-8", "replace")

    def add(self, msg: str) -> None:
        self.problems.append(msg)

    def row(self, where: str, check: str, item_id) -> None:
        self.rows[(where, check)].append(str(item_id))

    def done(self) -> list[str]:
        for (where, check), ids in sorted(self.rows.items()):
            self.problems.append(f"{where}: {check} ({len(ids)} rows, e.g. {ids[:3]})")
        return self.problems


def _eq(report: _Report, what: str, got, want) -> None:
    if got != want:
        report.add(f"{what}: {got!r} != {want!r} (from the rows)")


def _read_json(path: Path, report: _Report):
    try:
        return strict_json(report.text(path))
    except (OSError, ValueError) as exc:
        report.add(f"{path.name}: unreadable JSON ({exc})")
        return None


# ---------------------------------------------------------------- checks


def _check_checksums(root: Path, cfg: Settings, report: _Report) -> None:
    rel = writers.file_names(cfg)["checksums"]
    path = root / rel
    if not path.is_file():
        return
    listed: dict[str, str] = {}
    for n, line in enumerate(report.text(path).splitlines(), 1):
        m = re.fullmatch(r"([0-9a-f]{64}) [ *](.+)", line)
        if not m:
            report.add(f"{rel}:{n}: not a sha256sum line: {line[:80]!r}")
            continue
        name = m.group(2)
        if name in listed:
            report.add(f"{rel}: {name} listed twice")
        listed[name] = m.group(1)
    if list(listed) != sorted(listed):
        report.add(f"{rel}: entries are not sorted by path")
    for name, digest in listed.items():
        target = root / name
        if Path(name).is_absolute() or ".." in Path(name).parts:
            report.add(f"{rel}: entry {name!r} is not a release-relative path")
        elif not target.is_file():
            report.add(f"{rel}: lists {name}, which does not exist")
        elif target not in report.too_big and writers.sha256_file(target) != digest:
            report.add(f"{rel}: checksum mismatch for {name}")
    for name in writers.release_files_on_disk(root, cfg):
        if name not in listed:
            report.add(f"{rel}: {name} is not covered by a checksum")


def _read_split(
    root: Path, split: str, cfg: Settings, report: _Report, rels: tuple[str, str] | None = None
) -> pl.DataFrame | None:
    files = writers.file_names(cfg)
    pq_rel, jl_rel = rels or (files[f"{split}_parquet"], files[f"{split}_jsonl"])
    df = None
    if (root / pq_rel).is_file() and root / pq_rel not in report.too_big:
        try:
            df = pl.read_parquet(root / pq_rel)
        except Exception as exc:  # noqa: BLE001 - any unreadable file is a problem to report
            report.add(f"{pq_rel}: unreadable parquet ({exc})")
            return None
        got, want = list(df.schema.items()), list(polars_schema().items())
        if got != want:
            diff = [f"{a}!={b}" for a, b in zip(got, want) if a != b][:3]
            report.add(
                f"{pq_rel}: schema differs from pipeline/release/schema.py "
                f"({len(got)} vs {len(want)} columns; first differences {diff})"
            )
            return None
        meta = pq.read_metadata(root / pq_rel).metadata or {}
        for k, v in meta.items():
            if k != b"ARROW:schema":
                for leak in find_path_leaks(k.decode("utf-8", "replace") + " " + v.decode("utf-8", "replace")):
                    report.add(f"{pq_rel}: key-value metadata: {leak}")
    if df is not None and (root / jl_rel).is_file():
        rows = df.to_dicts()
        # lines end at "\n" only: the writer's JSON keeps U+2028/U+2029 and U+0085 inside strings as they are
        lines = report.text(root / jl_rel).split("\n")
        lines = lines[:-1] if lines and lines[-1] == "" else lines
        if len(lines) != len(rows):
            report.add(f"{jl_rel}: {len(lines)} rows, {pq_rel}: {len(rows)} rows")
        else:
            for n, (line, row) in enumerate(zip(lines, rows), 1):
                try:
                    obj = strict_json(line)
                except ValueError as exc:
                    report.add(f"{jl_rel}:{n}: not JSON ({exc})")
                    break
                if list(obj) != list(COLUMN_NAMES) or obj != row:
                    report.add(f"{jl_rel}:{n}: differs from {pq_rel} row {n} ({row.get('item_id')})")
                    break
    return df


def _check_rows(df: pl.DataFrame, split: str, where: str, cfg: Settings, report: _Report) -> None:
    rc = cfg.release
    names = writers.source_names(cfg)
    try:
        tnames = cfg.task_names()
    except ValueError as exc:
        report.add(str(exc))
        tnames = {}
    id_re = re.compile(r"%s_%s_\d{6}" % (re.escape(rc.item_id_prefix), re.escape(split)))
    for col in NON_NULLABLE:
        n = df.get_column(col).null_count()
        if n:
            report.add(f"{where}: {col} has {n} nulls")
    ids = df.get_column("item_id").to_list()
    if len(set(ids)) != len(ids):
        report.add(f"{where}: duplicate item_id values")
    if ids != sorted(i for i in ids if i is not None) and None not in ids:
        report.add(f"{where}: rows are not sorted by item_id")
    versions = {
        "split_version": rc.split_version,
        "builder_version": rc.builder_version,
        "prompt_version": rc.prompt_version,
    }
    for r in df.iter_rows(named=True):
        bad = lambda check, iid=r["item_id"]: report.row(where, check, iid)
        _check_row_fields(r, split, id_re, rc, names, tnames, versions, bad)
        _check_row_frames(r, bad)


def _check_row_fields(
    r: dict, split: str, id_re: re.Pattern, rc: ReleaseFile, names: dict, tnames: dict, versions: dict, bad
) -> None:
    """One row's ids, names, versions, choices, answer and target."""
    iid = r["item_id"]
    if iid is None or not id_re.fullmatch(iid):
        bad(f"item_id not of the form {rc.item_id_prefix}_{split}_NNNNNN")
    if r["split"] != split:
        bad(f"split is not {split!r}")
    slug = r["source_slug"]
    if slug not in names:
        bad("unknown source_slug")
    elif r["source"] != names[slug]:
        bad("source name does not match source_slug")
    if tnames and tnames.get(r["task_id"]) != r["task_name"]:
        bad("task_name is not the configured name of task_id")
    for col, want in versions.items():
        if r[col] != want:
            bad(f"{col} is not {want!r}")
    if r["task_meta_public"] is not False:
        bad("task_meta_public is not false")
    # choices, answer, target
    n = r["num_choices"]
    if not isinstance(n, int) or not 2 <= n <= len(CHOICE_LETTERS):
        bad("num_choices outside 2..6")
    else:
        choices = [r[c] for c in CHOICE_COLUMNS]
        if any(c is None for c in choices[:n]) or any(c is not None for c in choices[n:]):
            bad("choices not non-null exactly up to num_choices")
        elif len(set(choices[:n])) != n:
            bad("duplicate choice texts")
        letters = CHOICE_LETTERS[:n]
        if r["answer"] not in letters:
            bad("answer is not a letter within num_choices")
        elif r[f"choice_{r['answer']}"] != r["answer_text"]:
            bad("answer_text is not the text of the answer's choice")
    if r["sft_target"] != sft_target(r["answer"]):
        bad("sft_target does not match answer")


def _check_row_frames(r: dict, bad) -> None:
    """One row's frames and references: frame indices, display labels, path-free keys, render spec, image hashes."""
    slug = r["source_slug"]
    # frames and references
    try:
        frames = strict_json(r["frame_indices_json"])
        assert isinstance(frames, list) and frames and all(isinstance(i, int) and i >= 0 for i in frames)
        assert compact_json(frames) == r["frame_indices_json"]
    except (TypeError, ValueError, AssertionError):
        bad("frame_indices_json is not a canonical non-empty JSON list of frame indices")
        return
    if r["num_frames"] != len(frames):
        bad("num_frames != len(frame_indices_json)")
    labels = None
    if r["display_labels_json"] is not None:
        try:
            labels = strict_json(r["display_labels_json"])
            assert isinstance(labels, list) and len(labels) == len(frames)
        except (ValueError, AssertionError):
            bad("display_labels_json is not a JSON list with one label per frame")
    key = (slug, r["source_unit_type"], r["source_unit_id"])
    if why := unit_id_problem(r["source_unit_id"]):  # what ingest refuses never reaches a release
        bad(f"source_unit_id {ascii(r['source_unit_id'])}: {why.split(':')[0]}")
    if r["visual_ref"] != visual_ref(*key, r["camera"], frames):
        bad("visual_ref does not match source/unit/camera/frames")
    if r["source_episode_ref"] != source_episode_ref(*key):
        bad("source_episode_ref does not match source/unit")
    if r["reconstruction_key_json"] != reconstruction_key_json(
        slug, r["source_task_id"], r["source_unit_type"], r["source_unit_id"], r["camera"], frames
    ):
        bad("reconstruction_key_json does not match the row")
    n_images = len(frames)
    if r["render_spec_json"] is not None:
        try:
            spec = strict_json(r["render_spec_json"])
            assert isinstance(spec, dict) and compact_json(spec) == r["render_spec_json"]
            if spec.get("frame_indices") is not None and spec["frame_indices"] != frames:
                bad("render_spec_json frame_indices differ from frame_indices_json")
            if spec.get("labels") is not None and labels is not None and spec["labels"] != labels:
                bad("render_spec_json labels differ from display_labels_json")
            if spec.get("kind") == "panels":
                n_images = 1
        except (ValueError, AssertionError):
            bad("render_spec_json is not canonical compact JSON of an object")
    if r["image_hashes_json"] is not None:
        try:
            hashes = strict_json(r["image_hashes_json"])
            assert isinstance(hashes, list) and all(isinstance(h, str) and writers.HEX64.match(h) for h in hashes)
            if len(hashes) != n_images:
                bad("image_hashes_json count differs from the images shown")
        except (ValueError, AssertionError):
            bad("image_hashes_json is not a JSON list of sha256 hex digests")
    if r["eval_level"] is not None and not re.fullmatch(r"L\d+", r["eval_level"]):
        bad("eval_level is not of the form L<n>")


def _check_metadata(
    root: Path,
    tables: dict[str, pl.DataFrame],
    cfg: Settings,
    report: _Report,
    levels: dict[str, pl.DataFrame],
    has_levels: bool,
) -> None:
    rc = cfg.release
    files = writers.file_names(cfg)
    ev, sf = tables.get("eval"), tables.get("sft")
    ev_all = pl.concat([ev, *levels.values()]) if ev is not None and levels else ev
    groups = {s: set(df.get_column("split_group_id").to_list()) for s, df in tables.items()}

    # group lists
    for split in tables:
        rel = files[f"split_groups_{split}"]
        if (root / rel).is_file():
            listed = report.text(root / rel).splitlines()
            if listed != sorted(set(listed)):
                report.add(f"{rel}: not sorted and unique")
            if set(listed) != groups[split]:
                report.add(f"{rel}: {len(set(listed))} groups listed, the {split} rows have {len(groups[split])}")
    listed = {}
    for split in writers.SPLITS:
        rel = files[f"split_groups_{split}"]
        if (root / rel).is_file():
            listed[split] = set(report.text(root / rel).splitlines())
    if len(listed) == 2 and listed["eval"] & listed["sft"]:
        report.add(f"split group lists share {len(listed['eval'] & listed['sft'])} groups")
    if ev is not None and sf is not None:
        shared = groups["eval"] & groups["sft"]
        if shared:
            report.add(f"{len(shared)} split_group_id values on both splits, e.g. {sorted(shared)[:3]}")
        shared_ids = set(ev.get_column("item_id").to_list()) & set(sf.get_column("item_id").to_list())
        if shared_ids:
            report.add(f"{len(shared_ids)} item_id values on both splits")

    # manifests
    for split, df in tables.items():
        rel = files[f"{split}_manifest"]
        if not (root / rel).is_file():
            continue
        m = _read_json(root / rel, report)
        if not isinstance(m, dict):
            continue
        want = writers.build_manifest(
            split,
            df,
            cfg,
            "L1" if split == "eval" and has_levels else None,
            recorded_warnings(root, cfg),
            recorded_quotas(root, cfg),
        )
        for key in sorted(set(m) - set(want)):
            report.add(f"{rel}: unknown key {key!r} (the build writes none)")
        for key in sorted(want):
            if key not in m:
                report.add(f"{rel}: lacks {key}")
            elif m[key] != want[key]:
                report.add(
                    f"{rel}: {key} = {json.dumps(m[key])[:200]} but the rows/configs give {json.dumps(want[key])[:200]}"
                )

    _check_split_summary(root, files, ev_all, sf, cfg, report)
    _check_task_distribution(root, files, ev, cfg, report)

    # schema.md is generated, never edited
    rel = files["schema"]
    if (root / rel).is_file():
        if report.text(root / rel) != schema_markdown(rc, writers.schema_source_names(cfg)):
            report.add(f"{rel}: differs from the schema generated from pipeline/release/schema.py")


def _check_split_summary(
    root: Path, files: dict, ev_all: pl.DataFrame | None, sf: pl.DataFrame | None, cfg: Settings, report: _Report
) -> None:
    """split_summary.json against the one the rows and configs give."""
    rel = files["split_summary"]
    if (root / rel).is_file() and ev_all is not None and sf is not None:
        s = _read_json(root / rel, report)
        if isinstance(s, dict):
            want = writers.build_split_summary(ev_all, sf, {}, cfg)
            for key in (
                "version",
                "split_version",
                "builder_version",
                "release_version",
                "total_items",
                "eval_items",
                "sft_items",
                "eval_groups",
                "sft_groups",
                "task_counts_total",
                "task_counts_eval",
                "task_counts_sft",
                "task_aliases",
                "hf_split_names",
            ):
                if s.get(key) != want[key]:
                    report.add(
                        f"{rel}: {key} = {json.dumps(s.get(key))[:200]} but the rows/configs give "
                        f"{json.dumps(want[key])[:200]}"
                    )
            got_src = s.get("sources") if isinstance(s.get("sources"), dict) else {}
            for slug, ws in want["sources"].items():
                gs = got_src.get(slug)
                if not isinstance(gs, dict):
                    report.add(f"{rel}: sources.{slug} missing")
                    continue
                for key, value in ws.items():
                    if key != "group_unit" and gs.get(key) != value:
                        report.add(
                            f"{rel}: sources.{slug}.{key} = {json.dumps(gs.get(key))[:200]} but the rows give "
                            f"{json.dumps(value)[:200]}"
                        )
            for slug in set(got_src) - set(want["sources"]):
                report.add(f"{rel}: sources.{slug} has no rows")
            for key in _forbidden_keys(s):
                report.add(f"{rel}: machine-specific or wall-clock field {key}")


def _check_task_distribution(root: Path, files: dict, ev: pl.DataFrame | None, cfg: Settings, report: _Report) -> None:
    """task_distribution.csv against the eval rows."""
    rel = files["task_distribution"]
    if (root / rel).is_file() and ev is not None:
        text = report.text(root / rel)
        got_rows = list(csv.reader(text.splitlines()))
        if not got_rows or tuple(got_rows[0]) != writers.TASK_DISTRIBUTION_HEADER:
            report.add(f"{rel}: header is not {','.join(writers.TASK_DISTRIBUTION_HEADER)}")
        else:
            total = 0
            for n, row in enumerate(got_rows[1:], 2):
                try:
                    total += int(row[2]) if len(row) == len(got_rows[0]) and row[2] != "" else 0
                except ValueError:
                    report.add(f"{rel}:{n}: eval_n {row[2]!r} is not a number")
                if len(row) != len(got_rows[0]):
                    report.add(f"{rel}:{n}: {len(row)} fields, the header has {len(got_rows[0])}")
            _eq(report, f"{rel} sum of eval_n", total, ev.height)
            want_rows = list(
                csv.reader(writers.task_distribution_csv(ev, cfg, recorded_quotas(root, cfg)).splitlines())
            )
            if got_rows != want_rows:
                diff = [(g, w) for g, w in zip(got_rows, want_rows) if g != w][:2]
                report.add(
                    f"{rel}: differs from the eval rows ({len(got_rows) - 1} vs {len(want_rows) - 1} tasks; "
                    f"e.g. {diff})"
                )


def _forbidden_keys(obj, where: str = "") -> list[str]:
    out = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if str(k).lower() in writers.FORBIDDEN_KEYS:
                out.append(f"{where}.{k}".lstrip("."))
            out += _forbidden_keys(v, f"{where}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _forbidden_keys(v, f"{where}[{i}]")
    return out


def validate_release(release_dir: Path, cfg: Settings | None = None, leaks: bool = True) -> list[str]:
    """All problems found in the release folder (empty list = valid). leaks=False leaves out the path / identity
    scan of every file (`release_leaks`), which the build runs as a check of its own."""
    if cfg is None:
        from pipeline.settings.config import load_settings

        cfg = load_settings()
    root = Path(release_dir)
    report = _Report()
    if not root.is_dir():
        return [f"{root.absolute()} is not a folder: give the folder a build published (release/ by default)"]
    try:
        files = writers.file_names(cfg)
    except (KeyError, ValueError) as exc:
        return [f"configs/release.yaml: {exc}"]
    if problem := not_a_release(root, files):
        return [problem]
    too_big = check_files(root, report.add, max_file_bytes(cfg))
    report.too_big = {root / rel for rel in too_big}
    from pipeline.steps.tables import absent_step_track  # a release without any T13 step file has no step track

    optional = absent_step_track(root, files)
    for key, rel in sorted(files.items()):
        if key not in optional and not (root / rel).is_file():
            report.add(f"missing file {rel} ({key})")
    _check_checksums(root, cfg, report)
    tables: dict[str, pl.DataFrame] = {}
    for split in writers.SPLITS:
        df = _read_split(root, split, cfg, report)
        if df is not None:
            _check_rows(df, split, files[f"{split}_parquet"], cfg, report)
            tables[split] = df
    listed, levels = _check_levels(root, tables, cfg, report)
    _check_metadata(root, tables, cfg, report, levels, listed)
    read = lambda path: _read_json(path, report)
    every = {
        k: pl.concat([v, *levels.values()], how="vertical_relaxed") if k == "eval" else v for k, v in tables.items()
    }  # every eval level, in level order, as the exports and the audit read them
    for problem in (
        export_problems(root, cfg, too_big)
        + provenance_problems(root, cfg, every, read)
        + validity_problems(root, cfg, every, read)
    ):
        report.add(problem)
    mcq = {
        "eval": {
            g for df in [tables.get("eval"), *levels.values()] if df is not None for g in df["split_group_id"].to_list()
        },
        "sft": set(tables["sft"]["split_group_id"].to_list()) if "sft" in tables else set(),
    }
    for problem in step_problems(root, cfg, mcq):  # the T13 step files (pipeline/steps/write.py)
        report.add(problem)
    for problem in _uid_problems(root, cfg, every):  # item_uid of every row (pipeline/release/identity.py)
        report.add(problem)
    for problem in _quota_problems(root, cfg, every, read):
        report.add(problem)
    problems = report.done() + model_facing_problems(root, cfg, skip=too_big)
    return problems + release_leaks(root, cfg, skip=too_big) if leaks else problems


def _uid_problems(root: Path, cfg: Settings, every: dict[str, pl.DataFrame]) -> list[str]:
    """Each row's item_uid recomputed from the row (with the template variants the release was built with), and no
    uid on two rows of any file, either track."""
    from pipeline.release.identity import built_variants, uid_problems
    from pipeline.steps.rows import STEP_SCHEMA
    from pipeline.steps.write import step_tables

    mcq = [df for df in every.values() if "item_uid" in df.columns]
    try:
        steps = [(rel, df) for rel, df in step_tables(root, cfg).items() if list(df.schema) == list(STEP_SCHEMA)]
    except Exception:  # noqa: BLE001 - unreadable step files are reported by step_problems
        steps = []
    table = pl.concat(mcq, how="vertical_relaxed") if mcq else None
    return uid_problems(table, steps, built_variants(root, cfg))


def _quota_problems(root: Path, cfg: Settings, tables: dict[str, pl.DataFrame], read_json) -> list[str]:
    """provenance.json's quota cells against the rows of both tracks (pipeline/release/quotas.py); the manifests, the
    CSV and the card are held to these cells where they are checked."""
    rel = writers.file_names(cfg)["provenance"]
    doc = read_json(root / rel) if (root / rel).is_file() else None
    if not isinstance(doc, dict) or "quotas" not in doc:
        return []
    try:
        steps = list(step_tables(root, cfg).values())
    except (OSError, ValueError, KeyError, pl.exceptions.PolarsError):
        steps = []  # unreadable step files: reported by step_problems
    return quota_problems(doc["quotas"], quota_counts(*tables.values(), *steps), rel)


def _check_levels(
    root: Path, tables: dict[str, pl.DataFrame], cfg: Settings, report: _Report
) -> tuple[bool, dict[str, pl.DataFrame]]:
    """The out-of-distribution eval level files split_summary.json lists (L2, L3, ...): rows, level column, manifest,
    group list, and isolation from SFT and from the other eval files. Returns (levels listed?, {level: rows})."""
    s = (
        _read_json(root / writers.file_names(cfg)["split_summary"], report)
        if (root / writers.file_names(cfg)["split_summary"]).is_file()
        else None
    )
    listed = (s or {}).get("eval_levels") or {} if isinstance(s, dict) else {}
    out: dict[str, pl.DataFrame] = {}
    ev = tables.get("eval")
    if ev is not None and listed:
        wrong = ev.filter(pl.col("eval_level").is_null() | (pl.col("eval_level") != "L1")).height
        if wrong:
            report.add(f"{writers.file_names(cfg)['eval_parquet']}: {wrong} rows are not eval_level L1")
    for level in sorted(lv for lv in listed if lv != "L1"):
        lf = writers.level_file_names(cfg, level)
        for rel in lf.values():
            if not (root / rel).is_file():
                report.add(f"missing file {rel} (eval level {level})")
        df = _read_split(root, "eval", cfg, report, (lf["parquet"], lf["jsonl"]))
        if df is None:
            continue
        _check_rows(df, "eval", lf["parquet"], cfg, report)
        if df.filter(pl.col("eval_level").is_null() | (pl.col("eval_level") != level)).height:
            report.add(f"{lf['parquet']}: rows whose eval_level is not {level}")
        _eq(report, f"split_summary eval_levels.{level}.items", listed[level].get("items"), df.height)
        if (root / lf["manifest"]).is_file():
            m = _read_json(root / lf["manifest"], report)
            want = writers.build_manifest(
                "eval", df, cfg, level, recorded_warnings(root, cfg), recorded_quotas(root, cfg)
            )
            if isinstance(m, dict) and m != want:
                diff = sorted(k for k in set(m) | set(want) if m.get(k) != want.get(k))
                report.add(f"{lf['manifest']}: differs from its rows in {diff[:5]}")
        groups = set(df.get_column("split_group_id").to_list())
        if (root / lf["split_groups"]).is_file():
            got = report.text(root / lf["split_groups"]).splitlines()
            if got != sorted(groups):
                report.add(f"{lf['split_groups']}: does not list the level's groups sorted and unique")
        for other, odf in [*tables.items(), *out.items()]:
            shared = groups & set(odf.get_column("split_group_id").to_list())
            if shared:
                report.add(f"{level} and {other} share {len(shared)} split groups, e.g. {sorted(shared)[:3]}")
        out[level] = df
    return bool(listed), out
