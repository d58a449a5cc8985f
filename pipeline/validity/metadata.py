"""Metadata baselines: what one column of a release row, alone, tells about the answer, and what a unit's row count
tells (per (source, family, level) cell, trained on SFT rows and scored on eval rows like the text baselines).

For each public column (pipeline/release/schema.py; the answer columns and the question / options, which the text baselines
cover, aside) two memorisers, each picking among the item's own options the answer text most frequent among SFT
items with the same key (the label prior for a key SFT never shows):

* value: the column's value itself (a per-unit or per-scene column can carry its units' outcome);
* order: the rank pattern of the last bracketed list of numbers in the value (frame indices in display order, a
  reference listing them: the order a temporal family asks for).

The column's baseline is the better of the two. The row count: the number of rows of the item's split group in its
file and family (each file is visible whole to whoever holds it; a unit whose answer decides how many windows it
gives, e.g. every window of a failure take, gives the answer away).

A column a model-facing file shows (schema.MODEL_FACING_COLUMNS), and the row count (split_group_id is shown), is
checked against the cell's reference (validity.limits.metadata_over_reference, row_count_over_reference); every
other column is reported only: it lives in the reconstruction files a model is not shown.

The row count's chance level (`validity.row_count_null`): split groups merge units (RH20T: task and scene), so row
counts vary even where the selection takes equal shares, and a memoriser over a few dozen held-out groups scores
above the label prior by chance (release-scale RH20T: up to +0.13 at the 99th percentile with no leak). The row
count is therefore also judged against its own null: the `quantile` of its accuracy over `permutations` draws with
the row counts shuffled among the cell's eval groups and among its SFT groups (a leak survives no shuffle).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict

from pipeline.release.schema import CHOICE_COLUMNS, COLUMN_NAMES, MODEL_FACING_COLUMNS
from .baselines import credit, keyed_acc, label_prior, options

# the answer itself (gold is in every file), the question and options (text baselines), the split (one value per file)
NOT_PREDICTORS = frozenset(
    {"answer", "answer_text", "sft_target", "question", *CHOICE_COLUMNS, "split", "num_choices", "eval_level"}
)
ROW_COUNT = "row_count"
_LIST = re.compile(r"\[\s*\d+(?:\s*,\s*\d+)+\s*\]")  # a bracketed list of two or more numbers


def predictor_columns(present: set[str]) -> list[str]:
    """The public columns judged alone, in schema order (only those the rows carry)."""
    return [c for c in COLUMN_NAMES if c in present and c not in NOT_PREDICTORS]


def model_facing(column: str) -> bool:
    return column == ROW_COUNT or column in MODEL_FACING_COLUMNS


def _order(value) -> str | None:
    """The rank pattern of the last bracketed number list in the value ("[30, 10, 20]" -> "1,2,0"), else None."""
    lists = _LIST.findall(str(value)) if value is not None else []
    if not lists:
        return None
    nums = [int(x) for x in re.findall(r"\d+", lists[-1])]
    ranks = sorted(range(len(nums)), key=lambda i: (nums[i], i))
    return ",".join(map(str, ranks))


def row_counts(rows: list[dict], level_key) -> list[int]:
    """Per row: the rows of its split group in its file (level_key(row)) and family."""
    key = [
        (level_key(r), r.get("source_slug"), r["task_id"], r.get("split_group_id", r.get("source_unit_id")))
        for r in rows
    ]
    c = Counter(key)
    return [c[k] for k in key]


def column_accuracy(sft_values: list, sft_rows: list[dict], eval_values: list, eval_rows: list[dict]) -> float | None:
    """The better of the value and order memorisers of one column (values aligned with the rows)."""
    if not eval_rows:
        return None
    accs = [keyed_acc(sft_values, sft_rows, eval_values, eval_rows)]
    eo = [_order(v) for v in eval_values]
    if any(x is not None for x in eo):
        accs.append(keyed_acc([_order(v) for v in sft_values], sft_rows, eo, eval_rows))
    return max(a for a in accs if a is not None)


def row_count_accuracy(
    sft_counts: list[int], sft_rows: list[dict], eval_counts: list[int], eval_rows: list[dict]
) -> float | None:
    return keyed_acc(sft_counts, sft_rows, eval_counts, eval_rows) if eval_rows else None


def _group(r: dict):
    return r.get("split_group_id", r.get("source_unit_id"))


def row_count_null(
    sft_counts: list[int],
    sft_rows: list[dict],
    eval_counts: list[int],
    eval_rows: list[dict],
    permutations: int,
    quantile: float,
    rng,
) -> float | None:
    """The `quantile` of the row count's accuracy with the counts shuffled among groups (eval and SFT apart): what
    row counts that carry no label score in this cell (module docstring). None when permutations is 0."""
    if not eval_rows or permutations <= 0:
        return None

    # keyed_acc's memoriser over the shuffled counts, computed per group (the rows of a group share their count)
    prior = label_prior(sft_rows)
    sft_answers: dict = defaultdict(Counter)
    for r in sft_rows:
        sft_answers[_group(r)][r["answer_text"]] += 1
    sft_count = dict(zip(map(_group, sft_rows), sft_counts))
    sft_groups = sorted(sft_answers, key=str)
    eval_by_group: dict = defaultdict(list)
    for r in eval_rows:
        eval_by_group[_group(r)].append((options(r), r["answer_text"]))
    eval_count = dict(zip(map(_group, eval_rows), eval_counts))
    eval_groups = sorted(eval_by_group, key=str)
    total = 1.0 + sum(prior.values())
    accs = []
    for _ in range(int(permutations)):
        s_vals, e_vals = [sft_count[g] for g in sft_groups], [eval_count[g] for g in eval_groups]
        rng.shuffle(s_vals)
        rng.shuffle(e_vals)
        seen: dict = defaultdict(Counter)
        for g, k in zip(sft_groups, s_vals):
            seen[k].update(sft_answers[g])
        hits = 0
        for g, k in zip(eval_groups, e_vals):
            c = seen.get(k)
            for opts, answer in eval_by_group[g]:
                score = {o: c.get(o, 0) + prior.get(o, 0) / total for o in opts} if c else prior
                hits += credit(opts, score, answer)
        accs.append(hits / len(eval_rows))
    accs.sort()
    return round(accs[min(len(accs) - 1, int(quantile * len(accs)))], 4)


def metadata_problems(cell: dict, ref: float, limits: dict, unchecked: bool = False) -> list[str]:
    """The model-facing metadata baselines past `ref` (the cell's reference, never below its label prior: a column
    that only repeats the label prior adds nothing; for the row count never below its null, `row_count_null`) by more
    than their limit (`metadata_over_reference`; the row count `row_count_over_reference`). unchecked: those whose limit is null instead, judged by metadata_over_reference."""
    out = []
    for col, acc in sorted((cell.get("metadata") or {}).items()):
        limit = limits["row_count_over_reference" if col == ROW_COUNT else "metadata_over_reference"]
        if unchecked:
            limit = limits["metadata_over_reference"] if limit is None else None
        base = max(ref, cell.get("label_prior") or 0.0, (cell.get("row_count_null") or 0.0) if col == ROW_COUNT else 0)
        if acc is None or limit is None or not model_facing(col) or acc - base <= float(limit) + 1e-9:
            continue
        what = "a unit's row count" if col == ROW_COUNT else f"column {col}"
        out.append(f"{what} alone scores {acc:.3f}, {acc - base:+.3f} over {base:.3f} (model-facing files show it)")
    return out
