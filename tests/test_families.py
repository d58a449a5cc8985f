"""Task families on hand-made IR: every family builds candidates whose question, choices, answer and frames
follow the YAML templates and the labels; determinism; candidate contract.

The hand-made IR (`synthetic_ir`) and its candidate pools (`synthetic_pool`) come from tests/factories.py."""

from __future__ import annotations

import itertools
import json

import numpy as np
import polars as pl
import pytest

import public_release_pins as pins
from factories import CAMERAS, synthetic_ir, synthetic_pool
from pipeline.settings.config import load_settings, read_task
from pipeline.families import GENERATORS, build_candidates, enabled_families
from pipeline.families.common import CANDIDATE_SCHEMA
from pipeline.release.prompts import question_texts
from pipeline.labels import compute_labels

CFG = load_settings()
SOURCES = list(CFG.build.sources)
FAMILIES_BY_SOURCE = {s: enabled_families(CFG, s) for s in SOURCES}  # from the configs: a new family joins in
# families the 4-unit hand-made IR cannot give: its RH20T units are each their own task, so no task has both
# outcomes (T7 takes success and failure from the same tasks: test_t7_outcome uses more units), and its one RH20T
# grasp lasts 45 s, longer than two of T8's largest gaps (three frames in three contact runs)
ABSENT_IN_HAND_MADE = {("rh20t", "T7"), ("rh20t", "T8")}


@pytest.fixture(scope="module")
def pools():
    return {s: synthetic_pool(s) for s in SOURCES}


def _rows(pool: pl.DataFrame, task: str, cfg=None) -> list[dict]:
    """The family's candidates with their question text, as the release step makes it from their fields."""
    return _with_questions(pool, cfg or CFG).filter(pl.col("task_id") == task).to_dicts()


def _with_questions(pool: pl.DataFrame, cfg) -> pl.DataFrame:
    return pool.with_columns(question_texts(pool, cfg))


def _label_at(labels, table: str, unit: str, frame: int, col: str, arm: str | None = None):
    df = labels[table].filter((pl.col("unit_id") == unit) & (pl.col("frame_index") == frame))
    if arm is not None:
        df = df.filter(pl.col("arm") == arm)
    return df[col].item()


# ------------------------------------------------------------------------------------------ templates


def test_templates_quotas_and_verbatim_questions():
    """The templates of the public release's twelve families keep its names, option counts, aliases, question texts
    and quotas (tests/public_release_pins.py); every template has a generator."""
    tasks = CFG.model_dump()["tasks"]  # the templates as their files spell them
    for source, qs in pins.QUOTAS.items():
        got = {t: tasks[t]["quota"][source] for t in pins.TASK_NAMES if source in tasks[t]["quota"]}
        assert got == qs, source
        assert sum(qs.values()) == pins.QUOTA_TOTALS[source]
    for (t, key), text in pins.QUESTIONS.items():  # T5 and T7 keep the public questions in their public variant
        tc = read_task(t, variant="public") if t in ("T5", "T7") else tasks[t]
        assert tc["question"][key] == text, (t, key)
    assert tasks["T2"]["labels"]["default"] == {"contact": "Yes — contact established", "no_contact": "No — no contact"}
    assert tasks["T3"]["labels"]["gm100"]["left"] == "toward the left side of the scene"
    assert {t: tasks[t]["num_choices"] for t in pins.NUM_CHOICES} == pins.NUM_CHOICES
    assert {t: tasks[t]["legacy_alias"] for t in pins.LEGACY_ALIASES} == pins.LEGACY_ALIASES
    assert {t: tasks[t]["task_name"] for t in pins.TASK_NAMES} == pins.TASK_NAMES  # docs/release-format.md
    for t, tc in tasks.items():
        assert set(tc["quota"]) == set(tc["sources"]) and t in GENERATORS


def test_frame_windows_match_reference():
    t = CFG.model_dump()["tasks"]
    assert t["T3"]["frames"]["gm100"]["offsets"] == [-10, -5, 0, 5]
    assert t["T3"]["frames"]["rh20t"]["offsets"] == [-20, -10, 0, 10]
    assert t["T4"]["frames"]["gm100"]["offsets"] == [-6, -3, 0, 3]
    assert t["T4"]["frames"]["aist"]["offsets"] == [-30, -15, 0, 15]
    public = {x: read_task(x, variant="public") for x in ("T5", "T7")}  # the public frames, kept as a variant
    assert public["T5"]["frames"]["default"]["offsets"] == t["T6"]["frames"]["default"]["offsets"] == [-6, -3, 0, 3, 6]
    assert t["T6"]["frames"]["reassemble"]["relative"] == [0.15, 0.325, 0.5, 0.675, 0.85]
    assert public["T7"]["frames"]["reassemble"]["relative"] == [0.10, 0.18, 0.26, 0.34]
    for s in ("gm100", "rh20t", "aist"):  # T3 windows are the label windows
        assert t["T3"]["frames"][s]["offsets"] == CFG.labels.direction.for_source(s).offsets
    assert t["T6"]["frames"]["default"]["offsets"] == CFG.labels.motion.window


# ------------------------------------------------------------------------------------------ pool contract


@pytest.mark.parametrize("source", SOURCES)
def test_pool_contract(pools, source):
    ir, labels, pool = pools[source]
    assert dict(pool.schema) == CANDIDATE_SCHEMA
    assert pool["candidate_key"].is_unique().all()
    assert pool["candidate_key"].to_list() == sorted(pool["candidate_key"].to_list())
    assert sorted(pool["task_id"].unique(), key=lambda t: int(t[1:])) == [
        t for t in FAMILIES_BY_SOURCE[source] if (source, t) not in ABSENT_IN_HAND_MADE
    ]
    nframes = dict(zip(ir["units"]["unit_id"], ir["units"]["num_frames"]))
    for r in _with_questions(pool, CFG).iter_rows(named=True):
        assert r["source"] == source and r["candidate_key"].startswith(f"{r['task_id']}|{source}|{r['unit_id']}|")
        assert len(r["distractors"]) == r["num_choices"] - 1 == CFG.tasks[r["task_id"]].num_choices - 1
        assert r["answer_text"] not in r["distractors"] and len(set(r["distractors"])) == len(r["distractors"])
        assert all(0 <= f < nframes[r["unit_id"]] for f in r["frame_indices"])
        assert len(set(r["frame_indices"])) == len(r["frame_indices"])
        assert r["camera"] == CAMERAS[source]
        assert "do the task" not in r["question"] and "{" not in r["question"]  # no task language, filled template
        json.loads(r["label_meta_json"])
        legacy = CFG.tasks[r["task_id"]].legacy_alias
        assert r["task_type_legacy"] == (legacy.get(source, legacy["default"]) if isinstance(legacy, dict) else legacy)
        if r["task_id"] in ("T8", "T9"):
            assert r["display_labels"] == list("XYZ"[: len(r["frame_indices"])])
            spec = json.loads(r["render_spec_json"])
            assert spec["frame_indices"] == r["frame_indices"] and spec["labels"] == r["display_labels"]
        elif r["task_id"] == "T5":  # the step view: numbered step frames, the query marked NOW
            spec = json.loads(r["render_spec_json"])
            assert r["display_labels"] is None and spec["frame_indices"] == r["frame_indices"]
            assert spec["labels"] == ["1", "2", "3", "4", "5", "NOW"]
        else:
            assert r["display_labels"] is None and r["render_spec_json"] is None
        if r["task_id"] not in ("T8", "T9"):
            fr = r["frame_indices"][:-1] if r["task_id"] == "T5" else r["frame_indices"]  # T5: the query last
            assert fr == sorted(fr), r["candidate_key"]  # time-ordered windows


def test_pools_are_deterministic():
    a = synthetic_pool("gm100", n_units=3, n_frames=400)[2]
    b = synthetic_pool("gm100", n_units=3, n_frames=400)[2]
    assert a.equals(b)
    a = synthetic_pool("reassemble", n_units=2)[2]
    b = synthetic_pool("reassemble", n_units=2)[2]
    assert a.equals(b)


# ------------------------------------------------------------------------------------------ per family


def test_t1_phase_matches_labels(pools):
    for source in ("gm100", "rh20t", "reassemble"):
        ir, labels, pool = pools[source]
        rows = _rows(pool, "T1")
        assert rows and {r["answer_text"] for r in rows} <= set(CFG.labels.phases)
        for r in rows[:50]:
            assert r["frame_indices"] == [r["anchor_frame"]]
            assert _label_at(labels, "frames", r["unit_id"], r["anchor_frame"], "phase") == r["answer_text"]
            assert r["question"] == pins.QUESTIONS[("T1", "default")]
        # distractors are a uniform draw: not always the answer's neighbours in process order (that leaked it)
        order = CFG.labels.phases
        spans = {
            max(order.index(x) for x in [r["answer_text"], *r["distractors"]])
            - min(order.index(x) for x in [r["answer_text"], *r["distractors"]])
            for r in rows
        }
        assert all(len(r["distractors"]) == 3 and r["answer_text"] not in r["distractors"] for r in rows)
        assert spans - {3}, source


def test_t2_contact(pools):
    ir, labels, pool = pools["gm100"]
    rows = _rows(pool, "T2")
    assert {r["answer_text"] for r in rows} == {"Yes — contact established", "No — no contact"}
    for r in rows:
        arm = json.loads(r["label_meta_json"])["arm"]
        assert r["question"] == f"Is the {arm} gripper currently in contact with anything?"
        c = _label_at(labels, "arms", r["unit_id"], r["anchor_frame"], "contact", arm)
        assert (r["answer_text"] == "Yes — contact established") == c
    for source in ("rh20t", "reassemble"):
        rows = _rows(pools[source][2], "T2")
        assert rows and all(r["question"] == pins.QUESTIONS[("T2", "default")] for r in rows)


def test_t3_direction(pools):
    for source, offs in (("gm100", [-10, -5, 0, 5]), ("rh20t", [-20, -10, 0, 10]), ("aist", [-30, -15, 0, 15])):
        ir, labels, pool = pools[source]
        rows = _rows(pool, "T3")
        assert rows, source
        texts = CFG.tasks["T3"].labels.get(source, CFG.tasks["T3"].labels["default"])
        inv = {v: k for k, v in texts.items()}
        for r in rows:
            assert r["frame_indices"] == [r["anchor_frame"] + o for o in offs]
            meta = json.loads(r["label_meta_json"])
            assert (
                _label_at(labels, "arms", r["unit_id"], r["anchor_frame"], "direction", meta["arm"])
                == inv[r["answer_text"]]
            )
            assert set(r["distractors"]) == set(texts.values()) - {r["answer_text"]}
            if source != "rh20t":
                assert f"the {meta['arm']} robot arm" in r["question"]
        # the question names the arm: an arm whose mapping lacks some of the four directions would be answerable in
        # part from the text (GM-100 right arm: left/right only; AIST left arm: no left), so it is not asked about
        arms = {json.loads(r["label_meta_json"])["arm"] for r in rows}
        assert arms == {"gm100": {"left"}, "rh20t": {"single"}, "aist": {"right"}}[source], source
        opposite = {"left": "right", "right": "left", "up": "down", "down": "up"}
        r = rows[0]
        assert r["distractors"][0] == texts[opposite[inv[r["answer_text"]]]]


def test_t3_offsets_must_match_label_window():
    cfg = CFG.with_values({"tasks.T3.frames.rh20t.offsets": [-10, -5, 0, 5]})
    with pytest.raises(ValueError, match="label window"):
        synthetic_pool("rh20t", n_units=1, n_frames=300, cfg=cfg)


def test_t4_coordination(pools):
    for source, offs in (("gm100", [-6, -3, 0, 3]), ("aist", [-30, -15, 0, 15])):
        ir, labels, pool = pools[source]
        rows = _rows(pool, "T4")
        assert rows, source
        types = dict(zip(labels["units"]["unit_id"], labels["units"]["arm_type"]))
        texts = CFG.tasks["T4"].labels["default"]
        inv = {v: k for k, v in texts.items()}
        for r in rows:
            assert r["frame_indices"] == [r["anchor_frame"] + o for o in offs]
            window = labels["frames"].filter(
                (pl.col("unit_id") == r["unit_id"]) & pl.col("frame_index").is_in(r["frame_indices"])
            )["coord"]
            assert set(window) == {inv[r["answer_text"]]}  # one stable state over the whole window
            if source == "gm100":
                assert types[r["unit_id"]] in ("bimanual_sync", "bimanual_sequential")
                assert r["arm_type"] == types[r["unit_id"]]
            else:
                assert r["arm_type"] is None


def test_t5_progress(pools):
    """Step view: frames 1-5 span the named step start -> end, the last frame (NOW) is the query inside it."""
    texts = CFG.tasks["T5"].labels["default"]
    for source in ("gm100", "rh20t", "reassemble"):
        ir, labels, pool = pools[source]
        rows = _rows(pool, "T5")
        assert {r["answer_text"].split()[0] for r in rows} == {"Early", "Middle", "Late"}, source
        steps = {(r["unit_id"], r["step_id"]): r for r in labels["steps"].to_dicts()}
        for r in rows:
            meta = json.loads(r["label_meta_json"])
            st = steps[(r["unit_id"], meta["step_id"])]
            f = r["frame_indices"]
            assert f[0] == st["start_frame"] and f[4] == st["end_frame"] and f[:5] == sorted(f[:5])
            assert st["start_frame"] < f[5] == r["anchor_frame"] < st["end_frame"]
            assert json.loads(r["render_spec_json"])["labels"] == ["1", "2", "3", "4", "5", "NOW"]
            prog = _label_at(labels, "frames", r["unit_id"], r["anchor_frame"], "progress")
            assert r["answer_text"] == texts[prog]
            if source == "reassemble":  # the step is named: REASSEMBLE's high-level action
                assert f"({st['text'].rstrip('.')})" in r["question"]


def test_t5_public_variant(pools):
    cfg = CFG.with_values({"tasks.T5": read_task("T5", variant="public")})
    ir, labels, _ = pools["gm100"]
    rows = _rows(build_candidates("gm100", ir, labels, cfg), "T5", cfg)
    assert rows
    for r in rows[:60]:
        assert r["frame_indices"] == [r["anchor_frame"] + o for o in (-6, -3, 0, 3, 6)]
        assert r["render_spec_json"] is None and r["question"] == pins.QUESTIONS[("T5", "default")]
        fr = labels["frames"].filter(
            (pl.col("unit_id") == r["unit_id"]) & pl.col("frame_index").is_in(r["frame_indices"])
        )
        assert fr["step_id"].n_unique() == 1 and fr["step_id"].null_count() == 0


def test_t6_motion(pools):
    ir, labels, pool = pools["aist"]
    rows = _rows(pool, "T6")
    assert {r["answer_text"] for r in rows} == set(CFG.tasks["T6"].labels["aist"].values())
    for r in rows:
        arm = json.loads(r["label_meta_json"])["arm"]
        assert (
            r["question"] == f"Across these time-ordered frames, is the {arm} robot arm actively moving or stationary?"
        )
        assert r["frame_indices"] == [r["anchor_frame"] + o for o in (-6, -3, 0, 3, 6)]
    ir, labels, pool = pools["reassemble"]
    rows = _rows(pool, "T6")
    assert rows and all(r["question"] == pins.QUESTIONS[("T6", "default")] for r in rows)
    arms = labels["arms"]
    for r in rows:
        f = r["frame_indices"]
        assert len(f) == 5 and f == sorted(f) and len(set(f)) == 5
        sp = arms.filter((pl.col("unit_id") == r["unit_id"]) & pl.col("frame_index").is_in(f))
        m = float(np.mean(sp["speed_s"].to_numpy()))
        moving = r["answer_text"].startswith("Actively")
        assert (m >= sp["move_thr"][0]) if moving else (m <= sp["still_thr"][0])


def test_t7_outcome(pools):
    """Recognition: the frames reach the decisive moment; RH20T units in equal success/failure numbers per task,
    each giving the same number of windows."""
    ir, labels, pool = synthetic_pool("rh20t", n_units=15, n_frames=300)  # tasks i % 5, ratings i % 6: mixed outcomes
    rows = _rows(pool, "T7")
    units = {r["unit_id"]: r for r in labels["units"].to_dicts()}
    tasks = dict(zip(ir["units"]["unit_id"], ir["units"]["task_id"]))
    per_unit = {}
    for r in rows:
        per_unit[r["unit_id"]] = per_unit.get(r["unit_id"], 0) + 1
        assert (
            r["answer_text"]
            == {"success": "Yes — this episode succeeded", "failure": "No — this episode failed"}[
                units[r["unit_id"]]["outcome"]
            ]
        )
        assert r["frame_indices"][-1] == units[r["unit_id"]]["num_frames"] - 3  # the episode's end (min_margin 2)
    want = CFG.tasks["T7"].frames["rh20t"].windows_per_unit
    assert rows and set(per_unit.values()) == {want}
    by_task = {}
    for u in per_unit:
        by_task.setdefault(tasks[u], []).append(units[u]["outcome"])
    assert all(o.count("success") == o.count("failure") for o in by_task.values())
    ir, labels, pool = pools["reassemble"]
    rows = _rows(pool, "T7")
    segs = {(s["unit_id"], s["seg_index"]): s for s in labels["segments"].to_dicts()}
    assert any(r["answer_text"].startswith("No") for r in rows)
    for r in rows:
        s = segs[(r["unit_id"], json.loads(r["label_meta_json"])["segment"])]
        assert not s["no_action"] and r["answer_text"].startswith("Yes" if s["success"] else "No")
        assert s["start_frame"] <= r["frame_indices"][0] and r["frame_indices"][-1] == s["end_frame"]


def test_t7_public_variant(pools):
    cfg = CFG.with_values({"tasks.T7": read_task("T7", variant="public")})
    ir, labels, _ = pools["reassemble"]
    rows = _rows(build_candidates("reassemble", ir, labels, cfg), "T7", cfg)
    segs = {(s["unit_id"], s["seg_index"]): s for s in labels["segments"].to_dicts()}
    assert rows
    for r in rows:  # early frames only: the public forecast
        s = segs[(r["unit_id"], json.loads(r["label_meta_json"])["segment"])]
        assert r["frame_indices"][-1] <= s["start_frame"] + 0.4 * (s["end_frame"] - s["start_frame"])
    ir, labels, _ = pools["rh20t"]
    rows = _rows(build_candidates("rh20t", ir, labels, cfg), "T7", cfg)
    assert rows and all(max(r["frame_indices"]) < 0.4 * 1200 for r in rows)


def test_t8_t9_temporal(pools):
    for source in SOURCES:
        ir, labels, pool = pools[source]
        for r in _rows(pool, "T8"):
            f = r["frame_indices"]
            order = "".join("XYZ"[i] for i in sorted(range(3), key=lambda i: f[i]))
            assert r["answer_text"] == order
            assert sorted(r["distractors"] + [order]) == sorted("".join(p) for p in itertools.permutations("XYZ"))
            assert r["anchor_frame"] == sorted(f)[1]
        for r in _rows(pool, "T9"):
            f = r["frame_indices"]
            assert r["answer_text"] == ("X" if f[0] < f[1] else "Y") and r["distractors"] == [
                "Y" if r["answer_text"] == "X" else "X"
            ]
            assert json.loads(r["render_spec_json"])["kind"] == "panels"
    segs = pools["reassemble"][1]["segments"].filter(~pl.col("no_action") & pl.col("success"))
    mids = set(((segs["start_frame"] + segs["end_frame"]) // 2).to_list())
    assert all(set(r["frame_indices"]) <= mids for r in _rows(pools["reassemble"][2], "T8"))
    # a visible change of state: consecutive frames (in time) lie in different contact runs
    from pipeline.families.temporal import contact_runs

    for source in ("gm100", "rh20t"):  # state_change: contact (REASSEMBLE, AIST: the gate's pixel distance)
        ir, labels, pool = pools[source]
        arms = labels["arms"]
        for task in ("T8", "T9"):
            rows = _rows(pool, task)
            assert rows or (source, task) in ABSENT_IN_HAND_MADE, (source, task)
            for r in rows:
                a = arms.filter(pl.col("unit_id") == r["unit_id"]).sort("arm", "frame_index")
                runs = contact_runs([g["contact"].to_list() for _, g in a.group_by("arm", maintain_order=True)])
                f = sorted(r["frame_indices"])
                assert all(runs[x] != runs[y] for x, y in zip(f, f[1:])), (source, task, f)


# ------------------------------------------------------------------------------------------ REASSEMBLE primitives


def _reassemble_ir() -> dict[str, pl.DataFrame]:
    """One recording: No action 0-99; Pick round peg 1 100-399 (Approach, Grasp, Lift); Insert round peg 1 400-799
    (Approach, Align, Align, Push, Release), failed; Place BNC 800-1199 (Approach, Nudge, Release)."""
    ir = synthetic_ir("reassemble", n_units=1, n_frames=1200)
    uid = ir["units"]["unit_id"][0]
    rows = []

    def seg(level, idx, parent, text, s, e, ok=True):
        rows.append(
            {
                "source": "reassemble",
                "unit_id": uid,
                "level": level,
                "seg_index": idx,
                "parent_index": parent,
                "text": text,
                "start_frame": s,
                "end_frame": e,
                "start_sec": s / 30,
                "end_sec": e / 30,
                "success": ok,
            }
        )

    seg("high", 0, None, "No action.", 0, 99)
    seg("high", 1, None, "Pick round peg 1.", 100, 399)
    for j, (t, s, e) in enumerate([("Approach", 100, 199), ("Grasp", 200, 299), ("Lift", 300, 399)]):
        seg("low", j, 1, t, s, e)
    seg("high", 2, None, "Insert round peg 1.", 400, 799, ok=False)
    for j, (t, s, e) in enumerate(
        [("Approach", 400, 479), ("Align", 480, 559), ("Align", 560, 639), ("Push", 640, 719), ("Release", 720, 799)]
    ):
        seg("low", j, 2, t, s, e)
    seg("high", 3, None, "Place BNC.", 800, 1199)
    for j, (t, s, e) in enumerate([("Approach", 800, 929), ("Nudge", 930, 1059), ("Release", 1060, 1199)]):
        seg("low", j, 3, t, s, e)
    ir["segments"] = pl.DataFrame(rows, schema=ir["segments"].schema)
    return ir


@pytest.fixture(scope="module")
def reassemble_pool():
    ir = _reassemble_ir()
    labels = compute_labels("reassemble", ir, CFG)
    return ir, labels, build_candidates("reassemble", ir, labels, CFG)


def test_t10_current_primitive(reassemble_pool):
    ir, labels, pool = reassemble_pool
    rows = _rows(pool, "T10")
    got = {
        (json.loads(r["label_meta_json"])["parent_index"], json.loads(r["label_meta_json"])["seg_index"]): r[
            "answer_text"
        ]
        for r in rows
    }
    assert got[(1, 1)] == "Grasp" and got[(2, 3)] == "Push" and got[(3, 1)] == "Nudge"
    for r in rows:
        assert r["question"] == pins.QUESTIONS[("T10", "default")]
        assert r["frame_indices"] == [r["anchor_frame"] + o for o in (-6, -3, 0, 3)]
        assert len(r["choices"] if "choices" in r else r["distractors"]) == 3
    used = {"Approach", "Grasp", "Lift", "Align", "Push", "Release", "Nudge"}  # the labels the source uses
    for r in rows:
        assert set(r["distractors"]) <= used - {r["answer_text"]}
    r = next(r for r in rows if r["answer_text"] == "Grasp")
    assert 200 <= r["frame_indices"][0] and r["frame_indices"][-1] <= 299


def test_t11_next_primitive(reassemble_pool):
    ir, labels, pool = reassemble_pool
    rows = _rows(pool, "T11")
    pairs = {(json.loads(r["label_meta_json"])["current"], r["answer_text"], r["question"]) for r in rows}
    q = pins.QUESTIONS[
        ("T11", "default")
    ]  # the high-level action is no longer named: with the options it gave the answer
    assert ("Approach", "Grasp", q) in pairs
    assert ("Align", "Push", q) in pairs  # the next DISTINCT label
    assert all(cur != ans for cur, ans, _ in pairs)
    nexts = {"Grasp", "Lift", "Align", "Push", "Release", "Nudge"}  # labels that follow some primitive
    for r in rows:
        assert set(r["distractors"]) <= nexts - {r["answer_text"]} and len(r["distractors"]) == 3
    assert not [r for r in rows if json.loads(r["label_meta_json"])["current"] == "Lift"]  # last of its chain


def test_t12_chain_restoration(reassemble_pool):
    ir, labels, pool = reassemble_pool
    rows = _rows(pool, "T12")
    got = {
        (json.loads(r["label_meta_json"])["prev"], r["answer_text"], json.loads(r["label_meta_json"])["next"])
        for r in rows
    }
    assert got == {
        ("Approach", "Grasp", "Lift"),
        ("Approach", "Align", "Push"),
        ("Align", "Push", "Release"),
        ("Approach", "Nudge", "Release"),
    }
    mids = {"Grasp", "Align", "Push", "Nudge"}  # the labels masked somewhere in the source
    runs = {
        "Approach": [(100, 199), (400, 479), (800, 929)],
        "Grasp": [(200, 299)],
        "Align": [(480, 639)],
        "Push": [(640, 719)],
        "Lift": [(300, 399)],
        "Release": [(720, 799), (1060, 1199)],
        "Nudge": [(930, 1059)],
    }

    def inside(f, label):
        return any(lo <= f <= hi for lo, hi in runs[label])

    for r in rows:
        meta = json.loads(r["label_meta_json"])
        assert r["question"] == pins.QUESTIONS[("T12", "default")]  # names neither the action nor the neighbours
        assert sorted(r["distractors"]) == sorted(mids - {r["answer_text"]})  # neighbours may be offered
        f = r["frame_indices"]
        assert f == sorted(f) and len(f) == 4 and f[1:3] == [r["anchor_frame"] - 3, r["anchor_frame"] + 3]
        assert inside(f[0], meta["prev"]) and inside(f[1], r["answer_text"]) and inside(f[2], r["answer_text"])
        assert inside(f[3], meta["next"])


def test_reassemble_phase_contact_and_outcome(reassemble_pool):
    ir, labels, pool = reassemble_pool
    t1 = {r["anchor_frame"]: r["answer_text"] for r in _rows(pool, "T1")}
    for f, want in (
        (50, "pre-approach"),
        (150, "approach"),
        (250, "contact"),
        (350, "hold and carry"),
        (440, "transfer"),
        (760, "release"),
    ):
        near = [a for a in t1 if abs(a - f) <= 40 and t1[a] == want]
        assert near, (f, want)
    t7 = {json.loads(r["label_meta_json"])["segment"]: r["answer_text"] for r in _rows(pool, "T7")}
    # the failed Insert paired with a success of its scene, the closest in segment order (the first of 1 and 3)
    assert t7 == {1: "Yes — this operation succeeded", 2: "No — this operation failed"}
    t5_units = {json.loads(r["label_meta_json"])["step_id"] for r in _rows(pool, "T5")}
    steps = labels["steps"]
    assert set(steps["text"]) == {"Pick round peg 1", "Place BNC"}  # the failed Insert is no T5 step
    assert t5_units <= set(steps["step_id"])


def test_pool_independent_of_hash_seed(tmp_path):
    """Same inputs -> identical candidates in fresh interpreters with different PYTHONHASHSEED."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = (
        "import sys, hashlib; sys.path.insert(0, 'tests')\n"
        "from factories import synthetic_pool\n"
        "from pipeline.items import selection as I\n"
        "from pipeline.items.choices import assign_letters, display_order\n"
        "from pipeline.settings.config import load_settings\n"
        "cfg = load_settings()\n"
        "h = hashlib.sha256()\n"
        "for s in ('reassemble', 'gm100'):\n"
        "    p = synthetic_pool(s, n_units=2, n_frames=900)[2]\n"
        "    a = assign_letters(display_order(I.select_candidates(p, I.quotas(cfg, s), 42, extra=0.1), 42), 42)\n"
        "    h.update(p.write_ndjson().encode()); h.update(a.write_ndjson().encode())\n"
        "print(h.hexdigest())\n"
    )
    root = Path(__file__).resolve().parent.parent
    outs = set()
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        r = subprocess.run(
            [sys.executable, "-c", script], cwd=root, env=env, capture_output=True, text=True, timeout=600
        )
        assert r.returncode == 0, r.stderr[-2000:]
        outs.add(r.stdout.strip())
    assert len(outs) == 1


def test_items_from_every_family(pools, reassemble_pool):
    """Every family, every source: candidates -> items with a consistent option set and answer letter."""
    from pipeline.items.choices import assign_letters, display_order

    seen = set()
    for source, (_, _, pool) in list(pools.items()) + [("reassemble", reassemble_pool)]:
        items = assign_letters(display_order(pool, seed=42), seed=42)
        assert items.height == pool.height
        for r in items.iter_rows(named=True):
            k = r["num_choices"]
            assert len(r["choices"]) == k and r["answer"] in "ABCDEF"[:k]
            assert r["choices"]["ABCDEF".index(r["answer"])] == r["answer_text"]
            assert sorted(r["choices"]) == sorted([r["answer_text"], *r["distractors"]])
            seen.add((source, r["task_id"]))
    assert {t for _, t in seen} == set(CFG.task_ids)
    assert seen == {(s, t) for s, ts in FAMILIES_BY_SOURCE.items() for t in ts} - ABSENT_IN_HAND_MADE
