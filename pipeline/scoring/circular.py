"""CircularEval (MMBench): every eval item asked once per rotation of its options; an item counts only if every copy
is answered right.

Copy k of an item with n options shows option (j + k) mod n at position j (copy 0 is the item as released), so the
right answer moves through every letter. Copy ids are `<item_id>.c<k>`; VLMEvalKit's circular TSVs index copy k of
the item at index i as i + k x 1,000,000 (its `g_index` = index mod 1e6 is the item), which
`pipeline/exports/consumers.py` writes.

    copies = circular_rows(eval_df)                      # one row per (item, rotation), answers moved
    report = circular_scores(eval_df, predictions)       # {item_id.c<k>: response}

Scores (overall, per level, per family): accuracy = share of items whose copy 0 is right (the plain accuracy);
circular_accuracy = share of items with every copy right (a missing or unparseable copy is wrong); position
consistency = share of items where every copy's answer names the same option text (right or wrong), i.e. the
answer follows the content and not the position. `processbench score --circular` runs `main`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import polars as pl

from pipeline.core import io
from pipeline.release.schema import CHOICE_COLUMNS, CHOICE_LETTERS

COPY_SEP = ".c"
INDEX_STRIDE = 1_000_000  # VLMEvalKit: copy k of item i has index i + k * 1e6


def copy_id(item_id: str, k: int) -> str:
    return f"{item_id}{COPY_SEP}{k}"


def base_id(item_or_copy_id: str) -> str:
    """The item id of a copy id (an item id is returned as it is: item ids hold no COPY_SEP)."""
    return item_or_copy_id.rsplit(COPY_SEP, 1)[0]


def rotate(options: list[str], answer: str, k: int) -> tuple[list[str], str]:
    """Options rotated by k (position j shows option j + k) and the answer letter that follows its option."""
    n = len(options)
    if not 0 <= k < n:
        raise ValueError(f"rotation {k} of {n} options")
    a = CHOICE_LETTERS.index(answer)
    if a >= n:
        raise ValueError(f"answer {answer} beyond {n} options")
    return options[k:] + options[:k], CHOICE_LETTERS[(a - k) % n]


def circular_rows(df: pl.DataFrame) -> pl.DataFrame:
    """Every row of an eval table once per rotation of its options, in item order then k: the table's columns with
    choices and answer rotated, plus `copy_id`, `circular_k` and `item_index` (the item's 0-based position)."""
    out = []
    for i, r in enumerate(df.iter_rows(named=True)):
        n = int(r["num_choices"])
        options = [r[c] for c in CHOICE_COLUMNS[:n]]
        for k in range(n):
            rotated, answer = rotate(options, r["answer"], k)
            row = dict(r)
            row.update({c: (rotated[j] if j < n else None) for j, c in enumerate(CHOICE_COLUMNS)})
            row.update(answer=answer, copy_id=copy_id(r["item_id"], k), circular_k=k, item_index=i)
            out.append(row)
    schema = {**df.schema, "copy_id": pl.String, "circular_k": pl.Int64, "item_index": pl.Int64}
    return pl.DataFrame(out, schema=schema, orient="row")


def _share(flags: list[bool]) -> float | None:
    return round(sum(flags) / len(flags), 4) if flags else None


def circular_scores(eval_df: pl.DataFrame, predictions: dict[str, object], bare_fallback: bool = True) -> dict:
    """Plain accuracy (copy 0), circular accuracy and position consistency, overall, per level and per family."""
    from pipeline.scoring.mcq import parse_answer  # the one answer parser

    copies = circular_rows(eval_df)
    per_item: dict[str, dict] = {}
    for r in copies.iter_rows(named=True):
        n = int(r["num_choices"])
        letter = parse_answer(predictions.get(r["copy_id"]), n, bare_fallback)
        chosen = r[f"choice_{letter}"] if letter else None
        it = per_item.setdefault(
            r["item_id"],
            {"level": r["eval_level"] or "all", "task": r["task_id"], "right": [], "chosen": [], "plain": False},
        )
        it["right"].append(letter == r["answer"])
        it["chosen"].append(chosen)
        if r["circular_k"] == 0:
            it["plain"] = letter == r["answer"]

    def summary(items: list[dict]) -> dict:
        return {
            "n": len(items),
            "accuracy": _share([i["plain"] for i in items]),
            "circular_accuracy": _share([all(i["right"]) for i in items]),
            "position_consistency": _share([i["chosen"][0] is not None and len(set(i["chosen"])) == 1 for i in items]),
        }

    items = list(per_item.values())
    known = set(copies["copy_id"].to_list())
    return {
        **summary(items),
        "copies": copies.height,
        "missing_copies": sum(1 for c in known if c not in predictions),
        "extra_predictions": sum(1 for p in predictions if p not in known),
        "by_level": {lv: summary([i for i in items if i["level"] == lv]) for lv in sorted({i["level"] for i in items})},
        "by_task": {
            t: summary([i for i in items if i["task"] == t])
            for t in sorted({i["task"] for i in items}, key=lambda t: int(t[1:]))
        },
    }


def circular_markdown(report: dict) -> str:
    head = "| slice | n | accuracy | circular accuracy | position consistency |\n|---|---|---|---|---|\n"

    def line(name: str, s: dict) -> str:
        return f"| {name} | {s['n']} | {s['accuracy']} | {s['circular_accuracy']} | {s['position_consistency']} |\n"

    rows = line("all", report) + "".join(line(lv, s) for lv, s in report["by_level"].items())
    rows += "".join(line(t, s) for t, s in report["by_task"].items())
    return (
        f"# CircularEval\n\n{report['copies']} copies, {report['missing_copies']} without a prediction, "
        f"{report['extra_predictions']} predictions for unknown copies.\n\n" + head + rows
    )


def main(argv: list[str] | None = None) -> int:
    """processbench score --circular: predictions for the circular copies -> <out>/circular.json and circular.md."""
    from pipeline.settings.config import load_settings
    from pipeline.release.rows import read_tables
    from pipeline.scoring.mcq import read_predictions

    ap = argparse.ArgumentParser(prog="processbench score --circular")
    ap.add_argument("--release", required=True)
    ap.add_argument("--predictions", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    cfg = load_settings()
    eval_df = read_tables(Path(args.release), cfg, levels=True)["eval"]
    report = circular_scores(
        eval_df, read_predictions(Path(args.predictions)), bool(cfg.exports.score.bare_letter_fallback)
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    io.atomic_write_text(out / "circular.json", io.dumps_json(report))
    io.atomic_write_text(out / "circular.md", circular_markdown(report))
    print(
        f"accuracy {report['accuracy']}, circular accuracy {report['circular_accuracy']}, position consistency "
        f"{report['position_consistency']} ({report['n']} items, {report['missing_copies']} copies unanswered)"
    )
    for lv, s in report["by_level"].items():
        print(
            f"  {lv}: accuracy {s['accuracy']}, circular {s['circular_accuracy']}, "
            f"consistency {s['position_consistency']} ({s['n']} items)"
        )
    print(f"written: {(out / 'circular.json').resolve()}, {(out / 'circular.md').resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
