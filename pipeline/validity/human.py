"""The human check's verdicts (pipeline/review.py pages) merged into the validity report.

    verdicts = load_verdicts([Path("verdicts_gm100_T5_ann1.json"), ...])   # ValueError naming the file and reason
    human = human_report(verdicts, key, vcfg.human)    # key: item_id -> (source, family, answer, num_choices)

Per (source, family): judgments, items, annotators, human accuracy against the key ("cannot tell" counts as not
correct, and its share is reported), chance (1 / num_choices), a Wilson interval over the judgments, and whether
humans clear chance (`decidable`: the interval's lower bound above chance, given at least `min_judgments`); a cell
below that is listed in `not_decidable`. Agreement between annotators: over the items two annotators both judged,
the share of equal verdicts ("cannot tell" is a verdict) and Cohen's kappa, averaged over the pairs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import json
import math
from collections import defaultdict
from itertools import combinations
from pathlib import Path

from ..review import VERDICTS_FORMAT, VERDICTS_VERSION
from pipeline.release.schema import CHOICE_LETTERS

if TYPE_CHECKING:
    from pipeline.settings.models import ValidityHuman
    from pipeline.settings.root import Settings


def load_verdicts(files: list[Path]) -> list[dict]:
    """Rows {annotator, source, family, item_id, answer (letter | None), cannot_tell} from verdict files. The same
    annotator's later file wins for an item they judged twice."""
    rows: dict[tuple[str, str], dict] = {}
    for f in files:
        f = Path(f)
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"{f}: not a readable JSON verdicts file ({exc})") from None
        if not isinstance(data, dict) or data.get("format") != VERDICTS_FORMAT:
            raise ValueError(
                f"{f}: not a {VERDICTS_FORMAT} file (format {data.get('format')!r})"
                if isinstance(data, dict)
                else f"{f}: not a {VERDICTS_FORMAT} file"
            )
        if data.get("version") != VERDICTS_VERSION:
            raise ValueError(f"{f}: verdicts version {data.get('version')!r}, expected {VERDICTS_VERSION}")
        who = str(data.get("annotator") or "anonymous")
        for i, v in enumerate(data.get("verdicts") or []):
            ans, ct = v.get("answer"), bool(v.get("cannot_tell"))
            if not v.get("item_id") or (ans is None) != ct or (ans is not None and ans not in CHOICE_LETTERS):
                raise ValueError(
                    f"{f}: verdict {i} is not {{item_id, answer: letter, cannot_tell: false}} or "
                    f"{{item_id, answer: null, cannot_tell: true}}: {v!r}"
                )
            rows[(who, v["item_id"])] = {
                "annotator": who,
                "source": data.get("source"),
                "family": data.get("family"),
                "item_id": v["item_id"],
                "answer": ans,
                "cannot_tell": ct,
            }
    return [rows[k] for k in sorted(rows)]


def wilson(k: int, n: int, z: float) -> tuple[float, float]:
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, c - h), min(1.0, c + h))


def _kappa(a: list[str], b: list[str]) -> float | None:
    n = len(a)
    po = sum(x == y for x, y in zip(a, b)) / n
    cats = set(a) | set(b)
    pe = sum((a.count(c) / n) * (b.count(c) / n) for c in cats)
    return None if pe >= 1 else (po - pe) / (1 - pe)


def _agreement(judged: dict[str, dict[str, str]]) -> dict:
    """judged: annotator -> item -> verdict. Mean pairwise agreement and Cohen's kappa over shared items."""
    pairs = []
    for x, y in combinations(sorted(judged), 2):
        shared = sorted(set(judged[x]) & set(judged[y]))
        if shared:
            a, b = [judged[x][i] for i in shared], [judged[y][i] for i in shared]
            pairs.append((len(shared), sum(p == q for p, q in zip(a, b)) / len(shared), _kappa(a, b)))
    if not pairs:
        return {"pairs": 0, "shared_items": 0, "agreement": None, "kappa": None}
    kap = [p[2] for p in pairs if p[2] is not None]
    return {
        "pairs": len(pairs),
        "shared_items": sum(p[0] for p in pairs),
        "agreement": round(sum(p[1] for p in pairs) / len(pairs), 4),
        "kappa": round(sum(kap) / len(kap), 4) if kap else None,
    }


def human_report(verdicts: list[dict], key: dict[str, tuple], hcfg: ValidityHuman) -> dict:
    """The report's `human` section. key: item_id -> (source, family, answer letter, num_choices)."""
    z = _z(float(hcfg.ci))
    min_n = int(hcfg.min_judgments)
    unknown = sorted({v["item_id"] for v in verdicts if v["item_id"] not in key})
    cells: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for v in verdicts:
        if v["item_id"] in key:
            src, fam, _, _ = key[v["item_id"]]
            cells[(src, fam)].append(v)
    out = []
    for src, fam in sorted(cells, key=lambda c: (c[0], int(c[1][1:]) if c[1][1:].isdigit() else 999)):
        vs = cells[(src, fam)]
        correct = sum(v["answer"] == key[v["item_id"]][2] for v in vs)
        chance = sum(1 / int(key[v["item_id"]][3]) for v in vs) / len(vs)
        lo, hi = wilson(correct, len(vs), z)
        judged: dict[str, dict[str, str]] = defaultdict(dict)
        for v in vs:
            judged[v["annotator"]][v["item_id"]] = "?" if v["cannot_tell"] else v["answer"]
        out.append(
            {
                "source": src,
                "family": fam,
                "judgments": len(vs),
                "items": len({v["item_id"] for v in vs}),
                "annotators": sorted(judged),
                "accuracy": round(correct / len(vs), 4),
                "cannot_tell": round(sum(v["cannot_tell"] for v in vs) / len(vs), 4),
                "chance": round(chance, 4),
                "ci": [round(lo, 4), round(hi, 4)],
                "decidable": bool(len(vs) >= min_n and lo > chance),
                "agreement": _agreement(judged),
            }
        )
    return {
        "ci": float(hcfg.ci),
        "min_judgments": min_n,
        "annotators": sorted({v["annotator"] for v in verdicts}),
        "unknown_items": unknown,
        "cells": out,
        "not_decidable": [f"{c['source']}/{c['family']}" for c in out if not c["decidable"]],
    }


def _z(ci: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + ci / 2)


def answer_key(release: Path, cfg: Settings) -> dict[str, tuple]:
    """item_id -> (source, family, answer letter, num_choices) over every eval file of the release."""
    import polars as pl

    from pipeline.release.files import file_names, level_file_names

    paths = [release / file_names(cfg)["eval_parquet"]] + [
        release / level_file_names(cfg, lv)["parquet"] for lv in ("L2", "L3")
    ]
    key = {}
    for p in paths:
        if p.exists():
            for r in pl.read_parquet(
                p, columns=["item_id", "source_slug", "task_id", "answer", "num_choices"]
            ).iter_rows():
                key[r[0]] = (r[1], r[2], r[3], int(r[4]))
    return key


def human_markdown(human: dict) -> list[str]:
    """The report's human-check section (markdown lines)."""

    def f(x):
        return "–" if x is None else (f"{x:.3f}" if isinstance(x, float) else str(x))

    lines = [
        "",
        "## Human check",
        "",
        f"Verdicts of {len(human['annotators'])} annotator(s) ({', '.join(human['annotators'])}) on the review "
        f'pages, against the key; "cannot tell" counts as not correct. {int(human["ci"] * 100)} % Wilson '
        f"interval over judgments; decidable = lower bound above chance with at least {human['min_judgments']} "
        "judgments. Agreement: mean over annotator pairs of the share of equal verdicts on shared items, and "
        "Cohen's kappa.",
        "",
        "| source | family | judgments | human acc. | interval | chance | cannot tell | agreement | kappa "
        "| decidable |",
        "|---|---|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    for c in human["cells"]:
        a = c["agreement"]
        lines.append(
            f"| {c['source']} | {c['family']} | {c['judgments']} | {f(c['accuracy'])} "
            f"| [{f(c['ci'][0])}, {f(c['ci'][1])}] | {f(c['chance'])} | {f(c['cannot_tell'])} "
            f"| {f(a['agreement'])} | {f(a['kappa'])} | {'yes' if c['decidable'] else '**no**'} |"
        )
    lines += ["", "Not decidable by humans: " + (", ".join(human["not_decidable"]) or "none")]
    if human["unknown_items"]:
        lines.append(
            f"Verdicts on {len(human['unknown_items'])} item(s) not in this release's eval files were ignored."
        )
    return lines
