"""A fifth source needs an adapter and config entries, nothing else: register a toy adapter defined here, copy
configs/ with the source added (sources.yaml, label rules, quotas in three task templates), and build a release
through the plain stage functions (no Dagster). The release must hold the toy source's items and validate."""

from __future__ import annotations

import json
import shutil
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import yaml

import upstream_adapters
from pipeline import stages
from pipeline.steps.stage import run_steps
from pipeline.settings.config import CONFIG_DIR, load_settings
from pipeline.settings.errors import ConfigError
from upstream_adapters.base import SourceAdapter
from upstream_adapters.ir import FRAMES_SCHEMA, SIGNALS_SCHEMA, UnitError, UnitIR, validate_unit

SLUG = "toy"
CAMERA = "cam0"
FPS = 10.0
N_UNITS, N_FRAMES = 12, 120
H, W = 72, 96


class ToyAdapter(SourceAdapter):
    """A single-arm source: <root>/units/<unit_id>.json holds the arm's x positions; frames are synthetic images."""

    slug, name, unit_type = SLUG, "Toy", "episode"

    options = {"camera": "the one camera the toy units have"}

    def __init__(self, camera: str = CAMERA):
        super().__init__()
        self.camera = camera

    def _meta(self, root: Path, unit_id: str) -> dict:
        path = Path(root) / "units" / f"{unit_id}.json"
        if "/" in unit_id or not path.is_file():
            raise UnitError(f"no unit {unit_id!r}", file=f"units/{unit_id}.json")
        return json.loads(path.read_text())

    def discover(self, root: Path) -> list[str]:
        return sorted(p.stem for p in (Path(root) / "units").glob("*.json"))

    def read_unit(self, root: Path, unit_id: str) -> UnitIR:
        meta = self._meta(root, unit_id)
        n = len(meta["x"])
        t = [i / FPS for i in range(n)]
        frames = pa.Table.from_pylist(
            [
                {
                    "source": SLUG,
                    "unit_id": unit_id,
                    "camera": self.camera,
                    "frame_index": i,
                    "t_sec": t[i],
                    "native_ts": t[i],
                }
                for i in range(n)
            ],
            schema=FRAMES_SCHEMA,
        )
        signals = pa.Table.from_pylist(
            [
                {
                    "source": SLUG,
                    "unit_id": unit_id,
                    "arm": "single",
                    "frame_index": i,
                    "t_sec": t[i],
                    "pos_x": meta["x"][i],
                    "pos_y": 0.0,
                    "pos_z": 0.0,
                }
                for i in range(n)
            ],
            schema=SIGNALS_SCHEMA,
        )
        unit = {
            "source": SLUG,
            "unit_id": unit_id,
            "unit_type": "episode",
            "task_id": meta["task"],
            "operator_id": None,
            "scene_id": None,
            "config_id": None,
            "taxonomy": None,
            "official_split": None,
            "cameras": [self.camera],
            "camera": self.camera,
            "fps": FPS,
            "num_frames": n,
            "arm_layout": "single_arm",
            "licence": "CC0-1.0",
            "rating": None,
            "language": None,
        }
        return UnitIR(unit=unit, frames=frames, signals=signals)

    def unit_files(self, root: Path, unit_id: str) -> list[tuple[str, Path, tuple | None]]:
        self._meta(root, unit_id)
        return [(f"units/{unit_id}.json", Path(root) / "units" / f"{unit_id}.json", None)]

    def read_frames(
        self, root: Path, unit_id: str, camera: str, indices, decoder: str = "auto", threads: int = 1
    ) -> dict[int, np.ndarray]:
        n = len(self._meta(root, unit_id)["x"])
        out = {}
        for i in indices:
            if not 0 <= int(i) < n:
                raise UnitError(f"frame {i} out of range", file=f"units/{unit_id}.json")
            rng = np.random.default_rng([zlib.crc32(unit_id.encode()), int(i)])
            out[int(i)] = rng.integers(30, 226, (H, W, 3), dtype=np.uint8)
        return out


def write_toy_corpus(root: Path) -> None:
    """Each unit: the arm rests, moves at 0.15 m/s, rests, moves back (moving and stationary frames)."""
    (root / "units").mkdir(parents=True)
    for u in range(N_UNITS):
        v = np.zeros(N_FRAMES)
        a = 15 + u % 5
        v[a : a + 30], v[a + 55 : a + 85] = 0.15, -0.15
        x = np.concatenate(([0.0], np.cumsum(v[1:] / FPS)))
        (root / "units" / f"toy_{u:03d}.json").write_text(json.dumps({"task": f"task_{u % 3}", "x": x.tolist()}))


def _edit(path: Path, fn) -> None:
    data = yaml.safe_load(path.read_text())
    fn(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def toy_config(tmp: Path, corpus: Path) -> Path:
    """configs/ copied, with the toy source added and built alone (the other sources stay configured)."""
    cfg_dir = tmp / "configs"
    shutil.copytree(CONFIG_DIR, cfg_dir)

    def build(d):
        d["build"].update(sources=[SLUG], work_dir=str(tmp / "work"), release_dir=str(tmp / "release"), scale="demo")

    _edit(cfg_dir / "build.yaml", build)
    _edit(
        cfg_dir / "sources.yaml",
        lambda d: d["sources"].update(
            {SLUG: {"name": "Toy", "unit_type": "episode", "root": str(corpus), "adapter": {"camera": CAMERA}}}
        ),
    )
    _edit(cfg_dir / "frames.yaml", lambda d: d["frames"].update(workers=1))  # the toy adapter lives in this process

    def exports(d):  # the card and Croissant state every built source's terms and origin
        d["exports"]["licences"][SLUG] = "Toy: generated for the tests, no licence needed."
        d["exports"]["provenance"][SLUG] = "Toy episodes written by the fifth-source test."

    _edit(cfg_dir / "exports.yaml", exports)

    def labels(d):
        d["labels"]["speed"][SLUG] = {"smooth": "box", "span": 5}
        d["labels"]["motion"][SLUG] = {"mode": "absolute", "stationary": 0.02, "moving": 0.07}
        for section in ("contact", "phase", "arm_type", "direction", "steps", "outcome"):
            d["labels"][section][SLUG] = {"method": "none"}  # a source without that rule says so
        d["labels"]["activity"][SLUG] = {"mode": "none"}

    _edit(cfg_dir / "labels.yaml", labels)

    def t6(d):
        d["sources"].append(SLUG)
        d["quota"][SLUG] = 500
        for key, v in (("stride", 3), ("cap_per_label", 4)):
            d["candidates"][key][SLUG] = v
        d["min_gap"][SLUG] = 6

    _edit(cfg_dir / "tasks" / "T6.yaml", t6)
    for task in ("T8", "T9"):

        def temporal(d):
            d["sources"].append(SLUG)
            d["quota"][SLUG] = 250
            d["frames"][SLUG] = {
                "mode": "grid",
                "step_sec": 1.0,
                "min_sep_sec": 2.0,
                "max_gap_steps": 4,
                "margin_frac": 0.03,
            }
            d["candidates"]["cap_per_unit"][SLUG] = 20

        _edit(cfg_dir / "tasks" / f"{task}.yaml", temporal)
    return cfg_dir


@pytest.fixture
def toy_registered():
    upstream_adapters.register(SLUG, f"{__name__}:ToyAdapter")
    yield
    upstream_adapters.unregister(SLUG)


@pytest.mark.slow
def test_fifth_source_builds_a_valid_release(tmp_path, toy_registered):
    corpus = tmp_path / "toy"
    write_toy_corpus(corpus)
    cfg = load_settings(toy_config(tmp_path, corpus))
    assert stages.run_ingest(cfg, SLUG)["units"] == N_UNITS  # the IR validator accepts the registered slug
    stages.run_labels(cfg, SLUG)
    per_family = stages.run_candidates(cfg, SLUG)["per_family"]
    assert set(per_family) == {"T6", "T8", "T9"}
    stages.run_frames(cfg, SLUG)
    stages.run_split(cfg)
    run_steps(cfg)  # the T13 step track (the toy source offers no step kind: an empty one)
    stages.run_release(cfg)
    assert stages.release_problems(cfg) == []
    assert stages.release_path_leaks(cfg) == []
    rows = [
        json.loads(line)
        for f in ("splits/processbench_eval.jsonl", "splits/processdata_sft.jsonl")
        for line in (tmp_path / "release" / f).read_text().splitlines()
    ]
    assert {r["source_slug"] for r in rows} == {SLUG}
    assert {r["task_id"] for r in rows} == {"T6", "T8", "T9"}
    assert {r["split"] for r in rows} == {"eval", "sft"}
    prompts = (tmp_path / "release" / "metadata" / "prompt_templates.md").read_text()
    assert f"`{SLUG}`" in prompts  # the prompt docs list the new source


def test_unregistered_slug_is_refused_by_the_ir_and_the_config(tmp_path):
    corpus = tmp_path / "toy"
    write_toy_corpus(corpus)
    ir = ToyAdapter().read_unit(corpus, "toy_000")
    assert validate_unit(ir) == "unknown source 'toy'"
    with pytest.raises(ConfigError) as err:
        load_settings(toy_config(tmp_path, corpus))
    assert err.value.key == "build.sources[0]" and "got 'toy'" in err.value.expected  # the first file read


def test_per_source_values_resolve_for_a_registered_source(toy_registered):
    import pydantic

    from pipeline.settings.config import load_settings

    cfg = load_settings()
    template = {"gm100": "a", SLUG: "b", "default": "c"}
    assert cfg.with_values({"tasks.T1.question": template}).tasks["T1"].for_source(SLUG).question == "b"
    other = cfg.with_values({"tasks.T1.question": {"gm100": "a", "default": "c"}}).tasks["T1"]
    assert other.for_source(SLUG).question == "c"
    upstream_adapters.unregister(SLUG)  # a per-source map is typed: a key that is no registered slug is an error
    with pytest.raises(pydantic.ValidationError):
        cfg.with_values({"tasks.T1.question": template})


def test_register_rejects_bad_names_and_silent_overrides():
    with pytest.raises(ValueError, match="lower-case"):
        upstream_adapters.register("Bad Slug", f"{__name__}:ToyAdapter")
    with pytest.raises(ValueError, match="module:Class"):
        upstream_adapters.register("toy2", "no_colon")
    with pytest.raises(ValueError, match="already registered"):
        upstream_adapters.register("gm100", f"{__name__}:ToyAdapter")
    assert "toy2" not in upstream_adapters.ADAPTERS
