"""`processbench score`: score a predictions file against the release's eval table.

Predictions are jsonl rows {"item_id", "response"}. The answer is the LAST <ANSWER>X</ANSWER> tag of the response
(the public protocol). Fallback (configs/exports.yaml `score.bare_letter_fallback`): a response that is only one
option letter, optionally in brackets or followed by a period ("B", "(B)", "B."), counts as that letter. Anything
else, and a letter beyond the item's options, is unparseable: wrong AND invalid. An eval item with no prediction is
scored the same way (and counted as missing); predictions for unknown item ids are ignored and counted as extra.

Baselines, per item, then averaged like the accuracy: random = 1/num_choices; label-prior = the probability of the
item's answer letter under its family's letter distribution in the SFT split (eval's, for a family with no SFT
items); majority = 1 if the answer is the family's most frequent SFT letter. 95 % intervals are percentile
bootstraps that resample split groups (items of one episode are not independent), seeded.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from pathlib import Path

import numpy as np
import polars as pl

from pipeline import io, writers
from pipeline.exports.common import export_cfg, read_tables
from pipeline.score_bias import bias_free

log = logging.getLogger(__name__)
TAG = re.compile(r"<ANSWER>\s*([A-Za-z])\s*</ANSWER>", re.IGNORECASE)
BARE = re.compile(r"[\s(\[]*([A-Za-z])[\s)\].:]*")
BASELINES = ("random", "label_prior", "majority")


def parse_answer(response, num_choices: int, bare_fallback: bool = True) -> str | None:
    """The predicted letter, or None if the response is unparseable."""
    if not isinstance(response, str):
        return None
    tags = TAG.findall(response)
    letter = tags[-1] if tags else None
    if letter is None and bare_fallback:
        m = BARE.fullmatch(response)
        letter = m.group(1) if m else None
    if letter is None:
        return None
    letter = letter.upper()
    return letter if letter in writers.CHOICE_LETTERS[:num_choices] else None


def read_predictions(path: Path) -> dict[str, object]:
    preds: dict[str, object] = {}
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{Path(path).name}:{n}: not JSON ({exc.msg})") from None
        if not isinstance(row, dict) or "item_id" not in row or "response" not in row:
            raise ValueError(f"{Path(path).name}:{n}: a row needs `item_id` and `response`")
        if row["item_id"] in preds:
            raise ValueError(f"{Path(path).name}:{n}: item {row['item_id']} predicted twice")
        preds[row["item_id"]] = row["response"]
    return preds


def _priors(eval_df: pl.DataFrame, sft_df: pl.DataFrame) -> dict[str, dict[str, float]]:
    out = {}
    for task in eval_df["task_id"].unique().to_list():
        ref = sft_df.filter(pl.col("task_id") == task)
        if not ref.height:
            ref = eval_df.filter(pl.col("task_id") == task)
        counts = ref["answer"].value_counts()
        total = ref.height
        out[task] = {r["answer"]: r["count"] / total for r in counts.iter_rows(named=True)}
    return out


def item_table(eval_df: pl.DataFrame, sft_df: pl.DataFrame, preds: dict, bare_fallback: bool = True) -> pl.DataFrame:
    priors = _priors(eval_df, sft_df)
    majority = {t: sorted(p.items(), key=lambda kv: (-kv[1], kv[0]))[0][0] for t, p in priors.items()}
    rows = []
    for r in eval_df.iter_rows(named=True):
        pred = parse_answer(preds.get(r["item_id"]), int(r["num_choices"]), bare_fallback)
        rows.append({
            "item_id": r["item_id"], "task_id": r["task_id"], "source": r["source"],
            "level": "none" if r.get("eval_level") is None else str(r["eval_level"]),
            "split_group_id": r["split_group_id"], "answer": r["answer"], "prediction": pred,
            "correct": float(pred == r["answer"]), "invalid": float(pred is None),
            "random": 1.0 / int(r["num_choices"]),
            "label_prior": priors[r["task_id"]].get(r["answer"], 0.0),
            "majority": float(majority[r["task_id"]] == r["answer"]),
        })
    return pl.DataFrame(rows, infer_schema_length=None)  # a prediction may first appear after row 100


def _ci(df: pl.DataFrame, by: str | None, samples: int, seed: int, level: float) -> list[float]:
    """Percentile bootstrap of micro accuracy (by=None) or of the macro mean over `by`, resampling split groups."""
    groups = df["split_group_id"].unique().sort().to_list()
    gi = {g: i for i, g in enumerate(groups)}
    cats = [None] if by is None else sorted(df[by].unique().to_list())
    ci = {c: i for i, c in enumerate(cats)}
    correct = np.zeros((len(groups), len(cats)))
    count = np.zeros((len(groups), len(cats)))
    for r in df.iter_rows(named=True):
        g, c = gi[r["split_group_id"]], ci[None if by is None else r[by]]
        correct[g, c] += r["correct"]
        count[g, c] += 1
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(groups), size=(samples, len(groups)))
    csum, nsum = correct[idx].sum(axis=1), count[idx].sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        acc = np.nanmean(np.where(nsum > 0, csum / nsum, np.nan), axis=1)
    a = (1 - level) / 2
    return [round(float(np.quantile(acc, a)), 4), round(float(np.quantile(acc, 1 - a)), 4)]


def _block(df: pl.DataFrame, sc: dict, macro: tuple[str, ...] = ()) -> dict:
    samples, seed, level = int(sc["bootstrap_samples"]), int(sc["seed"]), float(sc["ci"])
    out = {"accuracy": round(float(df["correct"].mean()), 4), "n": df.height,
           "invalid_rate": round(float(df["invalid"].mean()), 4), "ci95": _ci(df, None, samples, seed, level),
           "baselines": {b: round(float(df[b].mean()), 4) for b in BASELINES}}
    for col, name in (("task_id", "task_macro"), ("source", "source_macro")):
        if col in macro:
            per = df.group_by(col).agg([pl.col(c).mean() for c in ("correct", *BASELINES)])
            out[f"{name}_accuracy"] = round(float(per["correct"].mean()), 4)
            out[f"{name}_ci95"] = _ci(df, col, samples, seed, level)
            out[f"{name}_baselines"] = {b: round(float(per[b].mean()), 4) for b in BASELINES}
    return out


def metrics(items: pl.DataFrame, cfg: dict) -> dict:
    sc = export_cfg(cfg)["score"]
    out = {"overall": _block(items, sc, ("task_id", "source"))}
    for key, col in (("by_task", "task_id"), ("by_source", "source"), ("by_level", "level")):
        vals = sorted(items[col].unique().to_list(), key=writers.task_number if col == "task_id" else str)
        out[key] = {v: _block(items.filter(pl.col(col) == v), sc) for v in vals}
    return out


def markdown(m: dict) -> str:
    lines = ["| slice | n | accuracy | 95 % CI | invalid | random | label prior | majority |", "|" + "---|" * 8]

    def row(name, b):
        bl = b["baselines"]
        lines.append(f"| {name} | {b['n']} | {b['accuracy']:.4f} | [{b['ci95'][0]:.4f}, {b['ci95'][1]:.4f}] | "
                     f"{b['invalid_rate']:.4f} | {bl['random']:.4f} | {bl['label_prior']:.4f} | {bl['majority']:.4f} |")
    row("overall (micro)", m["overall"])
    o = m["overall"]
    lines.append(f"| task macro | | {o['task_macro_accuracy']:.4f} | [{o['task_macro_ci95'][0]:.4f}, "
                 f"{o['task_macro_ci95'][1]:.4f}] | | {o['task_macro_baselines']['random']:.4f} | "
                 f"{o['task_macro_baselines']['label_prior']:.4f} | {o['task_macro_baselines']['majority']:.4f} |")
    lines.append(f"| source macro | | {o['source_macro_accuracy']:.4f} | [{o['source_macro_ci95'][0]:.4f}, "
                 f"{o['source_macro_ci95'][1]:.4f}] | | {o['source_macro_baselines']['random']:.4f} | "
                 f"{o['source_macro_baselines']['label_prior']:.4f} | {o['source_macro_baselines']['majority']:.4f} |")
    for key in ("by_task", "by_source", "by_level"):
        for name, b in m[key].items():
            row(f"{key[3:]} {name}", b)
    return "\n".join(lines) + "\n"


def plot(m: dict, path: Path) -> None:
    """Accuracy per family against the three baselines (with the bootstrap interval)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(m["by_task"])
    x = np.arange(len(tasks))
    acc = np.array([m["by_task"][t]["accuracy"] for t in tasks])
    lo = acc - np.array([m["by_task"][t]["ci95"][0] for t in tasks])
    hi = np.array([m["by_task"][t]["ci95"][1] for t in tasks]) - acc
    fig, ax = plt.subplots(figsize=(max(6, len(tasks) * 0.8), 4))
    ax.bar(x, acc, yerr=[lo, hi], color="#4c72b0", label="model", capsize=3)
    for b in BASELINES:
        ax.scatter(x, [m["by_task"][t]["baselines"][b] for t in tasks], marker="_", s=400, label=b.replace("_", " "))
    ax.set_xticks(x, tasks)
    ax.set_ylim(0, 1)
    ax.set_ylabel("accuracy")
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)


def score(release_dir: Path, predictions: Path, out_dir: Path, cfg: dict) -> dict:
    tables = read_tables(release_dir, cfg)
    ev = tables["eval"]
    preds = read_predictions(predictions)
    known = set(ev["item_id"].to_list())
    missing = sorted(known - set(preds))
    extra = sorted(set(preds) - known)
    if missing:
        log.warning("%d eval items have no prediction (scored wrong and invalid), e.g. %s", len(missing), missing[:3])
    if extra:
        log.warning("%d predictions name no eval item (ignored), e.g. %s", len(extra), extra[:3])
    items = item_table(ev, tables["sft"], preds, bool(export_cfg(cfg)["score"].get("bare_letter_fallback", True)))
    m = metrics(items, cfg)
    m["bias_free"] = bias_free(ev, items, cfg)  # T5/T7/T8/T9 scores no answer habit can reach (pipeline/score_bias.py)
    m["predictions"] = {"missing": len(missing), "extra": len(extra), "missing_examples": missing[:10],
                        "extra_examples": extra[:10]}
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    io.atomic_write_text(out_dir / "metrics.json", io.dumps_json(m))
    io.atomic_write_text(out_dir / "metrics.md", markdown(m))
    io.write_jsonl(out_dir / "per_item.jsonl", items)
    plot(m, out_dir / "accuracy_by_task.png")
    return m


def main(argv: list[str] | None = None, cfg: dict | None = None) -> int:
    p = argparse.ArgumentParser(prog="processbench score", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--release", required=True)
    p.add_argument("--predictions", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    if cfg is None:
        from pipeline.config import load_config
        cfg = load_config()
    try:
        m = score(Path(args.release), Path(args.predictions), Path(args.out), cfg)
    except (ValueError, FileNotFoundError) as exc:
        print(f"score: {exc}", file=sys.stderr)
        return 2
    o = m["overall"]
    print(f"accuracy {o['accuracy']:.4f} (n={o['n']}, invalid {o['invalid_rate']:.4f}, 95% CI {o['ci95']}); "
          f"task-macro {o['task_macro_accuracy']:.4f}; missing {m['predictions']['missing']}, "
          f"extra {m['predictions']['extra']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
