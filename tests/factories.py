"""Shared test factories: the hand-made inputs and helpers several test files build on, in one module (a test file
never imports another test file).

    make_unit(n, **overrides)                   one well-formed GM-100 UnitIR
    synthetic_ir(source, n_units, n_frames)     hand-made IR tables of a source whose labels are known
    synthetic_pool(source, ...)                 (ir, labels, candidate pool) of that IR under the configs
    make_cfg() / make_units() / make_items()    a small release config, its units and split items (the writers)
    build(out_dir, cfg, items, summary)         a release folder written from those
    build_identified(out_dir, cfg, items)       ... with its identity stated and its checksums (as the release step)
    hold_build_lock(cfg, token, ready, stop)    a process body holding the build lock until `stop` is set
    build_demo(samples, out, ...)               one demo build through Dagster into out/{work,release}
    aist_root_with_bad_zip(tmp, how, setattr_)  an AIST root of two good task zips and one damaged `how`
                                                (ZIP_DAMAGE; also bench/fault_inputs_containers.py's cases)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import hashlib
import itertools
import json
from pathlib import Path

import numpy as np
import polars as pl

from pipeline import publish
from pipeline.release import writers
from pipeline.settings.config import load_settings
from pipeline.core.io import compact_json
from upstream_adapters.ir import FRAMES_SCHEMA, SEGMENTS_SCHEMA, SIGNALS_SCHEMA, UNITS_SCHEMA, UnitIR, to_table

if TYPE_CHECKING:
    from pipeline.settings.root import Settings


# ------------------------------------------------------------------------------------------ one IR unit
def make_unit(n=5, **overrides):
    unit = {
        "source": "gm100",
        "unit_id": "task_00001__episode_000000",
        "unit_type": "episode",
        "task_id": "task_00001",
        "operator_id": None,
        "scene_id": None,
        "config_id": None,
        "taxonomy": None,
        "official_split": None,
        "cameras": ["camera_top", "camera_wrist_left"],
        "camera": "camera_top",
        "fps": 30.0,
        "num_frames": n,
        "arm_layout": "bimanual",
        "licence": "unknown",
        "rating": None,
        "language": None,
    }
    unit.update(overrides)
    frames = to_table(
        [
            {
                "source": "gm100",
                "unit_id": unit["unit_id"],
                "camera": "camera_top",
                "frame_index": i,
                "t_sec": i / 30,
                "native_ts": i / 30,
            }
            for i in range(n)
        ],
        FRAMES_SCHEMA,
    )
    signals = to_table(
        [
            {
                "source": "gm100",
                "unit_id": unit["unit_id"],
                "arm": arm,
                "frame_index": i,
                "t_sec": i / 30,
                "pos_x": 0.1 * i,
                "pos_y": 0.0,
                "pos_z": None,
                "speed": 0.1,
                "gripper_effort": 1.0,
                "gripper_width": None,
                "force": None,
            }
            for arm in ("left", "right")
            for i in range(n)
        ],
        SIGNALS_SCHEMA,
    )
    segments = to_table(
        [
            {
                "source": "gm100",
                "unit_id": unit["unit_id"],
                "level": "high",
                "seg_index": 0,
                "parent_index": None,
                "text": "x",
                "start_frame": 0,
                "end_frame": n - 1,
                "start_sec": 0.0,
                "end_sec": (n - 1) / 30,
                "success": True,
            }
        ],
        SEGMENTS_SCHEMA,
    )
    return UnitIR(unit=unit, frames=frames, signals=signals, segments=segments)


# ------------------------------------------------------------------------------------------ hand-made IR of a source

CAMERAS = {"gm100": "camera_top", "rh20t": "036422060215", "reassemble": "hand", "aist": "cam_high"}
FPS = {"gm100": 30.0, "rh20t": 10.0, "reassemble": 30.0, "aist": 50.0}
LOW_CHAINS = {
    "Pick": ["Approach", "Grasp", "Lift"],
    "Insert": ["Approach", "Align", "Push", "Release"],
    "Remove": ["Approach", "Grasp", "Twist", "Pull", "Lift"],
    "Place": ["Approach", "Align", "Nudge", "Release"],
}


def _unit_id(source: str, i: int) -> tuple[str, str]:
    if source == "gm100":
        task = f"task_{i % 7 + 1:05d}"
        return f"{task}__episode_{i:06d}", task
    if source == "rh20t":
        task = f"task_{i % 5 + 1:04d}"
        return f"{task}_user_{i % 3 + 1:04d}_scene_{i + 1:04d}_cfg_0002", task
    if source == "reassemble":
        rid = f"2025-01-{9 + i // 24:02d}-{i % 24:02d}-00-00"
        return rid, rid
    task = f"task_{[4, 16, 31, 44, 48][i % 5]:03d}"
    return f"{task}_episode_{i}", task


def _ramp(n: int, segments: list[tuple[float, float, float]]) -> np.ndarray:
    """Piecewise-linear position: segments of (start_frac, end_frac, total displacement) added up."""
    x = np.zeros(n)
    t = np.arange(n) / max(1, n - 1)
    for a, b, d in segments:
        x += d * np.clip((t - a) / max(1e-9, b - a), 0.0, 1.0)
    return x


def _arm_motion(n: int, active: tuple[float, float], rng: np.random.Generator, scale: float):
    """Positions and speed of an arm moving during `active` (fractions) in two strokes, idle otherwise."""
    a, b = active
    m = a + (b - a) * 0.5
    dx1, dy1 = rng.choice([-1, 1]) * scale, rng.choice([-1, 1]) * scale * 0.2
    dx2, dy2 = rng.choice([-1, 1]) * scale * 0.2, rng.choice([-1, 1]) * scale
    px = _ramp(n, [(a, m - 0.02, dx1), (m + 0.02, b, dx2)])
    py = _ramp(n, [(a, m - 0.02, dy1), (m + 0.02, b, dy2)])
    pz = _ramp(n, [(a, b, 0.1 * scale)])
    return px, py, pz


def synthetic_ir(source: str, n_units: int = 4, n_frames: int = 240, seed: int = 0) -> dict[str, pl.DataFrame]:
    """A small, deterministic IR for one source in the exact IR schemas: motion in strokes, a gripper/force contact
    in the middle of the activity, REASSEMBLE segments with low-level chains, RH20T ratings."""
    rng = np.random.default_rng(seed)
    units, frames, signals, segments = [], [], [], []
    cam, fps = CAMERAS[source], FPS[source]
    for i in range(n_units):
        uid, task = _unit_id(source, i)
        n = n_frames
        t = np.arange(n) / fps
        bimanual = source in ("gm100", "aist")
        units.append(
            {
                "source": source,
                "unit_id": uid,
                "unit_type": "episode" if source == "gm100" else "recording",
                "task_id": task,
                "operator_id": None,
                "scene_id": None,
                "config_id": None,
                "taxonomy": None,
                "official_split": None,
                "cameras": [cam],
                "camera": cam,
                "fps": fps,
                "num_frames": n,
                "arm_layout": "bimanual" if bimanual else "single_arm",
                "licence": "CC BY 4.0",
                "rating": ([5, 1, 9, -1, 2, 0][i % 6] if source == "rh20t" else None),
                "language": "do the task",
            }
        )
        frames.append(
            pl.DataFrame(
                {
                    "source": source,
                    "unit_id": uid,
                    "camera": cam,
                    "frame_index": np.arange(n),
                    "t_sec": t,
                    "native_ts": t + 1000.0,
                }
            )
        )
        arm_specs = {
            "gm100": [("left", (0.10, 0.55)), ("right", (0.45, 0.90))],
            "aist": [("left", (0.08, 0.50)), ("right", (0.40, 0.85))],
        }.get(source, [("single", (0.10, 0.85))])
        if source == "gm100" and i % 3 == 2:  # a single-right task: the left arm stays still
            arm_specs = [("left", (0.0, 0.0)), ("right", (0.15, 0.85))]
        scale = {"gm100": 0.3, "rh20t": 1.0, "reassemble": 0.6, "aist": 0.8}[source]
        for arm, active in arm_specs:
            if active[1] > active[0]:
                px, py, pz = _arm_motion(n, active, rng, scale)
            else:
                px = py = pz = np.zeros(n)
            px = px + rng.normal(0, 1e-4, n)
            py = py + rng.normal(0, 1e-4, n)
            v = np.r_[0.0, np.linalg.norm(np.diff(np.c_[px, py, pz], axis=0), axis=1) * fps]
            a, b = active
            c0, c1 = int((a + 0.3 * (b - a)) * n), int((a + 0.8 * (b - a)) * n)
            row = {
                "source": source,
                "unit_id": uid,
                "arm": arm,
                "frame_index": np.arange(n),
                "t_sec": t,
                "pos_x": px,
                "pos_y": py,
                "pos_z": pz,
                "speed": None,
                "gripper_effort": None,
                "gripper_width": None,
                "force": None,
                "speed_full": None,
            }
            if source == "gm100":
                eff = 1.0 + rng.normal(0, 0.01, n)
                if b > a:
                    eff[c0:c1] -= 0.5
                row["gripper_effort"] = eff
                row["speed"] = v * 12.0
            elif source == "rh20t":
                w = np.full(n, 90.0) + rng.normal(0, 0.05, n)
                w[c0:c1] = 40.0
                f = np.abs(rng.normal(0.3, 0.1, n))
                f[c0:c1] += 6.0
                row["gripper_width"], row["force"] = w, f
            elif source == "reassemble":
                row["speed"] = v
                row["force"] = np.abs(rng.normal(1.0, 0.2, n))
            else:
                row["speed"] = v * 4.0
            df = pl.DataFrame(
                {k: (val if isinstance(val, np.ndarray) else [val] * n) for k, val in row.items()},
                schema_overrides={
                    c: pl.Float64
                    for c in (
                        "pos_x",
                        "pos_y",
                        "pos_z",
                        "speed",
                        "gripper_effort",
                        "gripper_width",
                        "force",
                        "speed_full",
                    )
                },
            )
            signals.append(df)
        if source == "reassemble":
            segments.extend(_reassemble_segments(uid, n, fps, i))
    units_df = pl.from_arrow(__import__("pyarrow").Table.from_pylist(units, schema=UNITS_SCHEMA))
    frames_df = pl.concat(frames).cast(
        dict(zip(FRAMES_SCHEMA.names, pl.from_arrow(FRAMES_SCHEMA.empty_table()).dtypes))
    )
    sig_schema = pl.from_arrow(SIGNALS_SCHEMA.empty_table()).schema
    signals_df = pl.concat([s.select(list(sig_schema)).cast(dict(sig_schema)) for s in signals])
    seg_schema = pl.from_arrow(SEGMENTS_SCHEMA.empty_table()).schema
    segments_df = pl.DataFrame(segments, schema=seg_schema) if segments else pl.DataFrame(schema=seg_schema)
    return {"units": units_df, "frames": frames_df, "signals": signals_df, "segments": segments_df}


def _reassemble_segments(uid: str, n: int, fps: float, i: int) -> list[dict]:
    """No action, then alternating actions (one failed) each with a low-level chain, tiling the recording."""
    rows = []
    verbs = ["Pick", "Insert", "Remove", "Place", "Pick", "Insert", "Remove", "Place", "Pick", "Insert"]
    objs = ["round peg 1", "square peg 3", "BNC", "USB", "gear large"]
    n_high = max(11, n // 110)
    cuts = np.linspace(0, n, n_high + 1).astype(int)
    hi = 0
    for k in range(n_high):
        s, e = int(cuts[k]), int(cuts[k + 1]) - 1
        if k == 0 or k == 6:
            text, success = "No action.", True
        else:
            verb = verbs[(k + i) % len(verbs)]
            text, success = f"{verb} {objs[(k + i) % len(objs)]}.", not (k == 3 and i % 2 == 0)
        rows.append(
            {
                "source": "reassemble",
                "unit_id": uid,
                "level": "high",
                "seg_index": hi,
                "parent_index": None,
                "text": text,
                "start_frame": s,
                "end_frame": e,
                "start_sec": s / fps,
                "end_sec": e / fps,
                "success": success,
            }
        )
        if text != "No action.":
            chain = LOW_CHAINS[text.split()[0]]
            if k % 4 == 1:
                chain = chain[:2] + [chain[1]] + chain[2:]  # a repeated label: the distinct chain collapses it
            lc = np.linspace(s, e + 1, len(chain) + 1).astype(int)
            for j, lt in enumerate(chain):
                rows.append(
                    {
                        "source": "reassemble",
                        "unit_id": uid,
                        "level": "low",
                        "seg_index": j,
                        "parent_index": hi,
                        "text": lt,
                        "start_frame": int(lc[j]),
                        "end_frame": int(lc[j + 1]) - 1,
                        "start_sec": lc[j] / fps,
                        "end_sec": (lc[j + 1] - 1) / fps,
                        "success": True,
                    }
                )
        hi += 1
    return rows


def synthetic_pool(source: str, n_units: int = 4, n_frames: int = 1200, cfg=None):
    from pipeline.families import build_candidates
    from pipeline.labels import compute_labels

    cfg = cfg or load_settings()
    ir = synthetic_ir(source, n_units=n_units, n_frames=n_frames)
    labels = compute_labels(source, ir, cfg)
    return ir, labels, build_candidates(source, ir, labels, cfg)


# ------------------------------------------------------------------------------------------ release inputs (the writers)

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
PHASES = ["pre-approach", "approach", "contact", "release"]
PERMS = ["".join(p) for p in itertools.permutations("XYZ")]
# Public names (docs/release-format.md); the build reads them from configs/tasks/T*.yaml.
TASK_NAMES = {
    "T1": "Phase Recognition",
    "T2": "Contact Detection",
    "T3": "Motion Direction Prediction",
    "T8": "Temporal Ordering",
    "T9": "Temporal Priority Prediction",
    "T10": "Current Primitive Recognition",
}


def make_cfg():
    """The repository's configs, with the release seed, sources and eval ratio these tests expect."""
    from pipeline.settings.config import load_settings

    return load_settings().with_values(
        {
            "build.release_seed": 42,
            "build.sources": ["gm100", "rh20t", "reassemble", "aist"],
            "split.eval_ratio": 0.15,
            "split.seed": None,
        }
    )


def make_units() -> pl.DataFrame:
    rows = []
    for e in range(4):
        rows.append(
            {
                "source": "gm100",
                "unit_id": f"task_00001__episode_{e:06d}",
                "unit_type": "episode",
                "task_id": "task_00001",
                "licence": "unknown",
                "language": "pick up the cup" if e % 2 else None,
            }
        )
    for r in range(3):
        rows.append(
            {
                "source": "rh20t",
                "unit_id": f"task_0001_user_0001_scene_000{r + 1}_cfg_0002",
                "unit_type": "recording",
                "task_id": "task_0001",
                "licence": "CC BY-SA 4.0" if r < 2 else "CC BY-NC 4.0",
                "language": "push the block",
            }
        )
    return pl.DataFrame(rows)


def fake_hash(*parts) -> str:
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()


def make_item(
    source,
    unit,
    task,
    anchor,
    frames,
    true_text,
    options,
    answer_pos,
    *,
    legacy=None,
    input_type="single_frame",
    labels=None,
    spec=None,
    n_images=None,
    question="Q?",
):
    choices = [o for o in options if o != true_text]
    choices.insert(answer_pos, true_text)
    key = f"{task}|{source}|{unit}|f{anchor}|{'-'.join(map(str, frames))}"
    return {
        "candidate_key": key,
        "source": source,
        "unit_id": unit,
        "task_id": task,
        "task_type_legacy": legacy or task,
        "input_type": input_type,
        "camera": "camera_top" if source == "gm100" else "036422060215",
        "question": question,
        "answer_text": true_text,
        "distractors": [c for c in choices if c != true_text],
        "num_choices": len(choices),
        "frame_indices": frames,
        "display_labels": labels,
        "render_spec_json": spec,
        "anchor_frame": anchor,
        "arm_type": "single_right" if source == "gm100" else "single_arm",
        "label_meta_json": "{}",
        "item_key": fake_hash("item", key)[:16],
        "choices": choices,
        "answer": "ABCDEF"[answer_pos],
        "image_hashes_json": json.dumps([fake_hash(key, i) for i in range(n_images or len(frames))]),
    }


def make_items() -> pl.DataFrame:
    """~40 items over gm100 (4 episodes) and rh20t (3 recordings); unit 0 of each source is eval."""
    units = make_units()
    rows = []
    k = 0
    for u in units.iter_rows(named=True):
        src, uid = u["source"], u["unit_id"]
        for a in (40, 10):  # anchors deliberately out of order
            rows.append(
                make_item(
                    src,
                    uid,
                    "T1",
                    a,
                    [a],
                    PHASES[k % 4],
                    PHASES,
                    k % 4,
                    question="Which phase best describes the current robot manipulation state?",
                )
            )
            k += 1
        rows.append(
            make_item(
                src,
                uid,
                "T2",
                20,
                [20],
                "Yes — contact established",
                ["Yes — contact established", "No — no contact"],
                k % 2,
            )
        )
        k += 1
        frames = [30, 5, 17]
        spec8 = compact_json(
            {"version": 1, "kind": "labelled_frames", "labels": ["X", "Y", "Z"], "frame_indices": frames, "size": None}
        )
        rows.append(
            make_item(
                src,
                uid,
                "T8",
                5,
                frames,
                "YZX",
                PERMS,
                k % 6,
                legacy="T_temporal",
                input_type="labelled_frames",
                labels=["X", "Y", "Z"],
                spec=spec8,
            )
        )
        k += 1
        spec9 = compact_json(
            {
                "version": 1,
                "kind": "panels",
                "labels": ["X", "Y"],
                "frame_indices": [50, 12],
                "size": [320, 240],
                "gap": 8,
            }
        )
        rows.append(
            make_item(
                src,
                uid,
                "T9",
                12,
                [50, 12],
                "Y",
                ["X", "Y"],
                k % 2,
                legacy="T_binary",
                input_type="panel_composite",
                labels=["X", "Y"],
                spec=spec9,
                n_images=1,
            )
        )
        k += 1
    items = pl.DataFrame(rows)
    eval_units = {"task_00001__episode_000000", "task_0001_user_0001_scene_0001_cfg_0002"}
    return items.with_columns(
        split=pl.when(pl.col("unit_id").is_in(list(eval_units))).then(pl.lit("eval")).otherwise(pl.lit("sft")),
        split_group_id=pl.concat_str([pl.col("source"), pl.col("unit_id")], separator="/"),
    )


DOCUMENTS = {
    "prompt_templates": "# Prompt templates\n\n{question}\n\nA: {choice_A}\n\n<ANSWER>A</ANSWER>\n",
    "reconstruction": "# Reconstruction\n\nUse reconstruction_key_json with the upstream data.\n",
    "provenance": '{"builder_version": "processbench_build_v2"}\n',
}


def build(out_dir: Path, cfg=None, items=None, summary=None):
    cfg = cfg or make_cfg()
    ev, sft = writers.release_tables(make_items() if items is None else items, make_units(), cfg)
    result = writers.write_release(ev, sft, summary or {"eval_ratio": 0.15}, cfg, out_dir, DOCUMENTS)
    return ev, sft, result


def build_identified(out_dir: Path, cfg=None, items=None) -> str:
    """`build`, then the release identity stated and the checksums written as the release step ends
    (pipeline/release/identity.py stamp_release); returns the release fingerprint."""
    from pipeline.release.identity import stamp_release

    cfg = cfg or make_cfg()
    build(out_dir, cfg, items)
    fp, sums = stamp_release(out_dir, cfg)
    writers.write_checksums(out_dir, cfg, known=sums)
    return fp


# ------------------------------------------------------------------------------------------ builds


def hold_build_lock(cfg, token, ready, stop):
    with publish.build_lock(cfg, token):
        ready.set()
        stop.wait(30)


def digest_tree(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under root: two builds' release folders compared byte for byte."""
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(Path(root).rglob("*"))
        if p.is_file()
    }


def build_demo(
    samples: dict[str, Path],
    out: Path,
    executor: str = "in_process",
    config_dir: str = "",
    sources: list[str] | None = None,
    variants: dict[str, str] | None = None,
    **kw,
) -> Path:
    """Run the `build` job in one Dagster run (a throw-away instance under `out`) into `out`/{work,release}, with the
    configs of `config_dir` (default: the repository's), of `sources` (default: every source of build.sources), with
    the template `variants` ({task: name}, as `processbench build --variant`). A work folder already under `out` (a
    copy of another build's) is reused: only the steps whose inputs changed run."""
    import dagster as dg

    from assets.run import rebuild
    from assets.settings import BuildSettings

    settings = BuildSettings(
        config_dir=config_dir,
        scale="demo",
        upstream={k: str(v) for k, v in samples.items()},
        work_dir=str(out / "work"),
        release_dir=str(out / "release"),
        sources=sources or [],
        variants=variants or {},
    )
    (out / "dagster_home").mkdir(parents=True, exist_ok=True)
    with dg.DagsterInstance.local_temp(
        str(out / "dagster_home"), overrides={"telemetry": {"enabled": False}}
    ) as instance:
        result = rebuild(settings, instance=instance, log=lambda m: None, executor=executor, **kw)
    assert result["failed_checks"] == [], result["failed_checks"]
    assert result["steps"], "a fresh work folder must run every step"
    return out / "release"


# ------------------------------------------------------------------------------------------ T13 step items
STEP_SENTENCES = (
    "The gripper approaches the part.",
    "The gripper closes on the part.",
    "The arm lifts the part.",
    "The arm moves the part to the socket.",
    "The part is inserted into the socket.",
    "The gripper opens and releases the part.",
    "The arm retracts.",
    "The task is complete.",
)
STEP_KINDS = (
    "natural_primitive_failure",
    "natural_action_failure",
    "natural_outcome",
    "swapped_frames",
    "substituted_chain",
    "contact_flipped",
    "outcome_flipped",
    "truncated_complete",
)


def make_step_row(
    n: int,
    correctness: list[int],
    *,
    split: str = "eval",
    source: str = "REASSEMBLE",
    slug: str = "reassemble",
    level: str | None = "L1",
    group: str | None = None,
    steps: list[str] | None = None,
    kinds: list[str | None] | None = None,
) -> dict:
    """One T13 step item in the row shape of the step files (the contract both halves of the track code against):
    `correctness` 1 / -1 / 0 per step; `kinds` the error kind of each -1 step (default: `swapped_frames`)."""
    from pipeline.release.identity import step_uid
    from pipeline.steps.parse import format_steps

    k = len(correctness)
    steps = list(steps or [STEP_SENTENCES[i % len(STEP_SENTENCES)] for i in range(k)])
    kinds = list(kinds) if kinds is not None else ["swapped_frames" if c == -1 else None for c in correctness]
    item_id = f"pb_v2_steps_{split}_{n:06d}"
    unit = f"unit_{n:04d}"
    first = next((i for i, c in enumerate(correctness) if c == -1), -1)
    images = [f"images/{item_id}/{i}.png" for i in range(k)]
    row = {
        "item_id": item_id,
        "item_uid": None,
        "split": split,
        "source": source,
        "source_slug": slug,
        "source_task_id": "task_1",
        "source_unit_type": "recording",
        "source_unit_id": unit,
        "task_id": "T13",
        "task_name": "process_verification",
        "eval_level": level if split == "eval" else None,
        "split_group_id": group or f"{slug}:{unit}",
        "image": images,
        "question": "Assemble the parts.",
        "response": {"steps": steps, "process_correctness": [int(c) for c in correctness]},
        "step_image_index_json": compact_json([[i] for i in range(k)]),
        "prompt": "Goal: Assemble the parts.\n" + "\n".join(f"Step {i + 1}: <image> {s}" for i, s in enumerate(steps)),
        "answer": format_steps(correctness),
        "num_steps": k,
        "first_error_index": first,
        "step_error_kinds_json": compact_json([kd if c == -1 else None for kd, c in zip(kinds, correctness)]),
        "step_reconstruction_keys_json": compact_json(
            [
                {
                    "camera": "hand",
                    "frame_indices": [i],
                    "source": slug,
                    "source_task_id": "task_1",
                    "source_unit_id": unit,
                    "source_unit_type": "recording",
                }
                for i in range(k)
            ]
        ),
        "image_hashes_json": compact_json([fake_hash(item_id, i) for i in range(k)]),
        "licence": "CC-BY-4.0",
        "split_version": "splits_v2",
        "builder_version": "processbench_build_v2",
        "prompt_version": "steps_v1",
    }
    return row | {"item_uid": step_uid(row, "default")}  # the uid of what the row holds (pipeline/release/identity.py)


def step_table(rows: list[dict]) -> pl.DataFrame:
    """Step rows as the step files hold them (`response` a struct of two lists)."""
    return pl.DataFrame(
        rows,
        schema_overrides={
            "eval_level": pl.String,
            "image": pl.List(pl.String),
            "response": pl.Struct({"steps": pl.List(pl.String), "process_correctness": pl.List(pl.Int64)}),
        },
    )


def synthetic_step_rows(
    n_items: int,
    *,
    split: str = "eval",
    seed: int = 0,
    wrong_share: float = 0.3,
    giveaway: str | None = None,
    sources=(("REASSEMBLE", "reassemble"),),
    levels=("L1",),
    start: int = 0,
    groups: int | None = None,
) -> list[dict]:
    """Step items whose sentences carry nothing about their labels (steps drawn from one fixed chain, errors at
    uniformly drawn positions, kinds drawn evenly): a text-only model cannot beat the coin. `giveaway`: a word
    appended to every wrong step's sentence (a planted text leak)."""
    rng = np.random.default_rng(seed)
    rows = []
    for j in range(n_items):
        n = int(rng.integers(4, 9))
        corr = [1] * n
        if rng.random() < 0.7:
            for i in rng.choice(n, size=max(1, int(round(n * wrong_share))), replace=False):
                corr[int(i)] = -1
        if rng.random() < 0.3:
            corr[int(rng.integers(0, n))] = 0
        steps = [
            STEP_SENTENCES[i % len(STEP_SENTENCES)] + (f" {giveaway}" if giveaway and c == -1 else "")
            for i, c in enumerate(corr)
        ]
        kinds = [STEP_KINDS[int(rng.integers(0, len(STEP_KINDS)))] if c == -1 else None for c in corr]
        source, slug = sources[j % len(sources)]
        g = f"{slug}:group_{(start + j) % groups if groups else start + j:04d}"
        rows.append(
            make_step_row(
                start + j,
                corr,
                split=split,
                source=source,
                slug=slug,
                steps=steps,
                kinds=kinds,
                level=levels[(j // len(sources)) % len(levels)],
                group=g,
            )
        )
    return rows


def write_step_files(release_dir: Path, cfg: Settings, eval_rows: list[dict], sft_rows: list[dict]) -> dict[str, Path]:
    """The step files of a release folder (names from configs/release.yaml `files`; one eval file per level)."""
    from pipeline.release.files import step_files

    names = step_files(cfg)
    out = {}
    for level in sorted({r["eval_level"] for r in eval_rows}):
        p = Path(release_dir) / names[level][0]
        p.parent.mkdir(parents=True, exist_ok=True)
        step_table([r for r in eval_rows if r["eval_level"] == level]).write_parquet(p)
        out[level] = p
    p = Path(release_dir) / names["sft"][0]
    step_table(sft_rows).write_parquet(p)
    out["sft"] = p
    return out


def reassemble_plan_tables(n_units: int, seed: int = 0, fps: float = 10.0, eval_share: float = 0.4):
    """REASSEMBLE-shaped label tables without video: each unit's high-level actions and low-level chains planned by the
    release-scale sample generator (upstream_adapters/samples/reassemble_plan.py: the real vocabulary, about one action
    in ten failing with its chain cut at the failed primitive), in frames at `fps`. Returns (lab, ir, units): the
    labels tables the step track reads, the IR low-level `success` flags, and the units table build_drafts takes
    (one split group per unit; the first `eval_share` of them eval L1, the rest SFT)."""
    from upstream_adapters.samples.reassemble_plan import plan_recording

    prim, segs, low, units = [], [], [], []
    n_eval = int(round(eval_share * n_units))
    for k in range(n_units):
        uid = f"2025-01-{10 + k // 60:02d}-{k % 60:02d}-00-00"
        plan = plan_recording(np.random.default_rng([seed, k]), "release", force_failure=k % 7 == 3)

        def frame(t: float) -> int:
            return int(round(t * fps))

        for h, seg in enumerate(plan):
            segs.append(
                {
                    "unit_id": uid,
                    "seg_index": h,
                    "text": seg.text,
                    "no_action": not seg.low,
                    "start_frame": frame(seg.start),
                    "end_frame": frame(seg.end) - 1,
                    "success": bool(seg.success),
                }
            )
            for j, lo in enumerate(seg.low):
                prim.append(
                    {
                        "unit_id": uid,
                        "parent_index": h,
                        "seg_index": j,
                        "text": lo.text,
                        "start_frame": frame(lo.start),
                        "end_frame": frame(lo.end) - 1,
                    }
                )
                low.append({"unit_id": uid, "level": "low", "parent_index": h, "seg_index": j, "success": lo.success})
        units.append(
            {
                "unit_id": uid,
                "camera": "hama1",
                "num_frames": frame(plan[-1].end),
                "outcome": None,
                "split": "eval" if k < n_eval else "sft",
                "eval_level": "L1" if k < n_eval else None,
                "split_group_id": f"reassemble:{uid}",
                "unit_type": "recording",
                "task_id": "assembly",
                "licence": "CC BY 4.0",
            }
        )
    lab = {"primitives": pl.DataFrame(prim), "segments": pl.DataFrame(segs)}
    ir = {"segments": pl.DataFrame(low)}
    schema = {"outcome": pl.String, "eval_level": pl.String}
    return lab, ir, pl.DataFrame(units, schema_overrides=schema)


# ------------------------------------------------------------------------------------------ broken upstream containers
AIST_GOOD = {"insert_usb_cable": "task_004", "close_cardboard_box": "task_089"}
AIST_BAD = ("insert_rod_board", "task_016")
AIST_EPISODES = 4
# how a task zip is lost: not there as bytes, not a zip, refused by the OS, a folder in its place, cut half-way
ZIP_DAMAGE = ("zero_length", "not_a_zip", "unreadable", "directory", "half_cut")


def aist_episode(tid: str, name: str, i: int) -> bytes:
    """One small AIST episode file (12 frames of 32x24) of task `tid`."""
    from upstream_adapters.samples import aist as A

    _, _, taxonomy, prompt = next(t for t in A.TASKS if t[0] == tid)
    return A.episode_bytes(tid, name, taxonomy, prompt, i, 12, (32, 24), seed=0)


def aist_task_zip(path: Path, name: str, tid: str, episodes: int = AIST_EPISODES) -> None:
    from upstream_adapters.samples import aist as A

    A.write_task_zip(path, {f"{name}/episode_{i}.hdf5": aist_episode(tid, name, i) for i in range(episodes)})


def aist_root_with_bad_zip(tmp: Path, how: str | None, setattr_) -> tuple[Path, Path]:
    """(root, bad zip): an AIST root of the AIST_GOOD task zips (AIST_EPISODES episodes each) and AIST_BAD's zip
    damaged `how` (one of ZIP_DAMAGE; None: left whole). `setattr_(obj, name, value)` patches what "unreadable" needs
    (pytest's monkeypatch.setattr, or a setter that records how to undo it)."""
    from upstream_adapters.samples import aist as A

    root = tmp / "aist"
    root.mkdir(parents=True)
    A.write_manifest(root)
    for name, tid in AIST_GOOD.items():
        aist_task_zip(root / f"{name}.zip", name, tid)
    bad = root / f"{AIST_BAD[0]}.zip"
    aist_task_zip(bad, *AIST_BAD)
    if how is not None:
        break_zip(bad, how, setattr_)
    return root, bad


def break_zip(bad: Path, how: str, setattr_) -> None:
    """Damage the zip `bad` as ZIP_DAMAGE names."""
    import builtins
    import io
    import os

    if how == "zero_length":
        bad.write_bytes(b"")
    elif how == "not_a_zip":
        bad.write_bytes(b"<html>Dropbox: this link has expired</html>")
    elif how == "unreadable":
        real = builtins.open

        def deny(file, *a, **kw):
            if isinstance(file, (str, os.PathLike)) and os.fspath(file) == os.fspath(bad):
                raise PermissionError(13, "Permission denied", os.fspath(file))
            return real(file, *a, **kw)

        setattr_(builtins, "open", deny)
        setattr_(io, "open", deny)  # zipfile opens with io.open
    elif how == "directory":
        bad.unlink()
        bad.mkdir()
    elif how == "half_cut":
        data = bad.read_bytes()
        bad.write_bytes(data[: len(data) // 2])
    else:
        raise ValueError(f"unknown zip damage {how!r}: one of {ZIP_DAMAGE}")


def reassemble_tables(uids=("r1", "r2"), success_low=None) -> tuple[dict, dict]:
    """REASSEMBLE-like units: two high-level actions each, four primitives each (r2's chain of 'Pick gear.' differs
    from r1's at position 2)."""
    prim, segs, low = [], [], []
    for uid in uids:
        chains = {
            0: ("Pick gear.", ["Approach", "Grasp", "Lift", "Release"]),
            1: ("Insert gear.", ["Approach", "Align", "Push", "Release"]),
        }
        if uid != uids[0]:
            chains[0] = ("Pick gear.", ["Approach", "Grasp", "Twist", "Release"])
        f = 0
        for h, (text, chain) in chains.items():
            hs = f
            for j, p in enumerate(chain):
                prim.append(
                    {
                        "unit_id": uid,
                        "parent_index": h,
                        "seg_index": j,
                        "text": p,
                        "start_frame": f,
                        "end_frame": f + 29,
                    }
                )
                ok = not (success_low and (uid, h, j) in success_low)
                low.append({"unit_id": uid, "level": "low", "parent_index": h, "seg_index": j, "success": ok})
                f += 30
            segs.append(
                {
                    "unit_id": uid,
                    "seg_index": h,
                    "text": text,
                    "no_action": False,
                    "start_frame": hs,
                    "end_frame": f - 1,
                    "success": True,
                }
            )
    lab = {"primitives": pl.DataFrame(prim), "segments": pl.DataFrame(segs)}
    ir = {"segments": pl.DataFrame(low)}
    return lab, ir
