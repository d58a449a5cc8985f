"""`processbench score`: score a predictions file against every eval level of a release.

Predictions are jsonl rows {"item_id", "response"}. The answer is the LAST <ANSWER>X</ANSWER> tag of the response
(the public protocol). Fallback (configs/exports.yaml `score.bare_letter_fallback`): a response that is only one
option letter, optionally in brackets or followed by a period ("B", "(B)", "B."), counts as that letter. Anything
else, and a letter beyond the item's options, is unparseable: wrong AND invalid. An eval item with no prediction is
scored the same way (and counted as missing); predictions for item ids of no eval level are ignored and counted as
extra; predictions for items of a level left out by `--levels` are counted apart (`other_levels`), never as extra.

Every metric and baseline is defined by formula in METRIC_DEFINITIONS below (the one place: docs/release-format.md
and the dataset card quote it). Results come per level (`by_level`), per family, per source, and per cell
(source x family x level, `cells`). 95 % intervals are percentile bootstraps that resample split groups (items of
one episode are not independent), seeded; with fewer groups than `score.min_ci_groups`, or when every resample
gives the same value, the interval is not estimable: null with the reason, never a zero-width interval.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import argparse
import json
import logging
import re
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import polars as pl

from pipeline.release import writers
from pipeline.core import io
from pipeline.release.rows import read_tables
from pipeline.scoring.bootstrap import ci_text, fmt, group_bootstrap
from pipeline.scoring.bias import bias_free
from pipeline.scoring.outcomes import OUTCOME_NAMES, ROW_OUTCOMES, SERVER_ANSWERED, item_outcome, outcome_counts
from pipeline.validity.baselines import credit, options

if TYPE_CHECKING:
    from pipeline.settings.models import ExportsScore
    from pipeline.settings.root import Settings

log = logging.getLogger(__name__)
TAG = re.compile(r"<ANSWER>\s*([A-Za-z])\s*</ANSWER>", re.IGNORECASE)
BARE = re.compile(r"[\s(\[]*([A-Za-z])[\s)\].:]*")
BASELINES = ("random", "label_prior", "majority")
CELL_KEY = ("source", "task_id", "level")

# The scorer's metrics, by formula (docs/release-format.md "Scorer" and the dataset card quote this text). A cell is
# (source, family, level); a slice (overall, a level, a family, a source) is a union of cells.
METRIC_DEFINITIONS = {
    "accuracy": "Σ_i correct_i / n: correct_i = 1 when the parsed letter equals the gold letter (unparseable and "
    "missing answers are wrong); n = the slice's eval items.",
    "balanced_accuracy": "the mean over the slice's answer labels l (answer texts, per source and family) of the recall "
    "Σ_{i: label_i = l} correct_i / n_l: a predictor that always gives one label scores 1/k on "
    "a cell of k labels, whatever their shares.",
    "invalid_rate": "share of items whose response is unparseable or missing.",
    "random": "Σ_i (1 / num_choices_i) / n: the expected accuracy of a uniform guess.",
    "label_prior": "the accuracy of always answering, among an item's options, the answer text most frequent among "
    "the SFT answers of its (source, family) (SFT answers of the family from every source when the source has "
    "none); where t options tie for the top, the expected accuracy of a uniform pick among them (1/t when the "
    "answer is one of them), as the validity audit computes it: what a model learns from SFT labels alone, with "
    "no position habit.",
    "majority": "the share of the cell's most frequent answer text among its own items (the level's label prior; a "
    "slice averages its cells', weighted by items): what a model biased to that label scores.",
    "image_free_best": "max(random, label_prior, majority): the best score reachable without the images.",
    "ci95": "percentile interval (score.ci) of the metric over score.bootstrap_samples resamples of the slice's split "
    "groups with replacement (cluster bootstrap, seeded by score.seed); null (ci95_note says why) with fewer "
    "than score.min_ci_groups groups or when every resample gives the same value.",
    "clears_image_free": "ci95's lower bound > image_free_best (null when ci95 is not estimable).",
    "task_macro / source_macro": "the mean over families (sources) of their accuracy; intervals resample split groups.",
    "outcomes": "every eval item of the slice counted once: answered (a parseable answer), invalid (an answer that "
    "does not parse), refused (finish_reason content_filter or the server's refusal: wrong whatever it says), "
    "truncated (finish_reason length), empty (no text), failed (the request failed: no answer) and missing (no "
    "prediction, or not asked); a predictions file without outcomes gives answered / invalid / failed / missing.",
    "answered_accuracy": "Σ_i correct_i / the slice's items the server answered (answered, invalid, refused, truncated "
    "and empty; failed and missing left out): the model's accuracy where it was asked and answered, beside accuracy, "
    "whose denominator n is every eval item of the slice.",
}


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


def read_prediction_rows(path: Path, field: str = "response") -> dict[str, tuple[object, str]]:
    """{item_id: (answer, outcome)} of a jsonl file (`field`: the key of the answer; step predictions name it
    `prediction`). The outcome is the row's `outcome` (what `processbench eval` writes), else `failed` for a null
    answer with an `error`, `missing` for a null answer without one, `answered` otherwise. A clear error naming the
    file and line for bytes that are not UTF-8, a line that is not JSON, a row without item_id / the answer, an item
    predicted twice."""
    path = Path(path)
    preds: dict[str, tuple[object, str]] = {}
    for n, raw in enumerate(path.read_bytes().splitlines(), 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{path}:{n}: not UTF-8 (byte {exc.start}: {exc.reason})") from None
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{n}: not JSON ({exc.msg})") from None
        if not isinstance(row, dict) or "item_id" not in row or field not in row:
            raise ValueError(f"{path}:{n}: a row needs `item_id` and `{field}`")
        if row["item_id"] in preds:
            raise ValueError(f"{path}:{n}: item {row['item_id']} predicted twice")
        outcome = row.get("outcome")
        if outcome not in ROW_OUTCOMES:
            outcome = "answered" if row[field] is not None else "failed" if row.get("error") else "missing"
        preds[row["item_id"]] = (row[field], outcome)
    return preds


def read_predictions(path: Path, field: str = "response") -> dict[str, object]:
    """{item_id: answer} of a jsonl file (read_prediction_rows without the outcomes)."""
    return {k: v[0] for k, v in read_prediction_rows(path, field).items()}


def read_release(release_dir: Path, cfg: Settings) -> dict[str, pl.DataFrame]:
    """{"eval": every eval level's rows (release_files.eval_level_files), "sft": the SFT rows}."""
    return read_tables(Path(release_dir), cfg, levels=True)


def _label_priors(sft_df: pl.DataFrame) -> tuple[dict, dict]:
    """Counts of SFT answer texts per (source, family) and per family."""
    by_cell: dict[tuple, Counter] = {}
    by_family: dict[str, Counter] = {}
    for src, task, text in sft_df.select("source", "task_id", "answer_text").iter_rows():
        by_cell.setdefault((src, task), Counter())[text] += 1
        by_family.setdefault(task, Counter())[text] += 1
    return by_cell, by_family


def label_prior_credit(row: dict, by_cell: dict, by_family: dict) -> float:
    """The label-prior baseline's expected hit on an item: the options most frequent among its (source, family)'s SFT
    answer texts (the family's over every source when the source has none), picked uniformly when several tie
    (pipeline/validity/baselines.py `credit`, the validity audit's own rule)."""
    prior = by_cell.get((row["source"], row["task_id"])) or by_family.get(row["task_id"]) or Counter()
    return credit(options(row), prior, row["answer_text"])


def _level(row: dict) -> str:
    return "none" if row.get("eval_level") is None else str(row["eval_level"])


def item_table(
    eval_df: pl.DataFrame,
    sft_df: pl.DataFrame,
    preds: dict,
    bare_fallback: bool = True,
    outcomes: dict[str, str] | None = None,
) -> pl.DataFrame:
    """One row per eval item: its cell, label, prediction, outcome, correct / invalid, and the per-item baselines.
    `outcomes`: item id -> the predictions row's outcome (a refused answer is wrong whatever it says)."""
    by_cell, by_family = _label_priors(sft_df)
    rows = eval_df.to_dicts()
    tops: dict[tuple, str] = {}
    for key, texts in _group(rows, lambda r: (r["source"], r["task_id"], _level(r))).items():
        c = Counter(r["answer_text"] for r in texts)
        tops[key] = min(c, key=lambda t: (-c[t], t))
    out = []
    for r in rows:
        iid = r["item_id"]
        row_outcome = (outcomes or {}).get(iid, "answered" if preds.get(iid) is not None else None)
        pred = None if row_outcome == "refused" else parse_answer(preds.get(iid), int(r["num_choices"]), bare_fallback)
        level = _level(r)
        out.append(
            {
                "item_id": iid,
                "item_uid": r.get("item_uid"),
                "task_id": r["task_id"],
                "source": r["source"],
                "level": level,
                "split_group_id": r["split_group_id"],
                "answer": r["answer"],
                "answer_text": r["answer_text"],
                "prediction": pred,
                "outcome": item_outcome(row_outcome, pred is not None),
                "correct": float(pred == r["answer"]),
                "invalid": float(pred is None),
                "random": 1.0 / int(r["num_choices"]),
                "label_prior": label_prior_credit(r, by_cell, by_family),
                "majority": float(tops[(r["source"], r["task_id"], level)] == r["answer_text"]),
            }
        )
    return pl.DataFrame(out, schema_overrides={"prediction": pl.String, "item_uid": pl.String})


def _group(rows: list[dict], key) -> dict:
    out: dict = {}
    for r in rows:
        out.setdefault(key(r), []).append(r)
    return out


def _matrix(df: pl.DataFrame, cats: list) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(correct, count) per split group x category (`cats`: one key per item), and the sorted group ids."""
    gids = df["split_group_id"].to_list()
    groups = sorted(set(gids))
    gi = {g: i for i, g in enumerate(groups)}
    ci = {c: i for i, c in enumerate(sorted(set(cats)))}
    correct, count = np.zeros((len(groups), len(ci))), np.zeros((len(groups), len(ci)))
    g_idx = np.array([gi[g] for g in gids], dtype=np.int64)
    c_idx = np.array([ci[c] for c in cats], dtype=np.int64)
    np.add.at(correct, (g_idx, c_idx), df["correct"].to_numpy())
    np.add.at(count, (g_idx, c_idx), 1.0)
    return correct, count, groups


def _ci(df: pl.DataFrame, cats: list | None, sc: ExportsScore) -> tuple[list[float] | None, str | None]:
    """Percentile bootstrap over split groups of the mean over categories of their accuracy (cats None: one
    category, the micro accuracy). Returns (interval, None) or (None, why it is not estimable)."""
    correct, count, _ = _matrix(df, cats if cats is not None else [0] * df.height)
    k = correct.shape[1]

    def mean_accuracy(tot: np.ndarray) -> np.ndarray:
        csum, nsum = tot[:, :k], tot[:, k:]
        return np.nanmean(np.where(nsum > 0, csum / np.maximum(nsum, 1.0), np.nan), axis=1)

    return group_bootstrap(np.concatenate([correct, count], axis=1), mean_accuracy, sc)


def _label_keys(df: pl.DataFrame) -> list:
    return list(zip(df["source"].to_list(), df["task_id"].to_list(), df["answer_text"].to_list()))


def balanced_accuracy(df: pl.DataFrame) -> float:
    """Mean over answer labels (source, family, answer text) of the share of their items answered correctly."""
    per = (
        df.with_columns(pl.Series("__l", [str(k) for k in _label_keys(df)]))
        .group_by("__l")
        .agg(pl.col("correct").mean())
    )
    return round(float(per["correct"].mean()), 4)


def _with_ci(out: dict, name: str, ci: tuple) -> None:
    out[name] = ci[0]
    if ci[1]:
        out[f"{name}_note"] = ci[1]


def answered_accuracy(df: pl.DataFrame) -> float | None:
    """Accuracy over the items the server answered (SERVER_ANSWERED); None when it answered none."""
    asked = df.filter(pl.col("outcome").is_in(list(SERVER_ANSWERED)))
    return round(float(asked["correct"].mean()), 4) if asked.height else None


def _block(df: pl.DataFrame, sc: ExportsScore, macro: tuple[str, ...] = (), outcomes: bool = False) -> dict:
    base = {b: round(float(df[b].mean()), 4) for b in BASELINES}
    base["image_free_best"] = max(base.values())
    out = {
        "accuracy": round(float(df["correct"].mean()), 4),
        "balanced_accuracy": balanced_accuracy(df),
        "n": df.height,
        "n_groups": int(df["split_group_id"].n_unique()),
        "invalid_rate": round(float(df["invalid"].mean()), 4),
    }
    _with_ci(out, "ci95", _ci(df, None, sc))
    if outcomes:
        out["answered_accuracy"] = answered_accuracy(df)
        out["outcomes"] = outcome_counts(df["outcome"].to_list())
    out["baselines"] = base
    out["clears_image_free"] = None if out["ci95"] is None else bool(out["ci95"][0] > base["image_free_best"])
    for col, name in (("task_id", "task_macro"), ("source", "source_macro")):
        if col in macro:
            per = df.group_by(col).agg([pl.col(c).mean() for c in ("correct", *BASELINES)])
            out[f"{name}_accuracy"] = round(float(per["correct"].mean()), 4)
            _with_ci(out, f"{name}_ci95", _ci(df, df[col].to_list(), sc))
            out[f"{name}_baselines"] = {b: round(float(per[b].mean()), 4) for b in BASELINES}
    return out


def metrics(items: pl.DataFrame, cfg: Settings) -> dict:
    sc = cfg.exports.score
    out = {"overall": _block(items, sc, ("task_id", "source"), outcomes=True)}
    for key, col in (("by_task", "task_id"), ("by_source", "source"), ("by_level", "level")):
        vals = sorted(items[col].unique().to_list(), key=writers.task_number if col == "task_id" else str)
        out[key] = {v: _block(items.filter(pl.col(col) == v), sc, outcomes=True) for v in vals}
    cells = items.select(*CELL_KEY).unique()
    order = sorted(cells.iter_rows(), key=lambda c: (c[2], c[0], writers.task_number(c[1])))
    out["cells"] = [
        {
            "source": s,
            "family": t,
            "level": lv,
            **_block(items.filter((pl.col("source") == s) & (pl.col("task_id") == t) & (pl.col("level") == lv)), sc),
        }
        for s, t, lv in order
    ]
    out["definitions"] = METRIC_DEFINITIONS
    return out


def flag(b: dict) -> str:
    """The markdown's verdict on a slice against the best image-free baseline."""
    if b["clears_image_free"]:
        return ""
    if b["clears_image_free"] is False or b["accuracy"] <= b["baselines"]["image_free_best"]:
        return "NO BETTER THAN IMAGE-FREE"
    return "interval not estimable"


def markdown(m: dict) -> str:
    head = (
        "| n | groups | accuracy | balanced | 95 % CI | invalid | random | label prior | majority | image-free best "
        "| flag |"
    )
    lines = ["| slice " + head, "|" + "---|" * 12]

    def cols(b: dict) -> str:
        bl = b["baselines"]
        return (
            f"| {b['n']} | {b['n_groups']} | {b['accuracy']:.4f} | {b['balanced_accuracy']:.4f} | "
            f"{ci_text(b['ci95'])} | {b['invalid_rate']:.4f} | {bl['random']:.4f} | {bl['label_prior']:.4f} | "
            f"{bl['majority']:.4f} | {bl['image_free_best']:.4f} | {flag(b)} |"
        )

    lines.append("| overall (micro) " + cols(m["overall"]))
    o = m["overall"]
    for name in ("task_macro", "source_macro"):
        bl = o[f"{name}_baselines"]
        lines.append(
            f"| {name.replace('_', ' ')} | | | {o[f'{name}_accuracy']:.4f} | | {ci_text(o[f'{name}_ci95'])} "
            f"| | {bl['random']:.4f} | {bl['label_prior']:.4f} | {bl['majority']:.4f} | | |"
        )
    for key in ("by_level", "by_task", "by_source"):
        for name, b in m[key].items():
            lines.append(f"| {key[3:]} {name} " + cols(b))
    lines += [
        "",
        "Per cell (source × family × level); majority = the cell's own label prior; the flag marks cells "
        "whose interval does not clear the best image-free baseline (n/e: not estimable).",
        "",
        "| source | family | level " + head,
        "|" + "---|" * 14,
    ]
    for c in m["cells"]:
        lines.append(f"| {c['source']} | {c['family']} | {c['level']} " + cols(c))
    lines += ["", *outcomes_markdown(m)]
    lines += ["", "Definitions:", ""] + [f"- **{k}**: {v}" for k, v in m["definitions"].items()]
    return "\n".join(lines) + "\n"


def outcomes_markdown(m: dict) -> list[str]:
    """What became of every eval item, and the denominator of each accuracy."""
    head = "| slice | n | " + " | ".join(OUTCOME_NAMES) + " | accuracy (of n) | answered accuracy |"
    lines = [
        "Outcomes: every eval item counted once. Denominators: accuracy, balanced accuracy, the intervals and every "
        "baseline use n, every eval item of the slice (invalid, refused, truncated, empty, failed and missing answers "
        "count wrong); answered accuracy uses the items the server answered (answered + invalid + refused + "
        "truncated + empty).",
        "",
        head,
        "|" + "---|" * (len(OUTCOME_NAMES) + 4),
    ]
    slices = [("overall", m["overall"])] + [(f"level {k}", b) for k, b in m["by_level"].items()]
    for name, b in slices:
        o = b["outcomes"]
        lines.append(
            f"| {name} | {b['n']} | "
            + " | ".join(str(o[k]) for k in OUTCOME_NAMES)
            + f" | {b['accuracy']:.4f} | {fmt(b['answered_accuracy'])} |"
        )
    return lines


PLOT_COLOURS = {"random": "#d62728", "label_prior": "#ff7f0e", "majority": "#2ca02c", "image_free_best": "#000000"}
PLOT_MARKERS = {"random": "_", "label_prior": "x", "majority": "+"}


def plot(m: dict, path: Path, title: str = "") -> None:
    """Accuracy per family (bars, with the bootstrap interval and n), every baseline per family as markers in
    colours distinct from the bars, the legend outside the axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(m["by_task"])
    x = np.arange(len(tasks))
    acc = np.array([m["by_task"][t]["accuracy"] for t in tasks])
    ci = [m["by_task"][t]["ci95"] or [a, a] for t, a in zip(tasks, acc)]
    err = [acc - np.array([c[0] for c in ci]), np.array([c[1] for c in ci]) - acc]
    fig, ax = plt.subplots(figsize=(max(7, len(tasks) * 0.9) + 2.2, 4.4))
    ax.bar(x, acc, yerr=err, color="#4c72b0", label="model accuracy", capsize=3, width=0.6)
    ax.hlines(
        [m["by_task"][t]["baselines"]["image_free_best"] for t in tasks],
        x - 0.36,
        x + 0.36,
        colors=PLOT_COLOURS["image_free_best"],
        linestyles="--",
        linewidth=1.5,
        zorder=3,
        label="image-free best",
    )
    for b in BASELINES:
        ax.scatter(
            x,
            [m["by_task"][t]["baselines"][b] for t in tasks],
            marker=PLOT_MARKERS[b],
            s=160,
            color=PLOT_COLOURS[b],
            linewidths=2,
            zorder=4,
            label=b.replace("_", " "),
        )
    for xi, t in zip(x, tasks):
        ax.text(xi, 1.03, f"n={m['by_task'][t]['n']}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x, tasks)
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("accuracy")
    ax.set_title(title or "accuracy per family", fontsize=9)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)


OUTPUTS = ("metrics.json", "metrics.md", "per_item.jsonl", "accuracy_by_task.png")
STEP_OUTPUTS = ("per_step.jsonl",)  # with step predictions (the T13 step track, pipeline/scoring/steps.py)


def _score_mcq(tables: dict, predictions: Path, cfg: Settings, levels: list[str] | None) -> tuple[dict, pl.DataFrame]:
    ev = tables["eval"]
    rows = read_prediction_rows(predictions)
    preds = {k: v[0] for k, v in rows.items()}
    all_ids = set(ev["item_id"].to_list())
    if levels:
        ev = ev.filter(pl.col("eval_level").fill_null("none").is_in(list(levels)))
    known = set(ev["item_id"].to_list())
    missing = sorted(known - set(preds))
    extra = sorted(set(preds) - all_ids)
    other = len((set(preds) & all_ids) - known)
    if missing:
        log.warning("%d eval items have no prediction (scored wrong and invalid), e.g. %s", len(missing), missing[:3])
    if extra:
        log.warning("%d predictions name no eval item (ignored), e.g. %s", len(extra), extra[:3])
    items = item_table(
        ev, tables["sft"], preds, bool(cfg.exports.score.bare_letter_fallback), {k: v[1] for k, v in rows.items()}
    )
    m = metrics(items, cfg)
    m["bias_free"] = bias_free(
        ev, items, cfg
    )  # T5/T7/T8/T9 scores no answer habit can reach (pipeline/scoring/bias.py)
    m["predictions"] = {
        "file": Path(predictions).name,
        "levels": sorted(set(items["level"].to_list())),
        "missing": len(missing),
        "extra": len(extra),
        "other_levels": other,
        "missing_examples": missing[:10],
        "extra_examples": extra[:10],
    }
    return m, items


def release_fingerprint(release_dir: Path, cfg: Settings) -> str | None:
    """The release's fingerprint (pipeline/release/identity.py) for metrics.json; None for a release that states none
    (an older format: its predictions are scored all the same)."""
    from pipeline.release.identity import ReleaseIdentityError, release_fingerprint as fingerprint

    try:
        return fingerprint(release_dir, cfg)
    except ReleaseIdentityError as exc:
        log.warning("%s: scored without a release fingerprint", exc)
        return None


def _check_levels(tables: list[pl.DataFrame], levels: list[str] | None) -> None:
    if not levels:
        return
    known_levels = sorted({_level(r) for df in tables for r in df.select("eval_level").to_dicts()})
    unknown = sorted(set(levels) - set(known_levels))
    if unknown:
        raise ValueError(f"--levels {','.join(unknown)}: the release has levels {', '.join(known_levels)}")


def score(
    release_dir: Path,
    predictions: Path | None,
    out_dir: Path,
    cfg: Settings,
    levels: list[str] | None = None,
    step_predictions: Path | None = None,
) -> dict:
    """Score `predictions` (multiple choice) and / or `step_predictions` (the T13 step track; its metrics under
    `steps`) against every eval level of the release (or only `levels`); writes OUTPUTS (the MCQ ones with
    `predictions`, STEP_OUTPUTS with `step_predictions`) into `out_dir` and returns the metrics (their `outputs`
    names the files written)."""
    if predictions is None and step_predictions is None:
        raise ValueError("give predictions, step predictions or both")
    from pipeline.scoring import steps as step_score
    from pipeline.steps.tables import read_step_tables

    step_tables = read_step_tables(release_dir, cfg) if step_predictions is not None else None
    if step_predictions is not None and step_tables is None:
        raise ValueError(
            f"release {Path(release_dir)}: step predictions given but the release has no step files "
            f"({writers.file_names(cfg).get('steps_eval_parquet')})"
        )
    tables = read_release(release_dir, cfg) if predictions is not None else None
    _check_levels([t["eval"] for t in (tables, step_tables) if t is not None], levels)
    m, items, written = {}, None, []
    if predictions is not None:
        m, items = _score_mcq(tables, predictions, cfg, levels)
        written = list(OUTPUTS)
    md = markdown(m) if m else ""
    if step_tables is not None:
        step_rows = read_prediction_rows(step_predictions, "prediction")
        m["steps"], per_step = step_score.score_steps(
            step_tables,
            {k: v[0] for k, v in step_rows.items()},
            Path(step_predictions).name,
            cfg.exports.score,
            levels,
            {k: v[1] for k, v in step_rows.items()},
        )
        md = (md + "\n" if md else "") + step_score.markdown(m["steps"])
        written = (written or list(OUTPUTS[:2])) + list(STEP_OUTPUTS)
    m["release"] = release_fingerprint(release_dir, cfg)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    io.atomic_write_text(out_dir / OUTPUTS[0], io.dumps_json(m))
    io.atomic_write_text(out_dir / OUTPUTS[1], md)
    stamp = pl.lit(m["release"], dtype=pl.String).alias("release")  # every per-item row names its release
    if items is not None:
        io.write_jsonl(out_dir / OUTPUTS[2], items.with_columns(stamp))
        plot(
            m,
            out_dir / OUTPUTS[3],
            f"{Path(predictions).name}: accuracy per family (levels {', '.join(m['predictions']['levels'])})",
        )
    if step_tables is not None:
        io.write_jsonl(out_dir / STEP_OUTPUTS[0], per_step.with_columns(stamp))
    m["outputs"] = [str(out_dir / f) for f in written]
    return m


def _print_summary(m: dict) -> None:
    if "overall" in m:
        o = m["overall"]
        print(
            f"accuracy {o['accuracy']:.4f} (n={o['n']}, invalid {o['invalid_rate']:.4f}, 95% CI "
            f"{ci_text(o['ci95'])}); balanced {o['balanced_accuracy']:.4f}; task-macro "
            f"{o['task_macro_accuracy']:.4f}; missing {m['predictions']['missing']}, extra {m['predictions']['extra']}"
        )
        print(
            "outcomes: "
            + ", ".join(f"{k} {o['outcomes'][k]}" for k in OUTCOME_NAMES)
            + f"; accuracy of the {o['outcomes']['server_answered']} answered {fmt(o['answered_accuracy'])}"
        )
        for lv, b in m["by_level"].items():
            print(
                f"  {lv}: accuracy {b['accuracy']:.4f} (n={b['n']}), image-free best "
                f"{b['baselines']['image_free_best']:.4f}"
            )
        flagged = [c for c in m["cells"] if flag(c) == "NO BETTER THAN IMAGE-FREE"]
        print(f"{len(flagged)} of {len(m['cells'])} cells no better than image-free")
    if "steps" in m:
        o, p = m["steps"]["overall"], m["steps"]["predictions"]
        print(
            f"steps: macro-F1 {fmt(o['macro_f1'])} (95% CI {ci_text(o['macro_f1_ci95'])}; {o['n_steps']} steps of "
            f"{o['n_items']} items, invalid {fmt(o['invalid_rate'])}); first-error {fmt(o['first_error'])}; "
            f"all-correct macro-F1 {fmt(o['baselines']['all_correct']['macro_f1'])}; missing {p['missing']}, "
            f"extra {p['extra']}"
        )
    print(f"written: {', '.join(m['outputs'])}")


def main(argv: list[str] | None = None, cfg: Settings | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="processbench score", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--release", required=True)
    p.add_argument("--predictions", default=None, help="multiple-choice predictions (jsonl item_id, response)")
    p.add_argument(
        "--step-predictions",
        default=None,
        help="T13 step predictions (jsonl item_id, prediction: a list of 1 / -1 or the model's text)",
    )
    p.add_argument("--out", required=True)
    p.add_argument("--levels", default=None, help="comma-separated eval levels to score (default: every level)")
    args = p.parse_args(argv)
    if args.predictions is None and args.step_predictions is None:
        p.error("give --predictions, --step-predictions or both")
    if cfg is None:
        from pipeline.settings.config import load_settings

        cfg = load_settings()
    levels = [x.strip() for x in args.levels.split(",") if x.strip()] if args.levels else None
    try:
        m = score(
            Path(args.release),
            Path(args.predictions) if args.predictions else None,
            Path(args.out),
            cfg,
            levels,
            Path(args.step_predictions) if args.step_predictions else None,
        )
    except (ValueError, FileNotFoundError) as exc:
        print(f"score: {exc}", file=sys.stderr)
        return 2
    _print_summary(m)
    return 0


if __name__ == "__main__":
    sys.exit(main())
