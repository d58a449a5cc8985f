"""`processbench diff OLD NEW`: what changed between two releases, by item identity (pipeline/release/identity.py).

    doc = diff_releases(old_dir, new_dir)     # JSON-able; doc["identical"]
    text = diff_markdown(doc)

Items are matched by `item_uid`, never by item_id (a position). Each item lies in one place: an eval level (L1, L2,
L3; `eval` for a release without levels) or `sft`. Per cell (track, source, family, place):
    kept       in this place in both releases
    added      in this place in NEW, in no place in OLD
    removed    in this place in OLD, in no place in NEW
    moved_in   in this place in NEW, in another place in OLD (e.g. an SFT item that became an eval item)
    moved_out  in this place in OLD, in another place in NEW
An eval cell's scores stay comparable between the two releases exactly when it holds the same items in both (nothing
added, removed or moved): a model answers the same items there, whatever else changed. The provenances are compared
too: which config sections (provenance.json `config_sections`), code versions (`code`), corpora (`sources`) and other
recorded settings differ. The releases are identical when their fingerprints and provenances are equal.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from pipeline.core import io
from pipeline.release.files import task_number
from pipeline.release.identity import FINGERPRINT_KEY, ReleaseIdentity, ReleaseIdentityError, read_identity

if TYPE_CHECKING:
    from pipeline.settings.root import Settings

CELL_KEYS = ("track", "source", "family", "place")
COUNTS = ("old", "new", "kept", "added", "removed", "moved_in", "moved_out")
# provenance keys compared on their own (the rest: one line per differing key); `quotas` (what each cell delivers)
# is what the rows hold, compared item by item
_OWN = {FINGERPRINT_KEY, "config_sections", "config_sha256", "code", "sources", "quotas"}


def _placed(ident: ReleaseIdentity) -> pl.DataFrame:
    df = ident.items
    place = (
        pl.when(pl.col("split") == "sft").then(pl.lit("sft")).otherwise(pl.col("eval_level").fill_null(pl.lit("eval")))
    )
    return df.select(
        "item_uid",
        "track",
        pl.col("source_slug").alias("source"),
        pl.col("task_id").alias("family"),
        place.alias("place"),
    )


def _place_order(place: str) -> tuple:
    return (1, "") if place == "sft" else (0, place)


def cell_table(old: pl.DataFrame, new: pl.DataFrame) -> pl.DataFrame:
    """One row per cell either release holds, with COUNTS and `same_items` (the tables of `_placed`)."""
    j = old.join(new, on="item_uid", how="full", suffix="_new", coalesce=False)
    o_place = pl.struct([pl.col(c) for c in CELL_KEYS])
    n_place = pl.struct([pl.col(f"{c}_new").alias(c) for c in CELL_KEYS])
    in_old, in_new = pl.col("item_uid").is_not_null(), pl.col("item_uid_new").is_not_null()
    same = in_old & in_new & (o_place == n_place)
    rows_old = j.filter(in_old).select(
        *CELL_KEYS,
        old=pl.lit(1),
        kept=same.cast(pl.Int64),
        removed=(~in_new).cast(pl.Int64),
        moved_out=(in_new & ~same).cast(pl.Int64),
    )
    rows_new = j.filter(in_new).select(
        *(pl.col(f"{c}_new").alias(c) for c in CELL_KEYS),
        new=pl.lit(1),
        added=(~in_old).cast(pl.Int64),
        moved_in=(in_old & ~same).cast(pl.Int64),
    )
    both = pl.concat([rows_old, rows_new], how="diagonal")
    out = both.group_by(CELL_KEYS).agg(pl.col(c).fill_null(0).sum().cast(pl.Int64) for c in COUNTS)
    out = out.with_columns(
        same_items=(pl.col("added") + pl.col("removed") + pl.col("moved_in") + pl.col("moved_out")) == 0
    )
    keys = [
        (r["track"], r["source"], task_number(r["family"]), _place_order(r["place"])) for r in out.iter_rows(named=True)
    ]
    order = sorted(range(out.height), key=lambda i: keys[i])
    return out[order].select(*CELL_KEYS, *COUNTS, "same_items")


def moves(old: pl.DataFrame, new: pl.DataFrame) -> list[dict]:
    """Items in both releases in another place: per (track, source, family, from, to), how many."""
    j = old.join(new, on="item_uid", how="inner", suffix="_new").filter(pl.col("place") != pl.col("place_new"))
    g = j.group_by("track", "source", "family", "place", "place_new").len()
    rows = [
        {
            "track": r["track"],
            "source": r["source"],
            "family": r["family"],
            "from": r["place"],
            "to": r["place_new"],
            "items": r["len"],
        }
        for r in g.iter_rows(named=True)
    ]
    return sorted(rows, key=lambda r: (r["track"], r["source"], task_number(r["family"]), r["from"], r["to"]))


def _changed(a: dict, b: dict) -> dict:
    """{key: {"old": a[key], "new": b[key]}} of every key whose value differs (missing: null)."""
    return {k: {"old": a.get(k), "new": b.get(k)} for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def provenance_changes(a: dict, b: dict) -> dict:
    """What the two provenance.json record differently: config sections, code versions, corpora, other settings."""
    sources = {}
    for slug in sorted(set(a.get("sources") or {}) | set(b.get("sources") or {})):
        sa, sb = (a.get("sources") or {}).get(slug), (b.get("sources") or {}).get(slug)
        if sa != sb:
            sources[slug] = (
                {"old": sa, "new": sb} if sa is None or sb is None else _changed(sa, sb)
            )  # a source built in one release only, or what differs of it
    return {
        "configs": _changed(a.get("config_sections") or {}, b.get("config_sections") or {}),
        "code": _changed(a.get("code") or {}, b.get("code") or {}),
        "corpora": sources,
        "other": _changed({k: v for k, v in a.items() if k not in _OWN}, {k: v for k, v in b.items() if k not in _OWN}),
    }


def diff_releases(old_dir: Path, new_dir: Path, cfg: Settings | None = None) -> dict:
    """The diff of two release folders (module docstring). ReleaseIdentityError when one cannot be read."""
    old, new = read_identity(Path(old_dir), cfg), read_identity(Path(new_dir), cfg)
    po, pn = _placed(old), _placed(new)
    cells = cell_table(po, pn)
    prov = provenance_changes(old.provenance, new.provenance)
    totals = {c: int(cells[c].sum()) for c in COUNTS}
    totals["moved"] = totals.pop("moved_in")
    totals.pop("moved_out")
    eval_cells = cells.filter(pl.col("place") != "sft")
    identical = old.fingerprint == new.fingerprint and not any(prov.values())
    return {
        "identical": identical,
        "old": {"release": str(old.root), "fingerprint": old.fingerprint},
        "new": {"release": str(new.root), "fingerprint": new.fingerprint},
        "items": totals,
        "eval_cells": {
            "total": eval_cells.height,
            "comparable": int(eval_cells["same_items"].sum()),
            "not_comparable": int((~eval_cells["same_items"]).sum()),
        },
        "cells": cells.rename({"same_items": "comparable"}).to_dicts(),
        "moves": moves(po, pn),
        "provenance": prov,
    }


def _short(v) -> str:
    text = json.dumps(v, sort_keys=True, ensure_ascii=False) if not isinstance(v, str) else v
    return text[:12] + "…" if isinstance(v, str) and len(v) == 64 else text[:80]


def diff_markdown(doc: dict) -> str:
    t, ec = doc["items"], doc["eval_cells"]
    lines = [
        "# Release diff",
        "",
        f"- old: `{doc['old']['release']}`, fingerprint `{doc['old']['fingerprint']}`",
        f"- new: `{doc['new']['release']}`, fingerprint `{doc['new']['fingerprint']}`",
        "",
    ]
    if doc["identical"]:
        return "\n".join(lines + ["Identical: the same fingerprint and provenance.", ""])
    lines += [
        f"Items (by item_uid): {t['old']} old, {t['new']} new: {t['kept']} kept, {t['added']} added, "
        f"{t['removed']} removed, {t['moved']} moved (between eval and SFT or between eval levels).",
        "",
        f"Eval cells (track, source, family, level): {ec['comparable']} of {ec['total']} hold the same items in both "
        f"releases: their scores stay comparable; {ec['not_comparable']} do not.",
        "",
        "## Cells",
        "",
        "| track | source | family | place | old | new | kept | added | removed | moved in | moved out | scores |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for c in doc["cells"]:
        if c["comparable"] and c["place"] == "sft":
            continue  # unchanged SFT cells: counted above, not listed
        verdict = ("comparable" if c["comparable"] else "**not comparable**") if c["place"] != "sft" else "(training)"
        lines.append(
            f"| {c['track']} | {c['source']} | {c['family']} | {c['place']} | "
            + " | ".join(str(c[k]) for k in COUNTS)
            + f" | {verdict} |"
        )
    if doc["moves"]:
        lines += ["", "## Moves", "", "| track | source | family | from | to | items |", "|---|---|---|---|---|---:|"]
        lines += [
            f"| {m['track']} | {m['source']} | {m['family']} | {m['from']} | {m['to']} | {m['items']} |"
            for m in doc["moves"]
        ]
    prov = doc["provenance"]
    lines += ["", "## Provenance", ""]
    if not any(prov.values()):
        lines.append("The provenances record the same configs, code versions and corpora.")
    for part, title in (("configs", "config sections"), ("code", "code"), ("other", "settings")):
        if prov[part]:
            lines.append(
                f"- {title} that differ: "
                + "; ".join(f"`{k}` {_short(v['old'])} → {_short(v['new'])}" for k, v in prov[part].items())
            )
    for slug, ch in prov["corpora"].items():
        what = (
            "built in one release only"
            if set(ch) == {"old", "new"} and (ch["old"] is None or ch["new"] is None)
            else "; ".join(f"`{k}` {_short(v['old'])} → {_short(v['new'])}" for k, v in ch.items())
        )
        lines.append(f"- corpus `{slug}`: {what}")
    return "\n".join(lines + [""])


def command(args) -> int:
    """`processbench diff OLD NEW [--out DIR]`: print the markdown; with --out write diff.md and diff.json there.
    Exit 0 identical, 1 different, 2 when a folder cannot be read (one line)."""
    try:
        doc = diff_releases(Path(args.old), Path(args.new))
    except ReleaseIdentityError as exc:
        print(f"processbench diff: error: {exc}", file=sys.stderr)
        return 2
    text = diff_markdown(doc)
    print(text, end="")
    if args.out:
        out = Path(args.out)
        io.atomic_write_text(out / "diff.md", text)
        io.atomic_write_text(out / "diff.json", io.dumps_json(doc))
        print(f"written: {out / 'diff.md'}, {out / 'diff.json'}")
    return 0 if doc["identical"] else 1
