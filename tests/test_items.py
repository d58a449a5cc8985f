"""Selection and choice assignment: quotas and their rounding, spread over units, min gap, label balance,
exclusion, reserve margin, shortfall, balanced answer letters, T8/T9 re-ordering, determinism."""

from __future__ import annotations

import copy
import itertools
import json
import math

import polars as pl
import pytest

from pipeline import items as I
from pipeline.config import load_config
from pipeline.families.common import CANDIDATE_SCHEMA, columns_frame
from pipeline.seeding import stable_hash
from test_families import _pool

CFG = load_config()


def _fake_pool(n_units=10, per_unit=30, task="T1", labels=("a", "b", "c", "d"), skew=None, k=4, gap=5,
               source="gm100") -> pl.DataFrame:
    """A hand-made pool: per unit, candidates every `gap` frames with labels cycling (or skewed)."""
    cols = {c: [] for c in CANDIDATE_SCHEMA}
    for u in range(n_units):
        for i in range(per_unit):
            lab = labels[(i if skew is None else (0 if i % skew else 1)) % len(labels)]
            cols["candidate_key"].append(f"{task}|{source}|u{u:03d}|f{i * gap}")
            cols["source"].append(source)
            cols["unit_id"].append(f"u{u:03d}")
            cols["task_id"].append(task)
            cols["task_type_legacy"].append(task)
            cols["input_type"].append("single_frame")
            cols["camera"].append("cam")
            cols["question"].append("Q?")
            cols["answer_text"].append(lab)
            cols["distractors"].append([x for x in labels if x != lab][: k - 1])
            cols["num_choices"].append(k)
            cols["frame_indices"].append([i * gap])
            cols["display_labels"].append(None)
            cols["render_spec_json"].append(None)
            cols["anchor_frame"].append(i * gap)
            cols["arm_type"].append(None)
            cols["label_meta_json"].append("{}")
    return columns_frame(cols, CANDIDATE_SCHEMA)


# ------------------------------------------------------------------------------------------ quotas


def test_quota_rounding():
    assert I.scale_quota(3000, 1.0) == 3000
    assert I.scale_quota(3000, 0.02) == 60
    assert I.scale_quota(286, 0.02) == 6      # 5.72 -> 6
    assert I.scale_quota(907, 0.02) == 18     # 18.14 -> 18
    assert I.scale_quota(25, 0.02) == 1       # 0.5 rounds half up
    assert I.scale_quota(75, 0.02) == 2       # 1.5 -> 2
    assert I.scale_quota(10, 0.02) == 1       # never 0 for a family the source has
    assert I.scale_quota(0, 0.5) == 0


def test_quotas_per_source_and_scale():
    rel = copy.deepcopy(CFG)
    rel["build"]["scale"] = "release"
    q = I.quotas(rel, "reassemble")
    assert list(q) == ["T1", "T2", "T5", "T6", "T7", "T8", "T9", "T10", "T11", "T12"]
    assert sum(q.values()) == 17165 and q["T12"] == 286
    assert sum(I.quotas(rel, s)[t] for s in ("gm100", "rh20t", "reassemble", "aist") for t in I.quotas(rel, s)) == 57892
    demo = copy.deepcopy(CFG)
    demo["build"]["scale"] = "demo"
    scale = demo["build"]["quota_scale"]["demo"]
    qd = I.quotas(demo, "aist")
    assert qd == {t: max(1, math.floor(v * scale + 0.5)) for t, v in I.quotas(rel, "aist").items()}
    assert qd.settings["T3"] == {"min_gap": CFG["tasks"]["T3"]["min_gap"]["aist"], "balance_labels": True}


# ------------------------------------------------------------------------------------------ selection


def test_select_quota_spread_and_gap():
    pool = _fake_pool(n_units=10, per_unit=30, gap=5)
    q = I.Quotas({"T1": 40}, {"T1": {"min_gap": 12, "balance_labels": False}})
    sel = I.select_candidates(pool, q, seed=42)
    assert sel.height == 40
    assert sel["select_rank"].sort().to_list() == list(range(40))
    per_unit = sel.group_by("unit_id").len()["len"]
    assert per_unit.max() - per_unit.min() <= 1  # round-robin: no unit dominates
    for _, g in sel.group_by("unit_id"):
        f = sorted(g["anchor_frame"].to_list())
        assert all(b - a >= 12 for a, b in zip(f, f[1:]))
    assert set(sel.columns) == set(pool.columns) | {"select_rank"}


def test_select_is_deterministic_and_seeded():
    pool = _fake_pool()
    q = {"T1": 25}
    a = I.select_candidates(pool, q, seed=1)
    b = I.select_candidates(pool.sample(fraction=1.0, shuffle=True, seed=9), q, seed=1)
    assert a.equals(b)  # input order does not matter
    c = I.select_candidates(pool, q, seed=2)
    assert set(a["candidate_key"]) != set(c["candidate_key"])


def test_select_extra_exclude_and_shortfall():
    pool = _fake_pool(n_units=3, per_unit=10)
    sel = I.select_candidates(pool, {"T1": 10}, seed=0, extra=0.2)
    assert sel.height == 12 and sel.filter(pl.col("select_rank") < 10).height == 10
    excl = set(sel["candidate_key"][:5])
    sel2 = I.select_candidates(pool, {"T1": 10}, seed=0, exclude_keys=frozenset(excl))
    assert not excl & set(sel2["candidate_key"]) and sel2.height == 10
    short = I.select_candidates(pool, {"T1": 50}, seed=0)
    assert short.height == 30  # never padded
    assert I.shortfall(short, {"T1": 50}) == [{"source": "gm100", "task_id": "T1", "quota": 50, "selected": 30,
                                              "missing": 20}]
    assert I.shortfall(sel, {"T1": 10}) == []
    assert I.shortfall(pool.clear(), {"T1": 3}, source="aist")[0]["missing"] == 3
    assert I.shortfall(short, {"gm100": {"T1": 40, "T2": 5}}) == [
        {"source": "gm100", "task_id": "T1", "quota": 40, "selected": 30, "missing": 10},
        {"source": "gm100", "task_id": "T2", "quota": 5, "selected": 0, "missing": 5}]


def test_select_balances_labels():
    pool = _fake_pool(n_units=8, per_unit=40, labels=("yes", "no"), k=2, skew=5)  # 80 % "yes"
    q = I.Quotas({"T1": 60}, {"T1": {"min_gap": 0, "balance_labels": True}})
    sel = I.select_candidates(pool, q, seed=3)
    counts = dict(sel.group_by("answer_text").len().iter_rows())
    assert counts == {"yes": 30, "no": 30}
    unbalanced = I.select_candidates(pool, {"T1": 60}, seed=3)
    assert dict(unbalanced.group_by("answer_text").len().iter_rows())["yes"] > 40
    # a label that runs out leaves the rest of the quota to the others
    q2 = I.Quotas({"T1": 200}, {"T1": {"min_gap": 0, "balance_labels": True}})
    sel2 = I.select_candidates(pool, q2, seed=3)
    assert sel2.height == 200 and dict(sel2.group_by("answer_text").len().iter_rows())["no"] == 64


def test_select_uses_template_settings_from_cfg_tasks():
    pool = _fake_pool(n_units=2, per_unit=40, gap=2)
    sel = I.select_candidates(pool, {"T1": 100}, seed=0, cfg_tasks=CFG["tasks"])  # T1 gm100 min_gap
    gap = CFG["tasks"]["T1"]["min_gap"]["gm100"]
    for _, g in sel.group_by("unit_id"):
        f = sorted(g["anchor_frame"].to_list())
        assert all(b - a >= gap for a, b in zip(f, f[1:]))


# ------------------------------------------------------------------------------------------ choices


@pytest.mark.parametrize("n,k", [(100, 4), (61, 2), (97, 3), (120, 6), (7, 4)])
def test_letter_balance(n, k):
    labels = tuple("abcdef"[:k]) if k > 2 else ("yes", "no")
    pool = _fake_pool(n_units=1, per_unit=n, labels=labels, k=k, skew=None)
    items = I.assign_choices(pool, seed=5)
    counts = items.group_by("answer").len()["len"].to_list()
    assert max(counts) - min(counts) <= 1 and len(counts) == min(n, k)
    share = I.letter_shares(items)["majority_share"][0]
    assert share <= math.ceil(n / k) / n
    if n >= 50:
        assert share - 1 / k <= 0.02
    for r in items.iter_rows(named=True):
        assert r["choices"][ "ABCDEF".index(r["answer"])] == r["answer_text"]
        assert sorted(r["choices"]) == sorted([r["answer_text"], *r["distractors"]])
        assert r["item_key"] == stable_hash(r["candidate_key"])


def test_assign_choices_deterministic_and_order_free():
    pool = _fake_pool(n_units=4, per_unit=20)
    a = I.assign_choices(pool, seed=11)
    b = I.assign_choices(pool.reverse(), seed=11)
    assert a.equals(b)
    c = I.assign_choices(pool, seed=12)
    assert a["answer"].to_list() != c["answer"].to_list()
    assert list(a.columns) == list(pool.columns) + ["item_key", "choices", "answer"]


@pytest.fixture(scope="module")
def temporal_items():
    _, _, pool = _pool("aist", n_units=3, n_frames=1000)
    pool = pool.filter(pl.col("task_id").is_in(["T8", "T9"]))
    return pool, I.assign_choices(pool, seed=42)


def test_t8_t9_canonical_options_and_reordered_frames(temporal_items):
    pool, items = temporal_items
    perms = ["".join(p) for p in itertools.permutations("XYZ")]
    before = {r["candidate_key"]: r for r in pool.iter_rows(named=True)}
    for r in items.iter_rows(named=True):
        f = r["frame_indices"]
        assert sorted(f) == sorted(before[r["candidate_key"]]["frame_indices"])  # same frames, maybe re-ordered
        spec = json.loads(r["render_spec_json"])
        assert spec["frame_indices"] == f and spec["labels"] == r["display_labels"]
        assert json.loads(r["label_meta_json"])["label"] == r["answer_text"]
        if r["task_id"] == "T8":
            assert r["choices"] == perms and r["display_labels"] == ["X", "Y", "Z"]
            truth = "".join("XYZ"[i] for i in sorted(range(3), key=lambda i: f[i]))
        else:
            assert r["choices"] == ["X", "Y"] and r["display_labels"] == ["X", "Y"]
            truth = "X" if f[0] < f[1] else "Y"
        assert r["answer_text"] == truth and r["choices"]["ABCDEF".index(r["answer"])] == truth
        assert sorted(r["distractors"] + [truth]) == sorted(r["choices"])
    shares = {row["task_id"]: row for row in I.letter_shares(items).iter_rows(named=True)}
    for t, k in (("T8", 6), ("T9", 2)):
        n = shares[t]["n"]
        assert shares[t]["majority_share"] <= math.ceil(n / k) / n


def test_select_then_assign_on_real_pool_is_deterministic():
    _, _, pool = _pool("rh20t", n_units=4, n_frames=600)
    q = I.quotas(CFG, "rh20t")
    a = I.assign_choices(I.select_candidates(pool, q, 42, extra=0.1), 42)
    b = I.assign_choices(I.select_candidates(pool, q, 42, extra=0.1), 42)
    assert a.equals(b)
    assert a["item_key"].is_unique().all()
    assert a["frame_indices"].to_list() == b["frame_indices"].to_list()


def test_replacement_round_respects_prior_picks():
    pool = _fake_pool(n_units=2, per_unit=40, gap=3, labels=("yes", "no"), k=2)
    q = I.Quotas({"T1": 10}, {"T1": {"min_gap": 10, "balance_labels": True}})
    first = I.select_candidates(pool, q, seed=4)
    dropped = set(first["candidate_key"][:3])  # say the visual gate drops three
    kept = first.filter(~pl.col("candidate_key").is_in(list(dropped)))
    more = I.select_candidates(pool, I.Quotas({"T1": 3}, q.settings), seed=4, exclude_keys=set(first["candidate_key"]),
                               prior=kept)
    assert more.height == 3 and not set(more["candidate_key"]) & set(first["candidate_key"])
    both = pl.concat([kept, more])
    for _, g in both.group_by("unit_id"):
        f = sorted(g["anchor_frame"].to_list())
        assert all(b - a >= 10 for a, b in zip(f, f[1:]))
    counts = dict(both.group_by("answer_text").len().iter_rows())
    assert abs(counts["yes"] - counts["no"]) <= 1
