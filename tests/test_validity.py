"""The validity audit: baselines a model without the images reaches, images shared between eval and SFT, T8/T9 frame
gaps, and the checks that fail when a family passes its configured limit (each planted here)."""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict

import numpy as np
import pytest

from pipeline.settings.config import load_settings
from pipeline.families.common import Spec, order_distractors
from pipeline.validity import audit, problems, write_report
from pipeline.validity.baselines import cell_baselines, options
from pipeline.validity.images import near_matches, phash_of_thumb

CFG = load_settings()
VCFG = CFG.validity


def _vcfg(values: dict):
    """configs/validity.yaml with `values` set (dotted key paths under `validity`), validated."""
    return CFG.with_values({f"validity.{k}": v for k, v in values.items()}).validity


PHASES = ["pre-approach", "approach", "contact", "hold and carry", "transfer", "release"]


def _row(
    i,
    split,
    answer,
    distractors,
    *,
    source="gm100",
    task="T1",
    question="Which phase?",
    frames=(10,),
    unit=None,
    hashes=None,
):
    rng = random.Random(i)
    opts = [answer, *distractors]
    rng.shuffle(opts)
    r = {
        "item_id": f"{split}{i}",
        "split": split,
        "source_slug": source,
        "task_id": task,
        "question": question,
        "num_choices": len(opts),
        "answer": "ABCDEF"[opts.index(answer)],
        "answer_text": answer,
        "frame_indices_json": json.dumps(list(frames)),
        "camera": "cam",
        "source_unit_id": unit or f"{split}u{i}",
        "image_hashes_json": json.dumps(hashes or [f"{split}{i}".ljust(64, "0")]),
    }
    for k, c in enumerate("ABCDEF"):
        r[f"choice_{c}"] = opts[k] if k < len(opts) else None
    return r


def _t1_rows(n, split, policy, seed=0):
    """Balanced answers; distractors from the real order_distractors under `policy`."""
    cfg = CFG.with_values(
        {
            "build.release_seed": 7,
            "tasks.T1.num_choices": 4,
            "tasks.T1.labels": {"default": {p: p for p in PHASES}},
            "tasks.T1.distractors": {"policy": policy, "order": PHASES},
        }
    )
    spec = Spec(cfg, "T1", "gm100")
    rows = []
    for i in range(n):
        ans = PHASES[i % len(PHASES)]
        rows.append(_row(i + seed, split, ans, order_distractors(spec, ans, f"{split}{i + seed}")))
    return rows


def _cell(report, source, family):
    return next(c for c in report["cells"] if (c["source"], c["family"]) == (source, family))


def test_uniform_distractors_leave_every_option_equally_likely():
    # P(answer = label | option set) measured over many balanced items: flat under `uniform`, not under `neighbours`
    def worst_share(policy):
        rows = _t1_rows(6000, "sft", policy)
        by_set = defaultdict(Counter)
        for r in rows:
            by_set[frozenset(options(r))][r["answer_text"]] += 1
        return max(max(c.values()) / sum(c.values()) for c in by_set.values() if sum(c.values()) >= 100)

    assert worst_share("uniform") < 0.25 + 0.08
    assert worst_share("neighbours") > 0.4  # four consecutive phases: the middle two are the likely answers


def test_leaky_distractors_fail_the_option_only_check():
    leak = audit(_t1_rows(1200, "eval", "neighbours"), _t1_rows(3000, "sft", "neighbours", 5000), VCFG)
    fair = audit(_t1_rows(1200, "eval", "uniform"), _t1_rows(3000, "sft", "uniform", 5000), VCFG)
    assert _cell(leak, "gm100", "T1")["option_only"] > 0.3
    assert any("gm100/T1: option-set-only" in p for p in problems(leak, VCFG))
    assert abs(_cell(fair, "gm100", "T1")["option_only"] - 0.25) < 0.03
    assert problems(fair, VCFG) == []


def test_question_that_names_the_answer_fails_the_blind_check():
    # the question text carries the answer (like T11's high-level action did): memoriser and bag of words find it
    labels = ["Grasp", "Lift", "Pull", "Push"]

    def rows(n, split, off):
        out = []
        for i in range(n):
            ans = labels[i % 4]
            out.append(
                _row(
                    i + off,
                    split,
                    ans,
                    [x for x in labels if x != ans],
                    source="reassemble",
                    task="T11",
                    question=f"Within the action 'step {labels.index(ans)}', what happens next?",
                )
            )
        return out

    rep = audit(rows(200, "eval", 0), rows(800, "sft", 1000), VCFG)
    c = _cell(rep, "reassemble", "T11")
    assert c["memoriser"] == 1.0 and c["bag_of_words"] > 0.9 and c["blind"] == 1.0
    assert c["random"] == 0.25 and c["majority_letter"] < 0.4
    assert any("reassemble/T11: blind text-only" in p for p in problems(rep, VCFG))


def test_unbalanced_labels_are_checked_against_the_label_prior():
    yes, no = "Yes — this operation will succeed", "No — this operation will fail"
    ev = [_row(i, "eval", yes if i % 10 else no, [no if i % 10 else yes], task="T7") for i in range(200)]
    sf = [_row(i, "sft", yes if i % 10 else no, [no if i % 10 else yes], task="T7") for i in range(1000, 1800)]
    rep = audit(ev, sf, VCFG)
    c = _cell(rep, "gm100", "T7")
    assert c["label_prior"] == 0.9 and c["eval_label_share"] == 0.9 and c["blind"] == 0.9
    assert problems(rep, VCFG) == []  # reported, and blind stays within 3 points of the prior
    strict = _vcfg({"balance_tolerance": 0.5})  # were the labels called balanced, the prior would count as a leak
    assert any("blind text-only" in p for p in problems(rep, strict))


def test_prior_below_random_is_not_the_reference():
    # eval labels unbalanced one way, SFT the other: the label prior scores below random, and a blind baseline a
    # little above that prior but at random level is no leak (release scale, rh20t/T3: blind 0.251, prior 0.217)
    def rows(n, split, off, common):
        out = []
        for i in range(n):
            ans = common if i % 5 < 2 else [x for x in "abcd" if x != common][i % 5 - 2]
            hint = i % 14 == 0  # one item in 14 names its answer
            out.append(
                _row(
                    i + off,
                    split,
                    ans,
                    [x for x in "abcd" if x != ans],
                    task="T3",
                    question=f"Which way, {ans}?" if hint else "Which way?",
                )
            )
        return out

    rep = audit(rows(420, "eval", 0, "a"), rows(1400, "sft", 1000, "d"), VCFG)
    c = _cell(rep, "gm100", "T3")
    assert c["eval_label_share"] > c["random"] + VCFG.balance_tolerance and c["label_prior"] < c["random"]
    assert c["label_prior"] + 0.03 < c["blind"] <= c["random"] + 0.03
    assert problems(rep, VCFG) == []


def test_small_cells_are_reported_not_checked():
    rep = audit(_t1_rows(20, "eval", "neighbours"), _t1_rows(3000, "sft", "neighbours", 5000), VCFG)
    assert _cell(rep, "gm100", "T1")["eval_n"] == 20
    assert problems(rep, VCFG) == []


def _thumb(seed):
    return np.random.default_rng(seed).integers(0, 256, (16, 16), dtype=np.uint8)


def test_phash_finds_near_duplicates_only():
    a = _thumb(1)
    brighter = np.clip(a.astype(int) + 6, 0, 255).astype(np.uint8)
    ha, hb, hc = (phash_of_thumb(t.tobytes().hex()) for t in (a, brighter, _thumb(2)))
    assert bin(ha ^ hb).count("1") <= 4 < bin(ha ^ hc).count("1")
    assert near_matches([ha, hc], [hb], 4) == [True, False]
    # the pigeonhole index agrees with brute force
    rng = random.Random(3)
    refs = [rng.getrandbits(64) for _ in range(300)]
    qs = [refs[i] ^ (1 << rng.randrange(64)) ^ (1 << rng.randrange(64)) for i in range(50)]
    qs += [rng.getrandbits(64) for _ in range(50)]
    brute = [any(bin(q ^ r).count("1") <= 4 for r in refs) for q in qs]
    assert near_matches(qs, refs, 4) == brute and all(brute[:50])


def test_shared_images_fail_the_image_check():
    ev, sf = _t1_rows(60, "eval", "uniform"), _t1_rows(300, "sft", "uniform", 5000)
    thumbs = {r["source_unit_id"]: _thumb(k).tobytes().hex() for k, r in enumerate(ev + sf)}
    ev[0]["image_hashes_json"] = sf[0]["image_hashes_json"]  # a pixel-identical image in both splits
    thumbs[ev[1]["source_unit_id"]] = thumbs[sf[1]["source_unit_id"]]  # and a near duplicate
    lookup = lambda source, unit, camera, index: thumbs.get(unit)
    cfg = _vcfg({"limits.exact_shared_fraction": 0.0, "limits.near_shared_fraction": 0.0})
    rep = audit(ev, sf, cfg, thumbs=lookup)
    img = _cell(rep, "gm100", "T1")["images"]
    assert img["exact_shared"] == 1 and img["near_shared"] >= 1 and img["frames_without_thumb"] == 0
    got = problems(rep, cfg)
    assert any("identical to an SFT image" in p for p in got) and any("near-duplicate" in p for p in got)
    ev[0]["image_hashes_json"] = json.dumps(["f" * 64])
    thumbs[ev[1]["source_unit_id"]] = _thumb(999).tobytes().hex()
    clean = audit(ev, sf, cfg, thumbs=lookup)
    assert _cell(clean, "gm100", "T1")["images"]["exact_shared"] == 0


def test_too_small_temporal_gap_fails():
    def rows(gap_frames, split, off):
        return [
            _row(
                i + off,
                split,
                "XYZ",
                ["XZY", "YXZ", "YZX", "ZXY", "ZYX"],
                task="T8",
                frames=(100, 100 + gap_frames, 100 + 3 * gap_frames),
            )
            for i in range(40)
        ]

    thumbs = lambda source, unit, camera, index: _thumb(index).tobytes().hex()
    fps = lambda source, unit: 10.0
    cfg = _vcfg({"temporal.min_median_gap_s": {"default": 2.0}})
    close = audit(rows(5, "eval", 0), rows(5, "sft", 100), cfg, thumbs=thumbs, fps_of=fps)
    t = _cell(close, "gm100", "T8")["temporal"]
    assert t["median_gap_s"] == 0.5 and t["n"] == 80 and t["median_visual_diff"] > 0
    assert any("median frame gap 0.5 s < 2.0 s" in p for p in problems(close, cfg))
    far = audit(rows(30, "eval", 0), rows(30, "sft", 100), cfg, thumbs=thumbs, fps_of=fps)
    assert not [p for p in problems(far, cfg) if "frame gap" in p]


def test_report_is_deterministic_and_path_free(tmp_path):
    ev, sf = _t1_rows(100, "eval", "uniform"), _t1_rows(400, "sft", "uniform", 5000)
    for d in ("a", "b"):
        rep = audit(ev, sf, VCFG)
        rep["problems"] = problems(rep, VCFG)
        write_report(rep, tmp_path / d)
    a, b = (tmp_path / "a" / "validity_report.json").read_text(), (tmp_path / "b" / "validity_report.json").read_text()
    assert a == b and str(tmp_path) not in a
    md = (tmp_path / "a" / "validity_report.md").read_text()
    assert "| gm100 | T1 | – | 100 |" in md and "## Problems" in md


def test_cell_baselines_majority_letter_and_prior():
    ev = [_row(i, "eval", "contact", ["approach"]) for i in range(10)]
    sf = [_row(i, "sft", "contact", ["approach"]) for i in range(100, 140)]
    c = cell_baselines(sf, ev)
    assert c["label_prior"] == 1.0 and c["random"] == 0.5 and c["eval_n"] == 10


@pytest.mark.parametrize("policy", ["uniform"])
def test_uniform_policy_is_seeded(policy):
    a, b = _t1_rows(50, "sft", policy), _t1_rows(50, "sft", policy)
    assert [options(r) for r in a] == [options(r) for r in b]


def test_run_validity_writes_the_report_into_the_release(tmp_path, capsys):
    import polars as pl

    from assets.cli import main
    from pipeline.settings.config import load_settings
    from pipeline.validity import run_validity

    rel, wd = tmp_path / "rel", tmp_path / "work"
    (rel / "splits").mkdir(parents=True)
    ev, sf = _t1_rows(60, "eval", "neighbours"), _t1_rows(600, "sft", "neighbours", 5000)
    pl.DataFrame(ev).write_parquet(rel / "splits" / "processbench_eval.parquet")
    pl.DataFrame(sf).write_parquet(rel / "splits" / "processdata_sft.parquet")
    summary = run_validity(load_settings(), release_dir=rel, work_dir=wd)
    assert any("gm100/T1: option-set-only" in p for p in summary["problems"])
    rep = json.loads((rel / "metadata" / "validity_report.json").read_text())
    assert rep["cells"][0]["images"]["frames_without_thumb"] == 660  # no frame cache: counted, never silent
    assert "## Problems" in (rel / "metadata" / "validity_report.md").read_text()
    # the command reads the release's fingerprint first: a folder that is not a release is one line, exit 2
    assert main(["validity", "--release", str(rel), "--work-dir", str(wd)]) == 2
    assert capsys.readouterr().out.strip().count("\n") == 0
    from pipeline.release.identity import stamp_release
    from pipeline.release.writers import write_checksums

    (rel / "metadata" / "provenance.json").write_text('{"builder_version": "processbench_build_v2"}\n')
    fp, _ = stamp_release(rel, load_settings())  # a release's identity stated, as the release step ends
    write_checksums(rel, load_settings())
    assert main(["validity", "--release", str(rel), "--work-dir", str(wd)]) == 1
    rep = json.loads((rel / "metadata" / "validity_report.json").read_text())
    assert rep["release_fingerprint"] == fp and f"`{fp}`" in (rel / "metadata" / "validity_report.md").read_text()
    (rel / "checksums.sha256").write_text("")
    run_validity(load_settings(), release_dir=rel, work_dir=wd)
    sums = (rel / "checksums.sha256").read_text()
    assert "  metadata/validity_report.json\n" in sums and "  metadata/validity_report.md\n" in sums


# ------------------------------------------------------------------------------------------ T12 on a realistic grammar


class _ChainContext:
    """The slice of pipeline.families.context.Context that t12_chain reads, for recordings planned by the sample
    REASSEMBLE generator (its chain grammar follows the real release: Pick / Insert / Remove / Place chains)."""

    def __init__(self, n_rec: int, fps: float = 30.0):
        from pipeline.labels.outcome import distinct_chain
        from upstream_adapters.samples.reassemble_plan import NO_ACTION, plan_recording

        self.units, self.segments, self.primitives = {}, {}, {}
        for r in range(n_rec):
            uid = f"rec{r:03d}"
            segs = plan_recording(np.random.default_rng(r), "release")
            rows, prims = [], []
            for i, s in enumerate(segs):
                lows = [(lw.text, int(lw.start * fps), int(lw.end * fps) - 1) for lw in s.low]
                chain = distinct_chain([t for t, _, _ in lows])
                rows.append(
                    {
                        "seg_index": i,
                        "text": s.text.rstrip("."),
                        "no_action": s.text == NO_ACTION,
                        "chain": [c[0] for c in chain],
                        "chain_start": [lows[c[1]][1] for c in chain],
                        "chain_end": [lows[c[2]][2] for c in chain],
                    }
                )
                prims += [{"text": t, "next_text": None} for t, _, _ in lows]
            self.segments[uid], self.primitives[uid] = rows, prims
            self.units[uid] = {"camera": "hand", "arm_type": "single", "num_frames": int(segs[-1].end * fps) + 10}
        self.unit_ids = sorted(self.units)

    def n(self, uid):
        return self.units[uid]["num_frames"]


def _t12_cells(template: dict, n_rec: int = 90, per_label: int = 200):
    """T12 candidates from the family generator under `template`, a label-balanced selection as the frames stage
    makes it, the option order of the release, and an eval / SFT split by recording (every third one eval)."""
    from pipeline.families.common import Spec
    from pipeline.families.primitives import t12_chain
    from pipeline.items.selection import select_candidates
    from pipeline.release.prompts import question_texts

    cfg = load_settings().with_values({"tasks.T12": template})
    pool = t12_chain(Spec(cfg, "T12", "reassemble"), _ChainContext(n_rec))
    pool = pool.with_columns(question=question_texts(pool, cfg))  # the text the release makes from the fields
    sel = select_candidates(pool, {"reassemble": {"T12": per_label * 6}}, 3, cfg_tasks=cfg.tasks)
    ev, sf = [], []
    for i, r in enumerate(sel.sort("candidate_key").to_dicts()):
        split = "eval" if int(r["unit_id"][3:]) % 3 == 0 else "sft"
        (ev if split == "eval" else sf).append(
            _row(
                i,
                split,
                r["answer_text"],
                r["distractors"],
                source="reassemble",
                task="T12",
                question=r["question"],
                unit=r["unit_id"],
            )
        )
    return pool, ev, sf


def test_t12_options_are_equally_likely_given_the_text():
    pool, ev, sf = _t12_cells(load_settings().tasks["T12"])
    assert pool["question"].n_unique() == 1  # the text names neither the high-level action nor the neighbours
    mids = {"Align", "Grasp", "Push", "Pull", "Nudge", "Twist"}  # the labels masked somewhere in the grammar
    assert set(pool["answer_text"]) == mids
    assert all(set(d) <= mids - {a} for a, d in zip(pool["answer_text"], pool["distractors"]))
    # each label, when offered, is the answer a quarter of the time (the text and the option set tell nothing more)
    offered, right = Counter(), Counter()
    for r in ev + sf:
        for o in options(r):
            offered[o] += 1
            right[o] += o == r["answer_text"]
    assert all(abs(right[o] / offered[o] - 0.25) < 0.03 for o in mids), {o: right[o] / offered[o] for o in mids}
    c = _cell(audit(ev, sf, VCFG), "reassemble", "T12")
    assert c["eval_n"] >= 300 and c["random"] == 0.25
    assert c["blind"] - 0.25 <= VCFG.limits.blind_over_random
    assert abs(c["option_only"] - 0.25) <= VCFG.limits.option_only_over_reference


def test_public_t12_is_answerable_from_its_text_and_fails_the_check():
    # the public template: high-level action and both neighbours named, the options from the item's own chain
    public = load_settings().tasks["T12"].model_dump()
    public.update(
        question={
            "default": "Within the high-level action '{high_action}', which action best fills [MASK] "
            "in this local chain: {prev} > [MASK] > {next}?"
        },
        distractors={**public["distractors"], "policy": "context", "exclude_neighbours": True},
        frames={"default": {"offsets": [-6, -3, 0, 3], "centers": [0.5], "margin_ratio": 0.15, "min_margin": 2}},
        balance_labels=False,
    )
    _, ev, sf = _t12_cells(public, per_label=40)
    rep = audit(ev, sf, VCFG)
    assert _cell(rep, "reassemble", "T12")["blind"] > 0.9
    assert any("reassemble/T12: blind text-only" in p for p in problems(rep, VCFG))


# ------------------------------------------------------------------------------------------------ issue 26
def test_a_leaking_model_facing_column_blocks_and_a_reconstruction_column_is_reported():
    """A column shown to models (split_group_id here) that carries the answer fails the audit; the same leak in a
    column only the reconstruction files carry (visual_ref) is reported, never blocking."""
    ev, sf = _t1_rows(300, "eval", "uniform"), _t1_rows(3000, "sft", "uniform", 5000)
    assert problems(audit(ev, sf, VCFG), VCFG) == []
    for rows in (ev, sf):
        for r in rows:
            r["visual_ref"] = f"gm100/episode/u/cam/{r['answer_text']}"
    rep = audit(ev, sf, VCFG)
    cell = _cell(rep, "gm100", "T1")
    assert cell["metadata"]["visual_ref"] == 1.0 and problems(rep, VCFG) == []
    assert "| visual_ref | 1.000 |" in __import__("pipeline.validity.report", fromlist=["x"]).render_markdown(rep)
    for rows in (ev, sf):
        for r in rows:
            r["split_group_id"] = f"g-{r['answer_text']}"
    got = problems(audit(ev, sf, VCFG), VCFG)
    assert any(p.startswith("gm100/T1: column split_group_id alone scores 1.000") for p in got), got
    assert not any("visual_ref" in p for p in got)


def test_frame_order_is_a_metadata_baseline():
    """T8-like: the answer is the display order, which the frame indices' rank pattern shows."""
    perms = ["XYZ", "XZY", "YXZ", "YZX", "ZXY", "ZYX"]

    def rows(n, split, seed):
        out = []
        for i in range(n):
            ans = perms[i % 6]
            frames = [100 * "XYZ".index(c) + (i % 50) for c in ans]
            out.append(_row(i + seed, split, ans, [p for p in perms if p != ans], task="T8", frames=frames))
        return out

    rep = audit(rows(240, "eval", 0), rows(1200, "sft", 5000), VCFG)
    cell = _cell(rep, "gm100", "T8")
    assert cell["metadata"]["frame_indices_json"] == 1.0 and cell["random"] < 0.2
    assert problems(rep, VCFG) == []  # frame_indices_json is not model-facing


def _t7_rows(n_units, split, seed):
    """Every window of a failing take (12), four of a succeeding one."""
    out = []
    for u in range(n_units):
        fail = u % 2 == 0
        for w in range(12 if fail else 4):
            r = _row(
                seed + u * 100 + w,
                split,
                "failure" if fail else "success",
                ["success" if fail else "failure"],
                task="T7",
                unit=f"{split}-u{u}",
            )
            r["split_group_id"] = f"{split}-u{u}"
            out.append(r)
    return out


def test_a_units_row_count_that_tells_the_outcome_blocks():
    """Every window of a failing take, four of a succeeding one: the row count answers T7."""
    ev, sf = _t7_rows(20, "eval", 0), _t7_rows(200, "sft", 10**6)
    rep = audit(ev, sf, VCFG)
    on = _vcfg({"limits.row_count_over_reference": 0.03})
    assert _cell(rep, "gm100", "T7")["metadata"]["row_count"] == 1.0
    assert any("gm100/T7: a unit's row count alone scores 1.000" in p for p in problems(rep, on))


def test_every_level_is_audited_with_its_own_limits():
    ev = _t1_rows(300, "eval", "neighbours")
    for i, r in enumerate(ev):
        r["eval_level"] = "L1" if i < 150 else "L2"
    sf = _t1_rows(3000, "sft", "neighbours", 5000)
    rep = audit(ev, sf, VCFG)
    assert [(c["level"], c["eval_n"]) for c in rep["cells"]] == [("L1", 150), ("L2", 150)]
    got = problems(rep, VCFG)
    assert any(p.startswith("gm100/T1/L1: option-set-only") for p in got)
    assert any(p.startswith("gm100/T1/L2: option-set-only") for p in got)
    lenient = _vcfg({"level_limits": {"L2": {"option_only_over_reference": 1.0}}})
    assert not any(p.startswith("gm100/T1/L2: option-set-only") for p in problems(rep, lenient))


def test_row_count_limit_can_be_reported_only():
    """row_count_over_reference: null reports the row count baseline without blocking (the column limits hold)."""
    from pipeline.validity import warnings
    from pipeline.validity.report import render_markdown

    rep = audit(_t7_rows(20, "eval", 0), _t7_rows(200, "sft", 10**6), VCFG)
    off = _vcfg({"limits.row_count_over_reference": None})
    assert _cell(rep, "gm100", "T7")["metadata"]["row_count"] == 1.0 and problems(rep, off) == []
    rep["warnings"] = warnings(rep, off)
    assert rep["warnings"] == [
        "gm100/T7: a unit's row count alone scores 1.000, +0.250 over 0.750 (model-facing "
        "files show it) (not blocking: its limit is null)"
    ]
    assert "## Warnings (reported, not blocking)" in render_markdown(rep)
    on = _vcfg({"limits.row_count_over_reference": 0.03})
    assert warnings(rep, on) == [] and len(problems(rep, on)) == 1


def test_held_out_levels_are_judged_against_their_own_prior():
    """An L2 cell leaning to one label (0.29 of 4 labels, within the balance tolerance): option-set-only scores that
    share, which passes in L2 (its prior, reported beside every score) and fails in L1 (balanced by construction)."""
    ev = []
    for i in range(200):
        ans = PHASES[0] if i < 58 else PHASES[1 + i % 3]
        ev.append(_row(i, "eval", ans, [p for p in PHASES[:4] if p != ans]))
    sf = [
        _row(
            10**5 + i,
            "sft",
            PHASES[0] if i < 40 else PHASES[1 + i % 3],
            [p for p in PHASES[:4] if p != (PHASES[0] if i < 40 else PHASES[1 + i % 3])],
        )
        for i in range(120)
    ]
    for level, blocked in (("L2", False), ("L1", True)):
        for r in ev:
            r["eval_level"] = level
        rep = audit(ev, sf, VCFG)
        c = _cell(rep, "gm100", "T1")
        assert c["eval_label_share"] == 0.29 and c["option_only"] == 0.29
        assert any("option-set-only" in p for p in problems(rep, VCFG)) is blocked


def test_run_validity_gates_the_step_track_when_the_release_has_step_files(tmp_path):
    """A release with T13 step files gets their blind gates in the report and its problems (a planted give-away word
    fails them); without step files the report has no step section."""
    import polars as pl

    from factories import synthetic_step_rows, write_step_files
    from pipeline.settings.config import load_settings
    from pipeline.validity import run_validity

    cfg = load_settings()
    rel, wd = tmp_path / "rel", tmp_path / "work"
    (rel / "splits").mkdir(parents=True)
    pl.DataFrame(_t1_rows(60, "eval", "uniform")).write_parquet(rel / "splits" / "processbench_eval.parquet")
    pl.DataFrame(_t1_rows(600, "sft", "uniform", 5000)).write_parquet(rel / "splits" / "processdata_sft.parquet")
    run_validity(cfg, release_dir=rel, work_dir=wd)
    assert "steps" not in json.loads((rel / "metadata" / "validity_report.json").read_text())
    write_step_files(
        rel,
        cfg,
        synthetic_step_rows(300, seed=1, giveaway="suddenly"),
        synthetic_step_rows(1200, split="sft", seed=2, giveaway="suddenly", start=10_000),
    )
    summary = run_validity(cfg, release_dir=rel, work_dir=wd)
    assert any(p.startswith("reassemble/T13/L1: blind step gate text_classifier") for p in summary["problems"])
    rep = json.loads((rel / "metadata" / "validity_report.json").read_text())
    assert rep["steps"]["cells"][0]["checked"] and rep["steps"]["cells"][0]["text_classifier"] > 0.95
    assert "## Step track (T13): blind gates" in (rel / "metadata" / "validity_report.md").read_text()


def _selected_t7_rows(equal: bool) -> tuple[list[dict], list[dict]]:
    """RH20T-T7-like pool (a failing unit offers 12 windows, a succeeding one 4, every window carries its unit's
    outcome) selected by pipeline.items.selection with or without equal_per_unit; units alternate between eval and SFT."""
    from pipeline.items import selection as I
    from pipeline.families.common import CANDIDATE_SCHEMA, columns_frame

    cols = {c: [] for c in CANDIDATE_SCHEMA}
    for u in range(120):
        lab = "failure" if u % 2 else "success"
        for w in range(12 if lab == "failure" else 4):
            vals = {
                "candidate_key": f"T7|rh20t|u{u:03d}|w{w}",
                "source": "rh20t",
                "unit_id": f"u{u:03d}",
                "task_id": "T7",
                "task_type_legacy": "T7",
                "input_type": "frame_sequence",
                "camera": "cam",
                "question_fields_json": "{}",
                "answer_text": lab,
                "distractors": ["success" if lab == "failure" else "failure"],
                "num_choices": 2,
                "frame_indices": [w, 100],
                "display_labels": None,
                "render_spec_json": None,
                "anchor_frame": w,
                "arm_type": None,
                "label_meta_json": "{}",
            }
            for c, v in vals.items():
                cols[c].append(v)
    pool = columns_frame(cols, CANDIDATE_SCHEMA)
    st = {"min_gap": 0, "balance_labels": True, "equal_per_unit": equal}
    sel = I.select_candidates(pool, I.Quotas({"T7": 720}, {"T7": st}), seed=3)
    ev, sf = [], []
    for i, r in enumerate(sel.sort("candidate_key").iter_rows(named=True)):
        split = "eval" if int(r["unit_id"][1:]) % 4 < 2 else "sft"
        row = _row(i, split, r["answer_text"], r["distractors"], source="rh20t", task="T7", unit=r["unit_id"])
        row["split_group_id"] = r["unit_id"]
        (ev if split == "eval" else sf).append(row)
    return ev, sf


def test_an_unequal_selection_fails_the_configured_row_count_limit():
    """The configured limit blocks (configs/validity.yaml): a selection taking a failing unit's 12 windows and a
    succeeding one's 4 lets the row count answer; equal_per_unit gives every unit the same count and passes."""
    assert VCFG.limits.row_count_over_reference is not None
    ev, sf = _selected_t7_rows(equal=False)
    rep = audit(ev, sf, VCFG)
    assert _cell(rep, "rh20t", "T7")["metadata"]["row_count"] == 1.0
    assert any("rh20t/T7: a unit's row count alone scores 1.000" in p for p in problems(rep, VCFG))
    ev, sf = _selected_t7_rows(equal=True)
    assert len({Counter(r["source_unit_id"] for r in ev + sf)[u] for u in {r["source_unit_id"] for r in ev}}) == 1
    rep = audit(ev, sf, VCFG)
    cell = _cell(rep, "rh20t", "T7")
    assert cell["metadata"]["row_count"] <= cell["label_prior"] + 1e-9
    assert problems(rep, VCFG) == []


def _chance_count_rows(n_groups, split, seed):
    """Groups of 2-6 items whose labels are drawn independently of the group's size (no leak)."""
    rng, out = random.Random(seed), []
    for g in range(n_groups):
        for w in range(rng.randint(2, 6)):
            ans = rng.choice(["moving", "stationary"])
            r = _row(
                seed * 10**4 + g * 10 + w,
                split,
                ans,
                ["stationary" if ans == "moving" else "moving"],
                task="T6",
                unit=f"{split}{seed}-g{g}",
            )
            r["split_group_id"] = r["source_unit_id"]
            out.append(r)
    return out


def test_row_counts_that_vary_by_chance_are_judged_against_their_null():
    """Twelve held-out groups of 2-6 items, labels independent of the group size: the row count memoriser clears the
    label prior by more than the limit in many draws (chance over few groups), never past its own null."""
    fixed = CFG.with_values({"validity.row_count_null": {"permutations": 0, "quantile": 0.99}}).validity
    alarms_fixed = alarms_null = 0
    for seed in range(15, 27):
        ev, sf = _chance_count_rows(12, "eval", seed), _chance_count_rows(150, "sft", 1000 + seed)
        alarms_fixed += any("row count" in p for p in problems(audit(ev, sf, fixed), fixed))
        rep = audit(ev, sf, VCFG)
        assert rep["cells"][0]["row_count_null"] >= rep["cells"][0]["label_prior"]
        alarms_null += any("row count" in p for p in problems(rep, VCFG))
    assert alarms_fixed >= 4 and alarms_null == 0


def test_tied_labels_earn_their_expectation_not_the_earliest_options():
    """Label-balanced SFT ties its labels; an eval file whose letter layout puts the answer first among the tied
    labels (planted: every item) would hand "the earliest tied option" 1.0. Each baseline earns the expected hit of a
    uniform tie-break instead (AIST T4 L2 at release scale: 0.291 by position luck, 0.246 expected)."""
    labels = ["both", "left", "right", "idle"]
    sft = [_row(i, "sft", labels[i % 4], [x for x in labels if x != labels[i % 4]]) for i in range(4 * 50 - 1)]
    ev = []
    for i in range(120):
        ans = labels[i % 3]  # never "idle", the one label SFT has one fewer of
        r = _row(10**5 + i, "eval", ans, [x for x in labels if x != ans])
        opts = [ans] + [x for x in labels if x != ans]  # the answer is letter A: first among the tied labels
        for k, c in enumerate("ABCD"):
            r[f"choice_{c}"] = opts[k]
        r["answer"] = "A"
        ev.append(r)
    b = cell_baselines(sft, ev)
    for name in ("label_prior", "option_only", "memoriser"):
        assert b[name] == pytest.approx(1 / 3, abs=1e-4), name
