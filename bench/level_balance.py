"""Label balance of every eval level of a written release: per (source, family, level) cell the share of its most
frequent answer text over random (mean 1/num_choices), and per level the worst cell (a number, not pass/fail).

    python bench/level_balance.py RELEASE_DIR [--min-n 30] [--json OUT.json]

A cell at +0.00 is as balanced as letters are; the split balances L1 by its selection and L2 / L3 by the held-out
values it chooses (pipeline/split/levels.py), as far as the pool allows.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.settings.config import load_settings
from pipeline.release.files import eval_level_files


def cells(release: Path) -> list[dict]:
    cfg = load_settings()
    out = []
    for level, rel in eval_level_files(release, cfg).items():
        df = pl.read_parquet(release / rel, columns=["source_slug", "task_id", "answer_text", "num_choices"])
        for (src, task), sub in sorted(df.group_by(["source_slug", "task_id"]), key=lambda x: x[0]):
            c = Counter(sub["answer_text"].to_list())
            top, n = max(c.values()), sub.height
            rnd = float((1.0 / sub["num_choices"]).mean())
            out.append(
                {
                    "level": level,
                    "source": src,
                    "family": task,
                    "n": n,
                    "top_label": min(c, key=lambda t: (-c[t], t)),
                    "top_share": round(top / n, 4),
                    "random": round(rnd, 4),
                    "over_random": round(top / n - rnd, 4),
                }
            )
    return out


def summary(rows: list[dict], min_n: int) -> dict:
    out = {}
    for level in sorted({r["level"] for r in rows}):
        lv = [r for r in rows if r["level"] == level]
        big = [r for r in lv if r["n"] >= min_n]
        worst = max(lv, key=lambda r: r["over_random"])
        wbig = max(big, key=lambda r: r["over_random"]) if big else None
        out[level] = {
            "cells": len(lv),
            "cells_over_5pts": sum(r["over_random"] > 0.05 for r in lv),
            "worst": worst,
            f"worst_n>={min_n}": wbig,
            "mean_over_random": round(sum(r["over_random"] for r in lv) / len(lv), 4),
        }
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("release", type=Path)
    p.add_argument("--min-n", type=int, default=30)
    p.add_argument("--json", type=Path)
    a = p.parse_args()
    rows = cells(a.release)
    s = summary(rows, a.min_n)
    for r in rows:
        print(
            f"{r['level']:>3} {r['source']:<11} {r['family']:<4} n={r['n']:<5} top {r['top_share']:.3f} "
            f"({r['top_label']}) random {r['random']:.3f} over {r['over_random']:+.3f}"
        )
    for level, v in s.items():
        w, wb = v["worst"], v[f"worst_n>={a.min_n}"]
        print(
            f"{level}: {v['cells']} cells, {v['cells_over_5pts']} over +0.05, mean over random "
            f"{v['mean_over_random']:+.4f}; worst {w['source']} {w['family']} {w['over_random']:+.3f} (n={w['n']})"
            + (
                f"; worst with n>={a.min_n}: {wb['source']} {wb['family']} {wb['over_random']:+.3f} (n={wb['n']})"
                if wb
                else ""
            )
        )
    if a.json:
        a.json.write_text(json.dumps({"cells": rows, "levels": s}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
