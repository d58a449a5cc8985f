"""Ingest: run one source adapter over a root and collect the episode IR tables plus the quarantine table.

A unit that cannot be read (any exception while reading it), whose IR violates the schema or the sane ranges of
`build.ir_limits`, or whose text fields (licence, language, segment texts, ...) hold a path or this machine's name
(what the release's leak scanner, pipeline/core/leaks.py, would refuse) becomes a quarantine row (unit, stage, reason,
file) and the rest of the source goes on. A source whose root is unusable, or whose discovery fails, becomes one
quarantine row with unit "*". Reasons, notes and files are made path-free here, the one place every adapter's
messages pass (absolute paths under the root become relative, any other absolute path `<path>`).
A unit whose media was not downloaded (UnitAbsent) is "absent", not broken: one row in the `absent` table, never
counted against the quarantine share. A placeholder unit standing for several upstream units it cannot name (e.g. an
AIST task without a task id) carries their number in the row's `units` column, which the quarantine share counts.

Every unit kept gets a `content_hash` of its clock and signals (never its id or paths): units with equal content are
the same recording under two ids, merged into one split group (configs/split.yaml merge_keys) and noted here.
"""

from __future__ import annotations

import hashlib
import logging
import os
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from upstream_adapters import get_adapter
from upstream_adapters.ir import (
    ABSENT_SCHEMA,
    FRAMES_SCHEMA,
    QUARANTINE_SCHEMA,
    SEGMENTS_SCHEMA,
    SIGNALS_SCHEMA,
    TABLES,
    UNITS_SCHEMA,
    SourceError,
    UnitAbsent,
    UnitError,
    primary_mask,
    to_table,
    validate_unit,
)

from pipeline.ingest.guard import UnitGuard
from pipeline.core.io import write_parquet
from pipeline.core.leaks import find_path_leaks, redact_paths

log = logging.getLogger(__name__)

IR_TABLES = tuple(TABLES)  # units, frames, signals, segments


@dataclass
class IngestResult:
    units: pl.DataFrame
    frames: pl.DataFrame
    signals: pl.DataFrame
    segments: pl.DataFrame
    quarantine: pl.DataFrame
    notes: pl.DataFrame  # source, unit_id, note: what an adapter assumed or repaired in a unit it kept
    absent: pl.DataFrame  # source, unit_id, reason, file: units whose media was not downloaded (skipped)

    def tables(self) -> dict[str, pl.DataFrame]:
        return {
            "units": self.units,
            "frames": self.frames,
            "signals": self.signals,
            "segments": self.segments,
            "quarantine": self.quarantine,
            "notes": self.notes,
            "absent": self.absent,
        }


def quarantine_frame(rows: list[dict]) -> pl.DataFrame:
    return pl.from_arrow(to_table(rows, QUARANTINE_SCHEMA))


# upstream units one quarantine row stands for: its `units` when it names more than one, else one
_ROW_UNITS = pl.col("units").fill_null(1).clip(lower_bound=1)


def units_lost(quarantine: pl.DataFrame) -> int:
    """Upstream units a quarantine table stands for: one per row, or the row's `units` when it names more."""
    if not quarantine.height:
        return 0
    if "units" not in quarantine.columns:
        return quarantine.height
    return int(quarantine.select(_ROW_UNITS.sum()).item())


_CHANNELS = ("pos_x", "pos_y", "pos_z", "speed", "gripper_effort", "gripper_width", "force")


def content_hash(ir) -> str | None:
    """sha256 of a unit's primary-camera clock (t_sec, native_ts) and its signals, without source, ids or paths: the
    same recording stored under another unit id hashes the same. None when every signal channel is null or constant:
    such units (an idle robot) could be equal by chance, so they are not compared."""
    sig = (
        ir.signals
        if _sorted_by_arm_frame(ir.signals)
        else ir.signals.sort_by([("arm", "ascending"), ("frame_index", "ascending")])
    )
    chans = {c: sig.column(c).to_numpy(zero_copy_only=False).astype("<f8") for c in _CHANNELS}
    if not any(np.nanmax(v) > np.nanmin(v) for v in chans.values() if v.size and not np.isnan(v).all()):
        return None
    prim = primary_mask(ir.frames, ir.unit["camera"])
    h = hashlib.sha256(f"{ir.unit['num_frames']}\0{len(sig)}\0".encode())
    for col in ("t_sec", "native_ts"):
        h.update(ir.frames.column(col).to_numpy(zero_copy_only=False)[prim].astype("<f8").tobytes())
    arms = sig.column("arm").combine_chunks()  # "\0".join of the arm names, without a Python str per row
    h.update(pc.binary_join(pa.ListArray.from_arrays([0, len(arms)], arms), "\0")[0].as_py().encode())
    h.update(sig.column("frame_index").to_numpy(zero_copy_only=False).astype("<i8").tobytes())
    for c in _CHANNELS:
        v = chans[c].copy()
        v[np.isnan(v)] = np.nan  # one NaN bit pattern for nulls
        h.update(v.tobytes())
    return h.hexdigest()[:24]


def _sorted_by_arm_frame(sig: pa.Table) -> bool:
    """Already in (arm, frame_index) order, as adapters write signals: the (stable) sort would keep it as it is."""
    if sig.num_rows < 2:
        return True
    arm = sig.column("arm")
    a, b = arm.slice(0, len(arm) - 1), arm.slice(1)
    if pc.any(pc.less(b, a)).as_py():
        return False
    fi = sig.column("frame_index").to_numpy()
    return not np.any(pc.equal(b, a).to_numpy(zero_copy_only=False) & (fi[1:] < fi[:-1]))


def _duplicate_notes(slug: str, units: list[dict]) -> list[dict]:
    """A note on each unit whose content equals another's (the first unit id in sort order is named)."""
    first: dict[str, str] = {}
    out = []
    for u in sorted(units, key=lambda u: u["unit_id"]):
        key = u.get("content_hash")
        if key is None:
            continue
        if key in first:
            out.append(
                {
                    "source": slug,
                    "unit_id": u["unit_id"],
                    "note": f"same clock and signals as unit {first[key]} (content_hash {key}): a duplicate "
                    "recording, kept in one split group with it",
                }
            )
        else:
            first.setdefault(key, u["unit_id"])
    return out


def _frame(tables: list[pa.Table], schema: pa.Schema) -> pl.DataFrame:
    return pl.from_arrow(pa.concat_tables(tables) if tables else schema.empty_table())


# units-row text fields a release file may carry; each must pass the release's leak scanner
TEXT_FIELDS = (
    "task_id",
    "operator_id",
    "scene_id",
    "config_id",
    "taxonomy",
    "official_split",
    "camera",
    "licence",
    "language",
)


def text_field_problem(ir) -> str | None:
    """The first text field of a unit (units row, cameras, segment texts) that pipeline/core/leaks.py would refuse in a
    release file, named with what it looks like (never the text itself, which is the leak); None when clean."""
    fields = [(f"units.{k}", ir.unit.get(k)) for k in TEXT_FIELDS]
    fields.append(("units.cameras", " ".join(map(str, ir.unit.get("cameras") or []))))
    fields.append(("segments.text", "\n".join(str(t) for t in ir.segments.column("text").to_pylist())))
    for name, text in fields:
        if isinstance(text, str) and text:
            leaks = find_path_leaks(text)
            if leaks:
                kinds = sorted({leak.split(" '")[0].split(' "')[0] for leak in leaks})
                return f"{name} holds {', '.join(kinds)} (the release refuses path-like text)"
    return None


def unit_id_problem(unit_id: str) -> str | None:
    """Why a unit id may not reach the release: control, format (zero-width, bidi), private-use, unassigned or line
    separator characters (U+200B, ESC[2J, ...), or a form other than Unicode NFC. None when clean."""
    bad = sorted(
        {
            f"U+{ord(c):04X}"
            for c in unit_id
            if unicodedata.category(c) in ("Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp") or (c.isspace() and c != " ")
        }
    )
    if bad:
        return f"unit id holds control or invisible characters ({', '.join(bad[:5])}): refused at ingest"
    if unicodedata.normalize("NFC", unit_id) != unit_id:
        return "unit id is not in Unicode NFC form (two spellings of one id): refused at ingest"
    return None


def shard_of(unit_id: str, shards: int) -> int:
    """A unit's ingest shard: a stable hash of its id (sha256, never Python's salted hash), alike in every process."""
    return int.from_bytes(hashlib.sha256(unit_id.encode()).digest()[:8], "big") % shards


def ingest_source(
    slug: str,
    root: Path,
    adapter_options: dict | None = None,
    progress: Callable[[Iterable], Iterable] | None = None,
    limits: dict | None = None,
    shard: tuple[int, int] | None = None,
    state: Path | None = None,
) -> IngestResult:
    """Read every unit of one source into the IR. Never raises for bad data: it quarantines.
    `limits`: `build.ir_limits` (default: from configs/build.yaml). `shard` (k, n): only the units of shard k of n
    (`shard_of`); `merge_shards` makes the source's IR of the n results. `state`: the path prefix of the
    files that name the unit being read, so a unit that killed its reader is refused next time
    (pipeline/ingest/guard.py)."""
    if limits is None:
        from pipeline.settings.config import load_settings

        limits = load_settings().build.ir_limits.model_dump()
    adapter = get_adapter(slug, **(adapter_options or {}))
    root = Path(root)
    roots = (str(root), str(root.absolute()), os.path.realpath(root))
    quarantine: list[dict] = []

    def row(
        unit_id: str,
        reason: str,
        file: str | None,
        table: list[dict] = quarantine,
        stage=True,
        units: int | None = None,
    ) -> None:
        rec = {
            "source": slug,
            "unit_id": unit_id,
            "reason": redact_paths(str(reason), roots),
            "file": _relative(file, roots),
        }
        table.append({**rec, "stage": "ingest", "units": units} if stage else rec)

    try:
        unit_ids = adapter.discover(root)
    except SourceError as exc:
        row("*", str(exc), None)
        log.info("%s: source unusable: %s", slug, quarantine[-1]["reason"])
        unit_ids = []
    except Exception as exc:  # noqa: BLE001 - a discovery bug or an unforeseen file problem: one row, no crash
        row("*", f"discovery failed: unexpected {type(exc).__name__}: {exc}", None)
        log.error("%s: source unusable: %s", slug, quarantine[-1]["reason"])
        unit_ids = []
    # Archive-level problems an adapter found while listing (a damaged tar, an unsafe member name): one row each.
    for file, reason in getattr(adapter, "issues", []):
        row("*", reason, file)
    if shard is not None:  # the whole-source rows once (shard 0); duplicates across shards are the merge's to note
        if shard[0]:
            quarantine.clear()
        unit_ids = [u for u in unit_ids if shard_of(u, shard[1]) == shard[0]]
    parts: dict[str, list[pa.Table]] = {"units": [], "frames": [], "signals": [], "segments": []}
    notes: list[dict] = []
    absent: list[dict] = []
    kept: list[dict] = []
    guard = UnitGuard(state, lambda u: adapter.fingerprint(root, u))
    iterator = progress(unit_ids) if progress else unit_ids
    try:
        for unit_id in iterator:
            if why := unit_id_problem(unit_id):  # the row names it escaped: the quarantine table stays printable
                row(unit_id.encode("unicode_escape").decode("ascii"), why, None)
                continue
            if died := guard.refused(unit_id):
                row(unit_id, died, None)
                continue
            guard.holding(unit_id)
            try:
                ir = adapter.read_unit(root, unit_id)
            except UnitAbsent as exc:
                row(unit_id, exc.reason, exc.file, absent, stage=False)
                continue
            except UnitError as exc:
                row(unit_id, exc.reason, exc.file, units=exc.units)
                continue
            except Exception as exc:  # noqa: BLE001 - an adapter bug or an unforeseen file problem: quarantine, go on
                row(unit_id, f"unexpected {type(exc).__name__}: {exc}", None)
                continue
            try:
                problem = validate_unit(ir, limits)
                problem = f"IR schema: {problem}" if problem else text_field_problem(ir)
            except Exception as exc:  # noqa: BLE001 - a value the checks themselves choke on is still this unit's
                problem = f"IR schema: unexpected {type(exc).__name__}: {exc}"
            if problem:
                row(unit_id, problem, None)
                continue
            ir.unit["content_hash"] = content_hash(ir)
            kept.append(ir.unit)
            parts["units"].append(pa.Table.from_pylist([ir.unit], schema=UNITS_SCHEMA))
            parts["frames"].append(ir.frames)
            parts["signals"].append(ir.signals)
            parts["segments"].append(ir.segments)
            notes += [{"source": slug, "unit_id": unit_id, "note": redact_paths(str(n), roots)} for n in ir.notes]
    except BaseException:  # an interrupt, not a death: nothing is held
        guard.close(completed=False)
        raise
    guard.close(completed=True)  # never reached when the process is killed: the unit it held is named next time
    if shard is None:
        notes += _duplicate_notes(slug, kept)
    if absent:
        log.info("%s: %d units absent (media not downloaded), skipped", slug, len(absent))
    for q in quarantine:
        if q["unit_id"] == "*" and not kept:  # a source with no unit: said once, by whoever stops its chain
            continue
        log.warning("quarantined %s/%s at %s: %s", q["source"], q["unit_id"], q["stage"], q["reason"])
    return IngestResult(
        units=_frame(parts["units"], UNITS_SCHEMA),
        frames=_frame(parts["frames"], FRAMES_SCHEMA),
        signals=_frame(parts["signals"], SIGNALS_SCHEMA),
        segments=_frame(parts["segments"], SEGMENTS_SCHEMA),
        quarantine=quarantine_frame(quarantine),
        notes=pl.DataFrame(notes, schema={"source": pl.String, "unit_id": pl.String, "note": pl.String}),
        absent=pl.from_arrow(to_table(absent, ABSENT_SCHEMA)),
    )


def merge_shards(slug: str, parts: list[dict[str, pl.DataFrame]]) -> IngestResult:
    """The source's IR from its shards' (read_ir of each `ingest_source(shard=...)` result): every table in unit order
    as one whole ingest writes it (the adapter lists units sorted), whole-source quarantine rows first, and the notes
    on units duplicating another, across shards."""

    def by_unit(name: str, rows: pl.Expr = pl.lit(True)) -> pl.DataFrame:  # noqa: B008 - an immutable expression
        return pl.concat([p[name].filter(rows) for p in parts]).sort("unit_id", maintain_order=True)

    units = by_unit("units")
    notes = by_unit("notes")
    duplicates = _duplicate_notes(slug, units.select("unit_id", "content_hash").to_dicts())
    return IngestResult(
        units=units,
        frames=by_unit("frames"),
        signals=by_unit("signals"),
        segments=by_unit("segments"),
        quarantine=pl.concat(
            [by_unit("quarantine", pl.col("unit_id") == "*"), by_unit("quarantine", pl.col("unit_id") != "*")]
        ),
        notes=pl.concat([notes, pl.DataFrame(duplicates, schema=notes.schema)]),
        absent=by_unit("absent"),
    )


def _relative(file: str | None, roots) -> str | None:
    """A quarantine row's file relative to the source root; an absolute path outside it keeps its name only."""
    if file is None:
        return None
    file = str(file)
    for r in sorted(roots, key=len, reverse=True):
        if r not in ("", ".", "/") and file.startswith(r.rstrip("/") + "/"):
            return file[len(r.rstrip("/")) + 1 :]
    if os.path.isabs(file) or find_path_leaks(file):
        return redact_paths(file, roots)
    return file


def write_ir(result: IngestResult, out_dir: Path) -> None:
    """One parquet per IR table plus quarantine.parquet in `out_dir`."""
    for name, df in result.tables().items():
        write_parquet(Path(out_dir) / f"{name}.parquet", df)


def read_ir(ir_dir: Path) -> dict[str, pl.DataFrame]:
    out = {name: pl.read_parquet(Path(ir_dir) / f"{name}.parquet") for name in (*IR_TABLES, "quarantine", "notes")}
    absent = Path(ir_dir) / "absent.parquet"
    out["absent"] = pl.read_parquet(absent) if absent.exists() else pl.from_arrow(ABSENT_SCHEMA.empty_table())
    return out


def summary_text(slug: str, result: IngestResult) -> str:
    """The one-screen summary `processbench ingest` prints."""
    u, q = result.units, result.quarantine
    lines = [
        f"source {slug}: {u.height} units read, {units_lost(q.filter(pl.col('unit_id') != '*'))} quarantined, "
        f"{result.absent.height} absent (not downloaded)"
    ]
    if q.height:
        lines.append("quarantined by reason:")
        per = q.group_by("reason").agg(_ROW_UNITS.sum().alias("len"))
        for row in per.sort(["len", "reason"], descending=[True, False]).iter_rows(named=True):
            lines.append(f"  {row['len']:5d}  {row['reason']}")
    if u.height:
        cams = sorted({c for cs in u["cameras"].to_list() for c in cs})
        lines.append(f"frames: {result.frames.height} rows, primary-camera frames: {int(u['num_frames'].sum())}")
        lines.append(f"cameras: {', '.join(cams)} (primary: {', '.join(sorted(set(u['camera'].to_list())))})")
        lines.append(f"signals: {result.signals.height} rows; segments: {result.segments.height} rows")
        lines.append(f"tasks: {u['task_id'].n_unique()}; licences: {', '.join(sorted(set(u['licence'].to_list())))}")
    if result.absent.height:
        lines.append("absent by reason (skipped, not counted as quarantined):")
        for row in (
            result.absent.group_by("reason")
            .len()
            .sort(["len", "reason"], descending=[True, False])
            .iter_rows(named=True)
        ):
            lines.append(f"  {row['len']:5d}  {row['reason']}")
    if result.notes.height:
        lines.append(f"notes on kept units: {result.notes.height} (see notes.parquet)")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------- the ingest command
def parse_options(pairs: list[str] | None) -> dict:
    """["camera=cam_low", "tasks=[task_004]"] -> {"camera": "cam_low", "tasks": ["task_004"]} (values read as YAML)."""
    import yaml

    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--option {pair!r}: expected KEY=VALUE")
        out[key.strip()] = yaml.safe_load(value) if value.strip() else None
    return out


def command(args) -> int:
    """`processbench ingest`: 0 when the source was read, 1 when it is unusable, 2 for bad arguments."""
    import sys

    from pipeline.settings.config import load_settings

    cfg = load_settings()
    if args.source not in cfg.sources:
        print(f"unknown source {args.source!r}; known: {sorted(cfg.sources)}", file=sys.stderr)
        return 2
    try:
        options = {**cfg.sources[args.source].adapter.options(), **parse_options(getattr(args, "option", None))}
        get_adapter(args.source, **options)
    except (TypeError, ValueError) as exc:  # an unknown option or a bad value: say which
        print(f"{args.source}: bad adapter option: {exc}", file=sys.stderr)
        return 2
    progress = getattr(args, "progress", None)
    result = ingest_source(
        args.source, Path(args.root), options, progress=progress, limits=cfg.build.ir_limits.model_dump()
    )
    write_ir(result, Path(args.out))
    print(summary_text(args.source, result))
    print(f"tables written to {args.out}: units, frames, signals, segments, quarantine, notes, absent (.parquet)")
    unusable = result.quarantine.filter(pl.col("unit_id") == "*")
    if result.units.height == 0:
        from pipeline.source_help import unusable_message

        reasons = "; ".join(unusable["reason"].to_list()) or "no unit could be read"
        print(unusable_message(args.source, Path(args.root), reasons, options), file=sys.stderr)
        return 1
    return 0
