"""Selection and choice assignment: quotas and their rounding, spread over units, min gap, label balance,
exclusion, reserve margin, shortfall, balanced answer letters (per group too), T8/T9 re-ordering, determinism."""

from __future__ import annotations

import itertools
import json
import math

import polars as pl
import pytest

import public_release_pins as pins
from factories import synthetic_pool
from pipeline.items import choices as C
from pipeline.items import selection as I
from pipeline.settings.config import load_settings
from pipeline.families.common import CANDIDATE_SCHEMA, columns_frame
from pipeline.core.seeding import stable_hash

CFG = load_settings()


def _lettered(pool: pl.DataFrame, seed: int) -> pl.DataFrame:
    """The frames stage's display order, then the split's letters over the whole pool."""
    return C.assign_letters(C.display_order(pool, seed), seed)


def _fake_pool(
    n_units=10, per_unit=30, task="T1", labels=("a", "b", "c", "d"), skew=None, k=4, gap=5, source="gm100"
) -> pl.DataFrame:
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
            cols["question_fields_json"].append("{}")
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
    assert I.scale_quota(286, 0.02) == 6  # 5.72 -> 6
    assert I.scale_quota(907, 0.02) == 18  # 18.14 -> 18
    assert I.scale_quota(25, 0.02) == 1  # 0.5 rounds half up
    assert I.scale_quota(75, 0.02) == 2  # 1.5 -> 2
    assert I.scale_quota(10, 0.02) == 1  # never 0 for a family the source has
    assert I.scale_quota(0, 0.5) == 0


def test_quotas_per_source_and_scale():
    rel = CFG.with_values({"build.scale": "release"})
    q = I.quotas(rel, "reassemble")
    assert list(q) == [t for t in rel.task_ids if t in q]  # task order
    assert {t: q[t] for t in pins.QUOTAS["reassemble"]} == pins.QUOTAS["reassemble"]  # the public release's quotas
    public = {s: {t: n for t, n in I.quotas(rel, s).items() if t in pins.TASK_NAMES} for s in pins.QUOTAS}
    assert sum(sum(q.values()) for q in public.values()) == pins.RELEASE_ITEMS
    demo = CFG.with_values({"build.scale": "demo"})
    scale = demo.build.quota_scale["demo"]
    qd = I.quotas(demo, "aist")
    assert qd == {t: max(1, math.floor(v * scale + 0.5)) for t, v in I.quotas(rel, "aist").items()}
    assert qd.settings["T3"] == {
        "min_gap": CFG.tasks["T3"].min_gap["aist"],
        "balance_labels": True,
        "equal_per_unit": False,
    }


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
    assert I.shortfall(short, {"T1": 50}) == [
        {"source": "gm100", "task_id": "T1", "quota": 50, "selected": 30, "missing": 20}
    ]
    assert I.shortfall(sel, {"T1": 10}) == []
    assert I.shortfall(pool.clear(), {"T1": 3}, source="aist")[0]["missing"] == 3
    assert I.shortfall(short, {"gm100": {"T1": 40, "T2": 5}}) == [
        {"source": "gm100", "task_id": "T1", "quota": 40, "selected": 30, "missing": 10},
        {"source": "gm100", "task_id": "T2", "quota": 5, "selected": 0, "missing": 5},
    ]


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
    sel = I.select_candidates(pool, {"T1": 100}, seed=0, cfg_tasks=CFG.tasks)  # T1 gm100 min_gap
    gap = CFG.tasks["T1"].min_gap["gm100"]
    for _, g in sel.group_by("unit_id"):
        f = sorted(g["anchor_frame"].to_list())
        assert all(b - a >= gap for a, b in zip(f, f[1:]))


# ------------------------------------------------------------------------------------------ choices


@pytest.mark.parametrize("n,k", [(100, 4), (61, 2), (97, 3), (120, 6), (7, 4)])
def test_letter_balance(n, k):
    labels = tuple("abcdef"[:k]) if k > 2 else ("yes", "no")
    pool = _fake_pool(n_units=1, per_unit=n, labels=labels, k=k, skew=None)
    items = _lettered(pool, seed=5)
    counts = items.group_by("answer").len()["len"].to_list()
    assert max(counts) - min(counts) <= 1 and len(counts) == min(n, k)
    share = C.letter_shares(items)["majority_share"][0]
    assert share <= math.ceil(n / k) / n
    if n >= 50:
        assert share - 1 / k <= 0.02
    for r in items.iter_rows(named=True):
        assert r["choices"]["ABCDEF".index(r["answer"])] == r["answer_text"]
        assert sorted(r["choices"]) == sorted([r["answer_text"], *r["distractors"]])
        assert r["item_key"] == stable_hash(r["candidate_key"])


def test_letters_deterministic_and_order_free():
    pool = _fake_pool(n_units=4, per_unit=20)
    a = _lettered(pool, seed=11)
    b = _lettered(pool.reverse(), seed=11)
    assert a.equals(b)
    c = _lettered(pool, seed=12)
    assert a["answer"].to_list() != c["answer"].to_list()
    assert list(a.columns) == list(pool.columns) + ["item_key", "choices", "answer"]


def test_the_frames_stage_assigns_no_letter():
    """Letters are assigned in one place, the split: the frames stage's table has an item key but no option order."""
    _, _, pool = synthetic_pool("aist", n_units=2, n_frames=800)
    out = C.display_order(pool, seed=42)
    assert "answer" not in out.columns and "choices" not in out.columns
    assert out["item_key"].to_list() == [stable_hash(k) for k in out["candidate_key"].to_list()]


def test_letters_balanced_within_each_group_and_t8_t9_letters_follow_their_frames():
    """assign_letters(within=("split",)) balances each split on its own (standard families); a T8/T9 row's letter is
    where its display order put the true order, whatever the group."""
    plain = _fake_pool(n_units=1, per_unit=90, k=4).with_columns(
        split=pl.Series(["eval" if i % 9 == 0 else "sft" for i in range(90)])
    )
    shown = C.display_order(plain, 3)
    out = C.assign_letters(shown, 3, within=("split",))
    for name in ("eval", "sft"):
        counts = out.filter(pl.col("split") == name).group_by("answer").len()["len"].to_list()
        assert max(counts) - min(counts) <= 1, name
    assert out["candidate_key"].to_list() == shown["candidate_key"].to_list()  # input order kept
    _, _, pool = synthetic_pool("aist", n_units=3, n_frames=1000)
    shown = C.display_order(pool.filter(pl.col("task_id").is_in(["T8", "T9"])), 42)
    whole = C.assign_letters(shown, 42)
    split = C.assign_letters(shown.with_columns(split=pl.lit("eval")), 42, within=("split",))
    assert whole["answer"].to_list() == split["answer"].to_list()
    # a row whose answer_text is not among its fixed options is refused, not lettered
    bad = shown.with_columns(answer_text=pl.lit("nowhere"))
    with pytest.raises(ValueError, match="bad option set"):
        C.assign_letters(bad, 42)


@pytest.fixture(scope="module")
def temporal_items():
    _, _, pool = synthetic_pool("aist", n_units=3, n_frames=1000)
    pool = pool.filter(pl.col("task_id").is_in(["T8", "T9"]))
    return pool, _lettered(pool, seed=42)


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
    shares = {row["task_id"]: row for row in C.letter_shares(items).iter_rows(named=True)}
    for t, k in (("T8", 6), ("T9", 2)):
        n = shares[t]["n"]
        assert shares[t]["majority_share"] <= math.ceil(n / k) / n


def test_select_then_assign_on_real_pool_is_deterministic():
    _, _, pool = synthetic_pool("rh20t", n_units=4, n_frames=600)
    q = I.quotas(CFG, "rh20t")
    a = _lettered(I.select_candidates(pool, q, 42, extra=0.1), 42)
    b = _lettered(I.select_candidates(pool, q, 42, extra=0.1), 42)
    assert a.equals(b)
    assert a["item_key"].is_unique().all()
    assert a["frame_indices"].to_list() == b["frame_indices"].to_list()


def test_replacement_round_respects_prior_picks():
    pool = _fake_pool(n_units=2, per_unit=40, gap=3, labels=("yes", "no"), k=2)
    q = I.Quotas({"T1": 10}, {"T1": {"min_gap": 10, "balance_labels": True}})
    first = I.select_candidates(pool, q, seed=4)
    dropped = set(first["candidate_key"][:3])  # say the visual gate drops three
    kept = first.filter(~pl.col("candidate_key").is_in(list(dropped)))
    more = I.select_candidates(
        pool, I.Quotas({"T1": 3}, q.settings), seed=4, exclude_keys=set(first["candidate_key"]), prior=kept
    )
    assert more.height == 3 and not set(more["candidate_key"]) & set(first["candidate_key"])
    both = pl.concat([kept, more])
    for _, g in both.group_by("unit_id"):
        f = sorted(g["anchor_frame"].to_list())
        assert all(b - a >= 10 for a, b in zip(f, f[1:]))
    counts = dict(both.group_by("answer_text").len().iter_rows())
    assert abs(counts["yes"] - counts["no"]) <= 1


# ------------------------------------------------------------------------------------------ coverage across families


def _independent_units(pool: pl.DataFrame, q: dict, seed: int) -> set[str]:
    """Units the old per-family selection (no shared coverage, no repair) would cover."""
    out = set()
    for (t,), g in sorted(pool.group_by("task_id"), key=lambda kv: kv[0]):
        mg, bal = q.settings[t]["min_gap"], q.settings[t]["balance_labels"]
        idx = I._select_family(
            g["candidate_key"].to_list(),
            g["unit_id"].to_list(),
            g["answer_text"].to_list(),
            g["anchor_frame"].to_list(),
            q[t],
            mg,
            bal,
            seed,
            ("gm100", t),
        )
        out |= {g["unit_id"][i] for i in idx}
    return out


def _unit_pool(unit: str, labels: tuple, per_unit=6, task="T1") -> pl.DataFrame:
    """One unit's candidates of one family, labels cycling (yes/no style: distractor = the other label)."""
    p = _fake_pool(n_units=1, per_unit=per_unit, task=task, labels=labels, k=2)
    return p.with_columns(
        unit_id=pl.lit(unit),
        candidate_key=pl.col("candidate_key").str.replace("u000", unit),
        distractors=pl.col("answer_text").replace_strict({"a": ["b"], "b": ["a"]}, return_dtype=pl.List(pl.String)),
    )


def _two_family_pool():
    pool = pl.concat(
        [
            _fake_pool(n_units=10, per_unit=12, task="T1"),
            _fake_pool(n_units=10, per_unit=12, task="T2", labels=("yes", "no"), k=2),
        ]
    )
    st = {"min_gap": 12, "balance_labels": True}
    return pool, I.Quotas({"T1": 6, "T2": 6}, {"T1": st, "T2": st})


def test_selection_covers_every_unit_across_families():
    pool, q = _two_family_pool()
    seed = 0
    assert len(_independent_units(pool, q, seed)) == 8  # picked family by family, two units got nothing
    sel = I.select_candidates(pool, q, seed)
    assert sel["unit_id"].n_unique() == 10
    assert dict(sel.group_by("task_id").len().iter_rows()) == {"T1": 6, "T2": 6}  # quotas exact
    per_unit = sel.group_by("unit_id").len()["len"]
    assert per_unit.min() == 1 and per_unit.max() == 2  # 12 items over 10 units: none dominates
    assert sel.group_by(["task_id", "unit_id"]).len()["len"].max() == 1
    for _, g in sel.group_by("task_id"):
        counts = g.group_by("answer_text").len()["len"]
        assert counts.max() - counts.min() <= 1  # labels still balanced
    for seed in range(8):  # for any seed
        s = I.select_candidates(pool, q, seed)
        assert s["unit_id"].n_unique() == 10 and s.height == 12
        for _, g in s.group_by(["task_id", "unit_id"]):
            f = sorted(g["anchor_frame"].to_list())
            assert all(b - a >= 12 for a, b in zip(f, f[1:]))


def test_selection_spreads_a_small_quota_over_distinct_units():
    pool, q = _two_family_pool()
    small = I.Quotas({"T1": 4, "T2": 4}, q.settings)  # 8 items, 10 units: 8 different units
    sel = I.select_candidates(pool, small, seed=3)
    assert sel.height == 8 and sel["unit_id"].n_unique() == 8


def test_coverage_repair_swaps_within_family_and_label():
    # A has both labels, B1..B3 only "a", C only "b"; quota 6 = 3 a + 3 b. The round-robin fills "a" from A and two
    # Bs when A comes early, leaving a B out; the repair hands A's "a" to it (A keeps its "b"s).
    pool = pl.concat(
        [
            _unit_pool("A", ("a", "b")),
            _unit_pool("B1", ("a",)),
            _unit_pool("B2", ("a",)),
            _unit_pool("B3", ("a",)),
            _unit_pool("C", ("b",)),
        ]
    )
    q = I.Quotas({"T1": 6}, {"T1": {"min_gap": 0, "balance_labels": True}})
    left_out = 0
    for seed in range(10):
        left_out += len(_independent_units(pool, q, seed)) < 5
        sel = I.select_candidates(pool, q, seed)
        assert sel["unit_id"].n_unique() == 5
        assert dict(sel.group_by("answer_text").len().iter_rows()) == {"a": 3, "b": 3}
        assert sorted(sel["select_rank"].to_list()) == list(range(6))
    assert left_out >= 5  # the repair did the work in most seeds


def test_coverage_repair_with_reserve_keeps_primary_ranks_covering():
    pool, q = _two_family_pool()
    sel = I.select_candidates(pool, q, seed=0, extra=0.5)
    assert dict(sel.group_by("task_id").len().iter_rows()) == {"T1": 9, "T2": 9}
    primary = sel.filter(pl.col("select_rank") < 6)
    assert primary["unit_id"].n_unique() == 10  # the items kept after trimming to the quota cover every unit


def test_coverage_is_impossible_when_balance_forbids_it():
    # 4 units, quota 4 = 2 a + 2 b, but "b" only in A: one of the a-only units must stay out; balance wins
    pool = pl.concat(
        [_unit_pool("A", ("a", "b")), _unit_pool("B1", ("a",)), _unit_pool("B2", ("a",)), _unit_pool("B3", ("a",))]
    )
    q = I.Quotas({"T1": 4}, {"T1": {"min_gap": 0, "balance_labels": True}})
    sel = I.select_candidates(pool, q, seed=1)
    assert sel.height == 4 and dict(sel.group_by("answer_text").len().iter_rows()) == {"a": 2, "b": 2}
    assert sel["unit_id"].n_unique() == 3


def test_prior_items_count_toward_coverage():
    pool, q = _two_family_pool()
    prior = (
        pool.filter((pl.col("task_id") == "T1") & pl.col("unit_id").is_in([f"u{u:03d}" for u in range(7)]))
        .group_by("unit_id")
        .first()
    )
    more = I.select_candidates(
        pool, I.Quotas({"T2": 3}, q.settings), seed=5, exclude_keys=set(prior["candidate_key"]), prior=prior
    )
    assert sorted(more["unit_id"].to_list()) == ["u007", "u008", "u009"]  # the units the earlier round left out
    again = I.select_candidates(
        pool, I.Quotas({"T1": 2, "T2": 1}, q.settings), seed=5, exclude_keys=set(prior["candidate_key"]), prior=prior
    )
    assert sorted(again["unit_id"].to_list()) == ["u007", "u008", "u009"]


def test_coverage_selection_is_deterministic_and_order_free():
    pool, q = _two_family_pool()
    a = I.select_candidates(pool, q, seed=7, extra=0.2)
    b = I.select_candidates(pool.sample(fraction=1.0, shuffle=True, seed=3), q, seed=7, extra=0.2)
    assert a.equals(b)
    assert not a.equals(I.select_candidates(pool, q, seed=8, extra=0.2))


def test_coverage_selection_is_independent_of_pythonhashseed(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    script = (
        "import sys; sys.path.insert(0, 'tests')\n"
        "import hashlib\n"
        "from pipeline.items import selection as I\n"
        "from test_items import _two_family_pool\n"
        "pool, q = _two_family_pool()\n"
        "s = I.select_candidates(pool, q, 11, extra=0.3)\n"
        "print(hashlib.sha256(s.select('candidate_key', 'select_rank').write_csv().encode()).hexdigest())\n"
    )
    root = Path(__file__).resolve().parents[1]
    outs = set()
    for hs in ("0", "12345"):
        env = {**__import__("os").environ, "PYTHONHASHSEED": hs}
        outs.add(
            subprocess.run(
                [sys.executable, "-c", script], cwd=root, env=env, check=True, capture_output=True, text=True
            ).stdout.strip()
        )
    assert len(outs) == 1


def _family(task, cands, quota, picked, min_gap=0, balance=True):
    """A _Family from [(unit, label, anchor)] candidates and the positions picked so far."""
    keys = [f"{task}|gm100|{u}|f{a}" for u, _, a in cands]
    return I._Family(
        task,
        keys,
        [u for u, _, _ in cands],
        [lab for _, lab, _ in cands],
        [a for _, _, a in cands],
        min_gap,
        balance,
        quota,
        list(picked),
    )


def test_repair_promotes_a_reserve_pick_of_an_uncovered_unit():
    f = _family("T1", [("A", "a", 0), ("A", "a", 10), ("B", "a", 0)], quota=2, picked=[0, 1, 2])  # B only in reserve
    cover = {"A": 2}
    assert I._repair_coverage([f], cover, seed=0, source="gm100") == 1
    assert f.picked == [0, 2, 1]  # B's pick and A's latest primary pick exchange ranks: nothing added or dropped
    assert cover == {"A": 1, "B": 1}


def test_repair_swaps_in_a_same_label_candidate_that_keeps_min_gap():
    cands = [("A", "a", 0), ("A", "a", 10), ("B", "b", 0), ("B", "a", 3), ("B", "a", 20), ("C", "b", 0)]
    # B's reserve pick is a "b" and no unit with two items has a primary "b": it cannot be promoted; B's "a" at 3 is
    # too close to its reserve pick (min_gap 5), the one at 20 replaces A's latest "a"
    f = _family("T1", cands, quota=3, picked=[0, 1, 5, 2], min_gap=5)
    cover = {"A": 2, "C": 1}
    assert I._repair_coverage([f], cover, seed=0, source="gm100") == 1
    assert f.picked == [0, 4, 5, 2] and cover == {"A": 1, "B": 1, "C": 1}
    # the only donor has one item: nothing to swap, B stays uncovered
    g = _family("T1", cands, quota=2, picked=[0, 5, 2], min_gap=5)
    assert I._repair_coverage([g], {"A": 1, "C": 1}, seed=0, source="gm100") == 0 and g.picked == [0, 5, 2]


def test_dealt_options_make_every_label_of_an_option_set_the_answer_equally_often():
    """Uniform distractors drawn per item leave each option set's answers balanced only on average (a guesser that
    knows only the option set scored 0.281 against 0.25 on 410 REASSEMBLE T1 eval items); dealt per file, each label
    of a set is its answer equally often, to one item, so such a guesser scores 1/k up to rounding."""
    from collections import Counter, defaultdict

    from pipeline.items.choices import deal_options
    from pipeline.core.seeding import py_rng

    labels = ["pre-approach", "approach", "contact", "hold and carry", "transfer", "release"]
    r = py_rng(3, "test")
    rows = []
    for i in range(600):
        a = labels[i % 6]
        rows.append(
            {
                "source": "reassemble",
                "task_id": "T1",
                "candidate_key": f"T1|reassemble|u|{i:04d}",
                "split": "eval" if (i // 6) % 3 == 0 else "sft",
                "num_choices": 4,
                "answer_text": a,
                "distractors": r.sample([x for x in labels if x != a], 3),
            }
        )
    items = pl.DataFrame(rows)

    def worst_spread(df):
        per_set = defaultdict(Counter)
        for row in df.iter_rows(named=True):
            per_set[(row["split"], frozenset([row["answer_text"], *row["distractors"]]))][row["answer_text"]] += 1
        return max(max(c[x] for x in s) - min(c[x] for x in s) for (_, s), c in per_set.items())

    assert worst_spread(items) >= 3  # the independent draw: some set's answers far apart
    dealt = deal_options(items, 7, {"T1"}, within=("split",))
    assert dealt.columns == items.columns and dealt["candidate_key"].to_list() == items["candidate_key"].to_list()
    assert all(
        len(d) == 3 and a not in d and set(d) <= set(labels) for a, d in zip(dealt["answer_text"], dealt["distractors"])
    )
    assert worst_spread(dealt) <= 1
    assert deal_options(items, 7, {"T1"}, within=("split",)).equals(dealt)  # deterministic
    assert deal_options(items, 7, {"T10"}, within=("split",)).equals(items)  # other families untouched


# ------------------------------------------------------------------------------------------ equal per unit


def _outcome_pool(n_success=7, n_failure=5, per_unit=16) -> pl.DataFrame:
    """RH20T T7 style: every unit's windows carry its own outcome (a unit's label is one of "a" / "b")."""
    units = [(f"s{u:02d}", ("a",)) for u in range(n_success)] + [(f"f{u:02d}", ("b",)) for u in range(n_failure)]
    return pl.concat([_unit_pool(u, labs, per_unit=per_unit) for u, labs in units])


@pytest.mark.parametrize("quota,extra", [(20, 0.0), (37, 0.0), (16, 0.5), (100, 0.0)])
def test_equal_per_unit_takes_the_same_number_from_every_unit(quota, extra):
    pool = _outcome_pool()
    st = {"min_gap": 0, "balance_labels": True, "equal_per_unit": True}
    for seed in range(5):
        sel = I.select_candidates(pool, I.Quotas({"T1": quota}, {"T1": st}), seed, extra=extra)
        per_unit = sel.group_by("unit_id").len()["len"].unique().to_list()
        assert len(per_unit) == 1, per_unit  # every unit used gives the same number of items
        target = math.ceil(quota * (1 + extra))
        assert sel.height <= target
        units = dict(sel.group_by("answer_text").agg(pl.col("unit_id").n_unique()).iter_rows())
        m = sum(units.values())
        assert units["b"] == min(5, m - m // 2) and units["a"] == m - units["b"]  # as even as the 5 "b" units allow
    # without the setting the same quotas give units unequal shares (the defect the setting removes)
    plain = I.select_candidates(pool, I.Quotas({"T1": 37}, {"T1": {**st, "equal_per_unit": False}}), 0)
    assert plain["unit_id"].value_counts()["count"].n_unique() > 1


def test_equal_per_unit_fills_the_quota_when_a_multiple_fits():
    pool = _outcome_pool(n_success=6, n_failure=6)  # 12 units x 16 windows
    st = {"min_gap": 0, "balance_labels": True, "equal_per_unit": True}
    sel = I.select_candidates(pool, I.Quotas({"T1": 40}, {"T1": st}), seed=2)
    assert sel.height == 40 and sel["unit_id"].n_unique() == 10  # k = 4 from 10 units (ties: the smaller k)
    assert dict(sel.group_by("answer_text").len().iter_rows()) == {"a": 20, "b": 20}
    assert I.shortfall(sel, {"T1": 40}, source="gm100") == []


def test_equal_per_unit_from_the_template():
    t = CFG.tasks["T7"]
    assert I._template_settings(t, "rh20t")[2] is True  # RH20T T7: a unit's windows share its outcome
    assert I._template_settings(t, "reassemble")[2] is False
    q = I.quotas(CFG, "rh20t")
    assert q.settings["T7"]["equal_per_unit"] is True


def test_a_shortfall_record_says_where_the_candidates_went():
    """Issue 40: the record of a short family gives its pool, its labels, what the visual gate and the spacing rule
    left out, and a sentence made of those figures (no text written per family)."""
    pool = _fake_pool(n_units=2, per_unit=10, gap=5)  # 20 candidates, 5 frames apart, labels a-d in turn
    q = I.Quotas({"T1": 30}, {"T1": {"min_gap": 12, "balance_labels": False, "equal_per_unit": False}})
    sel = I.select_candidates(pool, q, seed=0)
    (rec,) = I.shortfall(sel, q, source="gm100", pool=pool, unit_word="episode")
    assert 0 < sel.height < 20 and rec["near_selected"] == 20 - sel.height  # every other one is too close
    assert rec["reason"] == (
        f"its candidate pool holds only 20 items (a 6, b 6, c 4, d 4): {sel.height} taken, {20 - sel.height} lie "
        "within 12 frames of an item chosen from the same episode (min_gap)"
    )
    # a pool larger than the quota, one family's candidates rejected by the visual gate, the rest spaced out
    q = I.Quotas({"T1": 10}, {"T1": {"min_gap": 12, "balance_labels": False, "equal_per_unit": False}})
    (rec,) = I.shortfall(sel.head(6), q, source="gm100", pool=pool.head(12), gate_dropped={"T1": 2})
    assert rec["gate_dropped"] == 2 and rec["pool"] == 12 and rec["selected"] == 6
    assert rec["reason"].startswith("of its 12 candidates (a 4, b 4, c 2, d 2), 6 were taken and 2 failed the visual")
    # equal numbers per unit: what the gap and the gate do not explain is said to be that rule's
    q = I.Quotas({"T1": 15}, {"T1": {"min_gap": 0, "balance_labels": False, "equal_per_unit": True}})
    (rec,) = I.shortfall(pool.head(12), q, source="gm100", pool=pool, unit_word="recording")
    assert rec["reason"].endswith(
        "12 were taken and 8 were left out so that every recording gives the same number of items (equal_per_unit)"
    )
    # the whole pool taken
    (rec,) = I.shortfall(pool, {"T1": 25}, source="gm100", pool=pool)
    assert rec["reason"] == "its candidate pool holds only 20 items (a 6, b 6, c 4, d 4), all of them taken"
