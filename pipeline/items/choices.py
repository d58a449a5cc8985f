"""Answer options and letters: the frames stage fixes what a model sees, the split assigns the letters (one place).

    items = display_order(selected, seed)        # frames stage: item_key; T8/T9 frames in a balanced display order
    items = assign_letters(items, seed)          # split: choices + answer, balanced per (source, task_id)
    items = deal_options(items, seed, uniform_families, within=("split", "eval_level"))  # split: per release file
    items = assign_letters(items, seed, within=("split", "eval_level"))   # ... and the letters per release file

Letters come from a balanced list (each letter floor(n / k) or ceil(n / k) times) shuffled with a seeded RNG over the
rows of a group sorted by candidate_key, so the majority-letter share is at most ceil(n / k) / n.

* Standard families (no display_labels): the options are the distractors in a seeded order (keyed by the candidate
  key, so the same in every group) with the answer inserted at its letter. Nothing a model sees depends on the
  letter, so the split assigns it per (source, task_id, split, eval level): each eval file is balanced on its own.
* Labelled-frames families (`choice_order: canonical`, T8 and T9): the options are fixed (T8: XYZ, XZY, YXZ, YZX, ZXY,
  ZYX; T9: X, Y) and the frames shown are re-ordered so that the true order is the option at a balanced position
  (display_labels stay X, Y[, Z] in display order); frame_indices, render_spec_json and label_meta_json change
  together. The rendered images follow this order, so the frames stage fixes it (per (source, task_id)) before it
  hashes the images; the letter is then no choice but the position of answer_text among the fixed options, which
  `assign_letters` reads off.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter

import polars as pl

from pipeline.families.common import kendall, list_column
from pipeline.families.temporal import answer_for, canonical_choices
from pipeline.core.io import compact_json
from pipeline.release.schema import CHOICE_LETTERS
from pipeline.core.seeding import py_rng, rng, stable_hash

LETTER_COLUMNS = {"choices": pl.List(pl.String), "answer": pl.String}
_ROW = "__row"


def _balanced_letters(n: int, k: int, seed: int, key: tuple) -> list[int]:
    base = [i % k for i in range(n)]
    g = rng(seed, "letters", *key)
    perm = g.permutation(n)
    return [base[i] for i in perm]


def canonical_options(display_labels, num_choices: int) -> list[str]:
    """Fixed options of a labelled-frames family: the display labels (T9) or their permutations (T8)."""
    return canonical_choices({"display_labels": list(display_labels), "num_choices": int(num_choices)})


def _reorder_display(labels: list, frames: list, target_text: str) -> list[int]:
    """Frames in a display order whose labels, read in time order, give `target_text` (T8 perm / T9 label)."""
    chrono = sorted(frames)
    if len(labels) == 2:
        # T9: the target label sits on the earlier frame
        early, late = chrono
        return [early, late] if labels[0] == target_text else [late, early]
    disp = [None] * len(labels)
    for rank, lab in enumerate(target_text):
        disp[labels.index(lab)] = chrono[rank]
    return disp


def _in_order(items: pl.DataFrame, within: tuple[str, ...]) -> pl.DataFrame:
    """Rows sorted by (source, task order, *within, candidate_key), remembering their input position."""
    keys = [pl.col(c).cast(pl.String) for c in within]
    return (
        items.with_row_index(_ROW)
        .with_columns(_o=pl.col("task_id").str.slice(1).cast(pl.Int64))
        .sort(["source", "_o", *keys, "candidate_key"], nulls_last=True)
        .drop("_o")
    )


def _positions(df: pl.DataFrame, rows: list[bool], within: tuple[str, ...], seed: int) -> list[int | None]:
    """A balanced option position for each row flagged in `rows`, per (source, task_id, *within) group of `df`
    (sorted by _in_order); None elsewhere. The RNG key is (source, task_id) whatever the group."""
    gcols = [df.get_column(c).to_list() for c in ("source", "task_id", *within)]
    k_col = df.get_column("num_choices").to_list()
    out: list[int | None] = [None] * df.height
    groups: dict[tuple, list[int]] = {}
    for i in range(df.height):
        if rows[i]:
            groups.setdefault(tuple(g[i] for g in gcols), []).append(i)
    for key, idx in groups.items():
        for i, pos in zip(idx, _balanced_letters(len(idx), int(k_col[idx[0]]), seed, key[:2])):
            out[i] = pos
    return out


def display_order(items: pl.DataFrame, seed: int) -> pl.DataFrame:
    """Add item_key (stable hash of candidate_key); re-order the frames of rows with display_labels (T8, T9) so that
    the true order is the canonical option at a balanced position per (source, task_id) (module docstring).
    No letters: the split assigns them. Output sorted by (source, task, candidate_key)."""
    out_schema = {**dict(items.schema), "item_key": pl.String}
    if items.height == 0:
        return pl.DataFrame(schema=out_schema)
    df = _in_order(items, ()).drop(_ROW)
    cols = {
        c: df.get_column(c).to_list()
        for c in (
            "candidate_key",
            "num_choices",
            "display_labels",
            "frame_indices",
            "answer_text",
            "distractors",
            "render_spec_json",
            "label_meta_json",
        )
    }
    new = {
        c: list(cols[c]) for c in ("frame_indices", "answer_text", "distractors", "render_spec_json", "label_meta_json")
    }
    labelled = [v is not None for v in cols["display_labels"]]
    for i, pos in enumerate(_positions(df, labelled, (), seed)):
        if pos is None:
            continue
        ckey, labels, k = cols["candidate_key"][i], list(cols["display_labels"][i]), int(cols["num_choices"][i])
        options = canonical_options(labels, k)
        if len(options) != k:
            raise ValueError(f"{ckey}: canonical options {options} but num_choices {k}")
        target = options[pos]
        disp = _reorder_display(labels, list(cols["frame_indices"][i]), target)
        got = answer_for(disp, labels)
        if (got[0] if len(labels) == 2 else got) != target:
            raise AssertionError(f"{ckey}: display order gives {got}, wanted {target}")
        others = [c for c in options if c != target]
        if len(target) > 1:
            others.sort(key=lambda p: (kendall(p, target), p))
        new["frame_indices"][i], new["answer_text"][i], new["distractors"][i] = disp, target, others
        if new["render_spec_json"][i]:
            spec = json.loads(new["render_spec_json"][i])
            spec["frame_indices"] = disp
            new["render_spec_json"][i] = compact_json(spec)
        meta = json.loads(new["label_meta_json"][i] or "{}")
        meta["label"] = target
        new["label_meta_json"][i] = json.dumps(meta, sort_keys=True, separators=(",", ":"))
    new["item_key"] = [stable_hash(c) for c in cols["candidate_key"]]
    return df.with_columns([_series(name, values, out_schema[name]) for name, values in new.items()]).select(
        list(out_schema)
    )


def assign_letters(items: pl.DataFrame, seed: int, within: tuple[str, ...] = ()) -> pl.DataFrame:
    """Add (or replace) choices (len num_choices, letter order) and answer (letter), balanced per
    (source, task_id, *within) for standard families; labelled-frames rows (T8, T9) get their fixed options and the
    letter of their answer_text among them. Rows keep their input order."""
    base = items.drop([c for c in LETTER_COLUMNS if c in items.columns])
    out_schema = {**dict(base.schema), **LETTER_COLUMNS}
    if base.height == 0:
        return pl.DataFrame(schema=out_schema)
    df = _in_order(base, tuple(within))
    cols = {
        c: df.get_column(c).to_list()
        for c in ("candidate_key", "num_choices", "display_labels", "answer_text", "distractors")
    }
    plain = [v is None for v in cols["display_labels"]]
    choices: list[list[str]] = []
    answers: list[str] = []
    for i, pos in enumerate(_positions(df, plain, tuple(within), seed)):
        ckey, k, text = cols["candidate_key"][i], int(cols["num_choices"][i]), cols["answer_text"][i]
        if pos is None:  # labelled frames: the display order already put the answer at its option
            opts = canonical_options(cols["display_labels"][i], k)
            pos = opts.index(text) if text in opts else -1
        else:
            others = list(cols["distractors"][i])
            py_rng(seed, "choices", ckey).shuffle(others)
            opts = others[:pos] + [text] + others[pos:]
        if len(opts) != k or opts.count(text) != 1 or pos < 0:
            raise ValueError(f"{ckey}: bad option set {opts} for answer {text!r}")
        choices.append(opts)
        answers.append(CHOICE_LETTERS[pos])
    df = df.with_columns(
        list_column("choices", choices, LETTER_COLUMNS["choices"]), pl.Series("answer", answers, dtype=pl.String)
    )
    return df.sort(_ROW).drop(_ROW).select(list(out_schema))


def _series(name: str, values: list, dtype) -> pl.Series:
    return list_column(name, values, dtype) if isinstance(dtype, pl.List) else pl.Series(name, values, dtype=dtype)


def deal_options(items: pl.DataFrame, seed: int, families: set[str], within: tuple[str, ...] = ()) -> pl.DataFrame:
    """Re-deal the distractors of the `families` whose options are a uniform draw from a source-wide label pool
    (template `distractors.policy: uniform`), per (source, task_id, *within), so that within every option set each of
    its labels is the answer equally often (to one item). An independent draw per item gets there only on average:
    at a few hundred eval items a guesser that knows only the option set still scores a few points over 1/k by
    chance. The pool is every label the (source, family) shows, answers and distractors; each item, in a seeded
    order, takes the option set (its answer plus num_choices - 1 pool labels) in which its answer lags furthest behind
    the set's mean count, then the least used set, ties broken by a seeded hash.
    Images do not show options, so this changes no image; rows keep their input order."""
    if items.height == 0 or not families:
        return items
    df = _in_order(items, tuple(within))
    src, task = df.get_column("source").to_list(), df.get_column("task_id").to_list()
    answers, dis = df.get_column("answer_text").to_list(), df.get_column("distractors").to_list()
    ks, keys = df.get_column("num_choices").to_list(), df.get_column("candidate_key").to_list()
    wcols = [df.get_column(c).to_list() for c in within]
    pools: dict[tuple, set] = {}
    for i in range(df.height):
        if task[i] in families:
            pools.setdefault((src[i], task[i]), set()).update([answers[i], *(dis[i] or [])])
    groups: dict[tuple, list[int]] = {}
    for i in range(df.height):
        if task[i] in families:
            groups.setdefault((src[i], task[i], *(w[i] for w in wcols)), []).append(i)
    new = list(dis)
    for gkey, idx in groups.items():
        pool = sorted(pools[gkey[:2]])
        idx = sorted(idx, key=lambda i: stable_hash(seed, "deal", keys[i]))
        seen: dict[frozenset, Counter] = {}
        for i in idx:
            a, k = answers[i], int(ks[i])
            others = [x for x in pool if x != a]
            if len(others) < k - 1:
                continue  # not enough labels to choose from: keep the generator's draw

            def use(d: tuple) -> tuple:  # how far a runs ahead of its set's mean, then the set's use
                c = seen.get(frozenset((a, *d)))
                n = sum(c.values()) if c else 0
                return (k * c[a] - n if c else 0, n)

            combos = list(itertools.combinations(others, k - 1))
            uses = [use(d) for d in combos]
            least = min(uses)
            tied = [d for d, u in zip(combos, uses) if u == least]
            # ties broken by a seeded hash (only the tied sets are hashed: the same choice as hashing them all)
            best = tied[0] if len(tied) == 1 else min(tied, key=lambda d: stable_hash(seed, "deal", keys[i], *d))
            seen.setdefault(frozenset((a, *best)), Counter())[a] += 1
            new[i] = list(best)
    df = df.with_columns(list_column("distractors", new, items.schema["distractors"]))
    return df.sort(_ROW).drop(_ROW).select(items.columns)


def letter_shares(items: pl.DataFrame) -> pl.DataFrame:
    """Per (source, task_id): n, num_choices and the majority letter's share (for checks and reports)."""
    if items.height == 0:
        return pl.DataFrame(
            schema={
                "source": pl.String,
                "task_id": pl.String,
                "n": pl.Int64,
                "num_choices": pl.Int64,
                "majority_share": pl.Float64,
            }
        )
    counts = items.group_by(["source", "task_id", "answer"]).agg(c=pl.len(), k=pl.col("num_choices").first())
    return (
        counts.group_by(["source", "task_id"])
        .agg(
            n=pl.col("c").sum().cast(pl.Int64),
            num_choices=pl.col("k").first().cast(pl.Int64),
            majority_share=(pl.col("c").max() / pl.col("c").sum()),
        )
        .sort(["source", "task_id"])
    )
