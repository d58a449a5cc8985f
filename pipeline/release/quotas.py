"""What the release holds against its quotas: for every (source, family) and for the step track per source, the items
delivered and the quota, and for each shortfall why, in a sentence made from what the build measured.

    cells = quota_cells(cfg, counts(eval_df, sft_df, step_rows), stages.shortfall(cfg), step_summary)
    provenance_json(cfg, corpora, warnings, quotas=cells)   # the record: metadata/provenance.json `quotas`
    # (quota_cells and provenance_json: pipeline/publish/provenance.py, which reads the stages' records)
    recorded_quotas(release_dir, cfg)                       # read back by the card, the manifests, the CSV, the validator

A cell is {"source", "task_id", "delivered", "quota"}, plus {"short", "reason"} when delivered < quota. The reasons
come from the frames stage's shortfall records (items/<slug>_shortfall.json: the pool, its labels, what the visual
gate and the spacing rule left out, and what the family generator's own rules left out of the pool, `left_out`;
pipeline/items/shortfall.py) and the step stage's summary (steps/summary.json; pipeline/steps/stage.py
`step_reason`), never from a text written per cell. provenance.json holds the one record;
the eval and SFT manifests repeat it, task_distribution.csv sums it per family (`delivered`, `quota`,
`shortfall_reason`) and the card gives a line per cell. The validator holds the record to the rows (a cell's
`delivered` is the items the release files hold) and every copy to the record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import json
from pathlib import Path

import polars as pl

from pipeline.release.files import file_names, source_names, task_number

if TYPE_CHECKING:
    from pipeline.settings.root import Settings

FIELDS = ("source", "task_id", "delivered", "quota")
SHORT_FIELDS = ("short", "reason")
CSV_COLUMNS = ("delivered", "quota", "shortfall_reason")


def counts(*frames: pl.DataFrame | None) -> dict[tuple[str, str], int]:
    """(source_slug, task_id) -> rows, over release tables (eval of every level, SFT, the step files)."""
    out: dict[tuple[str, str], int] = {}
    for df in frames:
        if df is None or not df.height:
            continue
        for slug, task, n in df.group_by("source_slug", "task_id").len().iter_rows():
            out[(slug, task)] = out.get((slug, task), 0) + int(n)
    return out


def new_cell(slug: str, task: str, delivered: int, quota: int, reason: str) -> dict:
    cell = {"source": slug, "task_id": task, "delivered": int(delivered), "quota": int(quota)}
    if delivered < quota:
        cell |= {"short": quota - delivered, "reason": " ".join(str(reason).split())}  # one line
    return cell


def recorded_quotas(release_dir: Path, cfg: Settings) -> list[dict]:
    """The cells the release's provenance.json records ([] when it records none or is unreadable)."""
    try:
        doc = json.loads((Path(release_dir) / file_names(cfg)["provenance"]).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    found = doc.get("quotas") if isinstance(doc, dict) else None
    return [c for c in found if isinstance(c, dict)] if isinstance(found, list) else []


# ------------------------------------------------------------------------------------------------ the words
def _task_names(cfg: Settings) -> dict[str, str]:
    return cfg.task_names() | {t: tpl.task_name for t, tpl in cfg.step_tasks.items()}


def cell_line(cell: dict, cfg: Settings) -> str:
    """`AIST-Bimanual T3 Motion Direction Prediction: 60 of 61 items (1 short): <why>`."""
    src = source_names(cfg).get(cell["source"], cell["source"])
    name = _task_names(cfg).get(cell["task_id"], "")
    text = f"{src} {cell['task_id']} {name}: {cell['delivered']:,} of {cell['quota']:,} items"
    return text + (f" ({cell['short']:,} short): {cell['reason']}" if cell.get("short") else "")


def card_section(cells: list[dict], cfg: Settings) -> str:
    """The card's section: one table row per cell, the short ones with by how much and why."""
    if not cells:
        return ""
    snames, tnames = source_names(cfg), _task_names(cfg)
    short = [c for c in cells if c.get("short")]
    lines = [
        "## Quotas: what each source delivers",
        "",
        "Items per source and family (both splits, every eval level) against the quota the build asked for; a "
        "shortfall is never padded. The same figures are in `metadata/provenance.json` (`quotas`), the eval and SFT "
        "manifests and `metadata/task_distribution.csv`. "
        + (f"{len(short)} of {len(cells)} cells fall short." if short else f"All {len(cells)} cells are full."),
        "",
        "| source | family | delivered | quota | shortfall and why |",
        "|---|---|---|---|---|",
    ]
    for c in cells:
        why = f"{c['short']:,} short: {c['reason']}" if c.get("short") else ""
        fam = f"{c['task_id']} {tnames.get(c['task_id'], '')}".strip()
        lines.append(
            f"| {snames.get(c['source'], c['source'])} | {fam} | {c['delivered']:,} | {c['quota']:,} | "
            + why.replace("|", "\\|")
            + " |"
        )
    return "\n".join(lines) + "\n"


def csv_values(cells: list[dict], task: str, cfg: Settings) -> list[str]:
    """task_distribution.csv's `delivered`, `quota`, `shortfall_reason` of one family: summed over its sources, the
    reason naming each short source with its counts ('' each without a record)."""
    mine = [c for c in cells if c["task_id"] == task]
    if not mine:
        return ["", "", ""]
    snames = source_names(cfg)
    why = " | ".join(
        f"{snames.get(c['source'], c['source'])}: {c['delivered']:,} of {c['quota']:,} ({c['short']:,} short): "
        f"{c['reason']}"
        for c in mine
        if c.get("short")
    )
    return [str(sum(c["delivered"] for c in mine)), str(sum(c["quota"] for c in mine)), why]


def csv_tasks(cells: list[dict]) -> list[str]:
    return sorted({c["task_id"] for c in cells}, key=task_number)


# ------------------------------------------------------------------------------------------------ the check
def quota_problems(cells, delivered: dict[tuple[str, str], int], where: str) -> list[str]:
    """The recorded cells against the release's rows (`delivered`: counts() of every release table): each cell's
    `delivered` is what the rows hold, its shortfall is quota - delivered with a one-line reason, and every
    (source, family) the rows hold has one cell."""
    out: list[str] = []
    if not isinstance(cells, list):
        return [f"{where}: quotas is not a list of cells"]
    seen: set[tuple[str, str]] = set()
    for i, c in enumerate(cells):
        at = f"{where}: quotas[{i}]"
        if not isinstance(c, dict) or set(c) - set(FIELDS) - set(SHORT_FIELDS) or not set(FIELDS) <= set(c):
            out.append(f"{at} does not have the fields {', '.join(FIELDS)} (and short, reason when short)")
            continue
        key = (c["source"], c["task_id"])
        if not all(isinstance(c[k], int) and not isinstance(c[k], bool) and c[k] >= 0 for k in ("delivered", "quota")):
            out.append(f"{at}: delivered and quota are not counts")
            continue
        if key in seen:
            out.append(f"{at}: {key[0]} {key[1]} is listed twice")
        seen.add(key)
        have = delivered.get(key, 0)
        if c["delivered"] != have:
            out.append(f"{at}: {key[0]} {key[1]} delivered {c['delivered']}, the release files hold {have}")
        if c["delivered"] > c["quota"]:
            out.append(f"{at}: {key[0]} {key[1]} delivers {c['delivered']}, more than its quota {c['quota']}")
        if c["delivered"] < c["quota"]:
            reason = c.get("reason")
            if c.get("short") != c["quota"] - c["delivered"]:
                out.append(f"{at}: short {c.get('short')!r}, quota - delivered is {c['quota'] - c['delivered']}")
            if not (isinstance(reason, str) and reason.strip() and reason.isprintable()):
                out.append(f"{at}: {key[0]} {key[1]} falls short without a one-line reason")
        elif "short" in c or "reason" in c:
            out.append(f"{at}: {key[0]} {key[1]} is full but carries a shortfall")
    for key in sorted(set(delivered) - seen):
        out.append(f"{where}: quotas has no cell for {key[0]} {key[1]}, which the release files hold")
    return out
