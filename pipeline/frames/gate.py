"""The visual gate: drop items whose frames cannot be shown, with a reason, before the split.

An item is dropped when any of its frames is
  unreadable      status error in the frame table, or never extracted
  black           mean of all RGB values <= gate.black_max_mean
  flat            std of all RGB values <= gate.flat_max_std (uniform colour: lost signal, test pattern)
and when two of its frames (distinct indices) are
  identical       same pixel_sha256 (frozen video), if gate.identical
  near-identical  grey-thumbnail mean |difference| <= gate.near_identical_max_mad, except for the tasks listed in
                  gate.near_identical_exempt_tasks (whose answer can be "nothing moves")
  too alike       grey-thumbnail mean |difference| < the template's min_pixel_distance for the item's source
                  (configs/tasks/T8, T9: an order question needs a visible change of state between its frames)
Thresholds: configs/frames.yaml `gate`. Dropped items become quarantine rows (upstream_adapters.ir.QUARANTINE_SCHEMA)
with stage "frames", file null, and a reason that starts with the item's candidate_key.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import itertools

import polars as pl

from upstream_adapters.ir import QUARANTINE_SCHEMA

from .pixels import thumb_mad
from .render import frame_indices_of

if TYPE_CHECKING:
    from pipeline.settings.models import FramesGate
    from pipeline.settings.root import Settings

QUARANTINE_PL_SCHEMA = pl.from_arrow(QUARANTINE_SCHEMA.empty_table()).schema


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def min_pixel_distances(cfg: Settings) -> dict[tuple[str, str], float]:
    """(task_id, source) -> the template's min_pixel_distance, for every family and source that sets one."""
    out = {}
    for tid, t in cfg.tasks.items():
        for src in t.sources:
            v = t.for_source(src).min_pixel_distance
            if v is not None:
                out[(tid, src)] = float(v)
    return out


def item_problems(item: dict, frames: dict, g: FramesGate, min_dist_of: dict | None = None) -> list[str]:
    """Why `item` fails the gate (empty list = it passes). frames: (source, unit, camera, index) -> frame row;
    min_dist_of: min_pixel_distances(cfg)."""
    vk = (item["source"], item["unit_id"], item["camera"])
    try:
        indices = frame_indices_of(item)
    except ValueError as exc:
        return [str(exc)]
    if not indices:
        return ["no frames"]
    problems: list[str] = []
    rows = {}
    for i in dict.fromkeys(indices):
        r = frames.get((*vk, i))
        if r is None:
            problems.append(f"unreadable frame {i} (not extracted)")
        elif r["status"] != "ok":
            problems.append(f"unreadable frame {i} ({r['reason']})")
        else:
            rows[i] = r
    if problems:
        return problems
    black, flat = g.black_max_mean, g.flat_max_std
    for i, r in rows.items():
        if black is not None and r["mean"] is not None and r["mean"] <= black:
            problems.append(f"black frame {i} (mean {_fmt(r['mean'])} <= {black})")
        elif flat is not None and r["std"] is not None and r["std"] <= flat:
            problems.append(f"flat frame {i} (std {_fmt(r['std'])} <= {flat})")
    mad_max = g.near_identical_max_mad
    if item.get("task_id") in set(g.near_identical_exempt_tasks):
        mad_max = None
    min_dist = (min_dist_of or {}).get((item.get("task_id"), item.get("source")))
    for (i, a), (j, b) in itertools.combinations(rows.items(), 2):
        if g.identical and a["pixel_sha256"] == b["pixel_sha256"]:
            problems.append(f"identical frames {i} and {j} (frozen video)")
        elif (mad_max is not None or min_dist is not None) and a["thumb"] and b["thumb"]:
            mad = thumb_mad(a["thumb"], b["thumb"])
            if mad_max is not None and mad <= mad_max:
                problems.append(f"near-identical frames {i} and {j} (thumbnail MAD {_fmt(mad)} <= {mad_max})")
            elif min_dist is not None and mad < min_dist:
                problems.append(f"frames {i} and {j} too alike to order (thumbnail MAD {_fmt(mad)} < {min_dist})")
    return problems


def gate_items(items: pl.DataFrame, frame_table: pl.DataFrame, cfg: Settings) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Split `items` into (kept, quarantine). `frame_table` is extract_frames' output."""
    g = cfg.frames.gate
    min_dist_of = min_pixel_distances(cfg)
    frames = {
        (r["source"], r["unit_id"], r["camera"], int(r["frame_index"])): r
        for r in frame_table.select(
            "source", "unit_id", "camera", "frame_index", "status", "reason", "pixel_sha256", "mean", "std", "thumb"
        ).iter_rows(named=True)
    }
    keep: list[bool] = []
    quarantine: list[dict] = []
    for item in items.iter_rows(named=True):
        problems = item_problems(item, frames, g, min_dist_of)
        keep.append(not problems)
        if problems:
            key = item.get("candidate_key") or item.get("item_key") or item.get("item_id") or ""
            quarantine.append(
                {
                    "source": item["source"],
                    "unit_id": item["unit_id"],
                    "stage": "frames",
                    "reason": f"{key}: " + "; ".join(problems),
                    "file": None,
                }
            )
    kept = items.filter(pl.Series(keep, dtype=pl.Boolean)) if items.height else items
    q = (
        pl.DataFrame(quarantine, schema=QUARANTINE_PL_SCHEMA)
        if quarantine
        else pl.DataFrame(schema=QUARANTINE_PL_SCHEMA)
    )
    return kept, q
