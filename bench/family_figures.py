"""Per (source, family, eval level) of one build: quota fill, top answer label share, and the blind baselines (text
only, option set only) against the reference the validity audit judges them by (pipeline/validity `_reference`).
A table to set a build beside another, e.g. the default frame rules against `--variant T7=public` (docs/running.md).

    python bench/family_figures.py WORK_DIR RELEASE_DIR [--families T5,T7,T8,T9] [--scale release]

Reads the items step's tables (<work>/items/<slug>.parquet, the quota shortfall) and the release's
metadata/validity_report.json (run `processbench validity --release R --work-dir W` first for the image audit).
Quota fill = items / the template's quota at the scale; top label = the most frequent answer text over all the
family's items; cells with fewer than validity.min_eval_items eval items are marked (reported, never checked).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.settings.config import load_settings
from pipeline.families.common import scale_quota
from pipeline.validity import _reference


def rows(work: Path, release: Path, families: set[str] | None, scale: str) -> list[dict]:
    cfg = load_settings(scale=scale)
    vcfg = cfg.validity
    factor = float(cfg.build.quota_scale[cfg.build.scale])
    report = json.loads((release / "metadata" / "validity_report.json").read_text(encoding="utf-8"))
    cells = {(c["source"], c["family"], c.get("level")): c for c in report["cells"]}
    out = []
    for path in sorted((work / "items").glob("*.parquet")):
        slug = path.stem
        if slug not in cfg.sources:
            continue  # the quarantine / frames tables beside it
        items = pl.read_parquet(path, columns=["task_id", "answer_text"])
        for tid in cfg.task_ids:
            t = cfg.tasks[tid]
            if slug not in t.quota or (families and tid not in families):
                continue
            quota = scale_quota(int(t.quota[slug]), factor)
            sub = items.filter(pl.col("task_id") == tid)
            top = int(sub.group_by("answer_text").len()["len"].max()) / sub.height if sub.height else None
            for (src, fam, level), c in sorted(cells.items(), key=lambda kv: str(kv[0])):
                if src != slug or fam != tid or c["blind"] is None:
                    continue
                _, ref, ref_name = _reference(c, float(vcfg.balance_tolerance), vcfg.prior_reference_levels)
                out.append(
                    {
                        "source": slug,
                        "family": tid,
                        "level": level,
                        "quota": quota,
                        "items": sub.height,
                        "fill": sub.height / quota,
                        "top_label": top,
                        "eval_n": c["eval_n"],
                        "checked": c["eval_n"] >= int(vcfg.min_eval_items),
                        "eval_top": c["eval_label_share"],
                        "random": c["random"],
                        "blind": c["blind"],
                        "option_only": c["option_only"],
                        "reference": ref,
                        "reference_name": ref_name,
                    }
                )
    return out


def markdown(rs: list[dict]) -> str:
    head = (
        "| source | family | level | items / quota | fill | top label | eval n | eval top | blind | "
        "option only | reference | blind - ref | option - ref |"
    )
    lines = [head, "|---" * (head.count("|") - 1) + "|"]
    for r in rs:
        top = "–" if r["top_label"] is None else f"{r['top_label']:.3f}"
        lines.append(
            f"| {r['source']} | {r['family']} | {r['level']} | {r['items']} / {r['quota']} "
            f"| {r['fill']:.3f} | {top} | {r['eval_n']}{'' if r['checked'] else ' (not checked)'} | "
            f"{r['eval_top']:.3f} | {r['blind']:.3f} | {r['option_only']:.3f} | {r['reference']:.3f} "
            f"({r['reference_name']}) | {r['blind'] - r['reference']:+.3f} | "
            f"{r['option_only'] - r['reference']:+.3f} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("work", type=Path)
    ap.add_argument("release", type=Path)
    ap.add_argument("--families", help="comma-separated task ids (default: every family)")
    ap.add_argument("--scale", default="release", choices=["demo", "release"])
    ap.add_argument("--json", type=Path, help="also write the rows here")
    a = ap.parse_args()
    rs = rows(a.work, a.release, set(a.families.split(",")) if a.families else None, a.scale)
    print(markdown(rs))
    if a.json:
        a.json.write_text(json.dumps(rs, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
