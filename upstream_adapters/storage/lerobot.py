"""LeRobot dataset storage (v2.x): the pieces any LeRobot-based source reuses.

A LeRobot v2.x dataset folder holds `meta/info.json` (codebase_version, fps, features, data_path / video_path
templates, chunks_size), `meta/episodes.jsonl`, `meta/tasks.jsonl`, one parquet per episode under `data_path` and
one mp4 per (episode, camera) under `video_path` (docs/upstream-formats.md, GM-100). Plain functions over paths;
errors are UnitError naming the file relative to the source root.
"""

from __future__ import annotations

import os
import re
import string
from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

from ..base import load_json, read_metadata, read_metadata_bytes
from ..ir import UnitError
from upstream_adapters.limits import InputLimits

VIDEO_PREFIX = "observation.images."
# LeRobot v2.x defaults, used only to list episodes of a task folder whose info.json is missing/unreadable.
DEFAULT_DATA_PATH = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
DEFAULT_CHUNKS_SIZE = 1000

# Dataset-card licence ids (HF `license:` values) mapped to the IR's licence strings.
LICENCES = {
    "cc-by-4.0": "CC BY 4.0",
    "cc-by-sa-4.0": "CC BY-SA 4.0",
    "cc-by-nc-4.0": "CC BY-NC 4.0",
}


def stat(p: Path):
    try:
        st = os.stat(p)
        return (st.st_mtime_ns, st.st_size)
    except OSError:
        return None


def is_v3(tdir: Path, info: dict | None) -> bool:
    if (tdir / "meta" / "tasks.parquet").is_file():
        return True
    if isinstance(info, dict):
        if str(info.get("codebase_version", "")).startswith("v3"):
            return True
        if "{file_index" in str(info.get("data_path", "")):
            return True
    return False


def read_json_quiet(root: Path, rel_path: str, limits: InputLimits = InputLimits()):
    """A JSON file read by the metadata rule (base.read_metadata, base.load_json within `limits`); None when missing,
    unreadable or past a bound."""
    try:
        return load_json(read_metadata(root, rel_path, limits.max_metadata_bytes), rel_path, limits)
    except UnitError:
        return None


def read_jsonl_quiet(root: Path, rel_path: str, limits: InputLimits = InputLimits()) -> list:
    """The rows of a JSONL file, one line at a time: a line that is not UTF-8 or not JSON (or past a bound) costs only
    itself, never the other rows (the episodes it would have listed are still found by the data-file scan)."""
    try:
        data = read_metadata_bytes(root, rel_path, limits.max_metadata_bytes)
    except UnitError:
        return []
    rows = []
    for line in data.removeprefix(b"\xef\xbb\xbf").splitlines():
        line = line.strip()
        if line:
            try:
                rows.append(load_json(line, rel_path, limits))
            except UnitError:
                continue
    return rows


def fill(template: str, ep: int, chunks_size: int, video_key: str | None = None, file: str | None = None) -> str:
    fields = {
        "episode_chunk": ep // chunks_size,
        "chunk_index": ep // chunks_size,
        "episode_index": ep,
    }
    if video_key is not None:
        fields["video_key"] = video_key
    try:
        return template.format_map(fields)
    except (KeyError, IndexError, ValueError) as exc:
        raise UnitError(f"unsupported path template {template!r} in meta/info.json ({exc})", file=file) from None


def scan_template(tdir: Path, template: str) -> set[int]:
    """Episode indices of files under `tdir` matching a LeRobot path template (symlinks made by a download tool are followed)."""
    pattern = ""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError:
        return set()
    for literal, name, _spec, _conv in parsed:
        pattern += re.escape(literal)
        if name is None:
            continue
        pattern += (
            r"(?P<episode_index>\d+)" if name == "episode_index" and "(?P<episode_index>" not in pattern else r"[^/]+"
        )
    if "(?P<episode_index>" not in pattern:
        return set()
    rx = re.compile(pattern)
    top = template.split("/", 1)[0] if "/" in template else ""
    if not top or "{" in top:
        return set()
    base = tdir / top
    found: set[int] = set()
    if not base.is_dir():
        return found
    for dirpath, _dirs, files in os.walk(base, followlinks=True):
        reldir = Path(dirpath).relative_to(tdir).as_posix()
        for f in files:
            m = rx.fullmatch(f"{reldir}/{f}")
            if m:
                found.add(int(m.group("episode_index")))
    return found


def read_parquet(path: Path, rel_path: str, columns: Sequence[str]) -> pa.Table:
    """The `columns` a parquet file has; UnitError naming the file when it cannot be read."""
    try:
        # one open for schema and data (read_schema + read_table parsed the footer twice); no reader threads: the
        # episode files are small and ingest already keeps a core busy per process
        pf = pq.ParquetFile(path)
        names = pf.schema_arrow.names
        return pf.read(columns=[c for c in columns if c in names], use_threads=False)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise UnitError(f"episode parquet cannot be read: {exc}", file=rel_path) from None


def matrix(table: pa.Table, name: str, features: dict, rel_path: str) -> np.ndarray | None:
    """A fixed-width list column as an (n, k) float64 matrix (nulls -> NaN); None when the column is absent."""
    if name not in table.column_names:
        return None
    arr = table.column(name).combine_chunks()
    n = len(arr)
    shape = (features.get(name) or {}).get("shape")
    width = int(shape[0]) if isinstance(shape, list) and len(shape) == 1 and isinstance(shape[0], int) else None
    if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type) or pa.types.is_fixed_size_list(arr.type)):
        raise UnitError(f"column {name} is {arr.type}, not a list column", file=rel_path)
    lengths = pc.list_value_length(arr).to_numpy(zero_copy_only=False)
    valid = ~np.isnan(lengths.astype(np.float64)) if arr.null_count else np.ones(n, bool)
    present = lengths[valid].astype(np.int64)
    if len(present) and (present.min() != present.max()):
        raise UnitError(f"column {name} has ragged lists (lengths {present.min()}..{present.max()})", file=rel_path)
    k = int(present[0]) if len(present) else (width or 0)
    if width is not None and k != width:
        raise UnitError(f"column {name} has width {k}, meta/info.json says {width}", file=rel_path)
    out = np.full((n, k), np.nan)
    if k and valid.any():
        vals = arr.filter(pa.array(valid)).flatten() if arr.null_count else arr.flatten()
        out[valid] = vals.to_numpy(zero_copy_only=False).astype(np.float64).reshape(-1, k)
    return out


def card_licence(root: Path, rel_path: str) -> str | None:
    """The `license:` of a Hugging Face dataset card's YAML front matter (read by the metadata rule), mapped to the
    IR's strings; None when there is no readable card or it states no licence."""
    try:
        text = read_metadata(root, rel_path)
    except UnitError:
        return None
    if not text.startswith("---"):
        return None
    end = text.find("\n---", 3)
    if end < 0:
        return None
    try:
        front = yaml.safe_load(text[3:end])
    except yaml.YAMLError:
        return None
    if not isinstance(front, dict):
        return None
    lic = front.get("license")
    if isinstance(lic, list):
        lic = lic[0] if len(lic) == 1 else None
    if not isinstance(lic, str) or not lic.strip():
        return None
    lic = lic.strip()
    if lic.lower() == "other":
        name = front.get("license_name")
        return str(name) if isinstance(name, str) and name.strip() else None
    return LICENCES.get(lic.lower(), lic)


def feature_names(feature) -> list[str] | None:
    names = feature.get("names") if isinstance(feature, dict) else None
    if isinstance(names, dict) and len(names) == 1:
        names = next(iter(names.values()))
    if isinstance(names, list) and all(isinstance(x, str) for x in names):
        return [x.lower() for x in names]
    return None


def names_swapped(feature, half: int) -> bool:
    """True when info.json names say the first half is the right arm and the second the left."""
    names = feature_names(feature)
    if not names or len(names) != 2 * half:
        return False
    first, second = names[:half], names[half:]
    return all("right" in x for x in first) and all("left" in x for x in second)


def arm_slices(m: np.ndarray | None, feature, notes: list[str], name: str) -> dict[str, slice] | None:
    """Per-arm first-three-entry slices of a two-arm vector (left half first unless info.json names say otherwise)."""
    if m is None:
        return None
    k = m.shape[1]
    if k < 6 or k % 2:
        notes.append(f"{name} has width {k}, not two arms of >= 3: its channels are null")
        return None
    half = k // 2
    left, right = slice(0, 3), slice(half, half + 3)
    if names_swapped(feature, half):
        left, right = right, left
    return {"left": left, "right": right}


def parse_info(info: dict, info_rel: str) -> tuple[float, str, str | None, dict, dict[str, str], int]:
    """(fps, data_path, video_path, features, {camera: video feature key}, chunks_size) of a v2.x/v3.0 info.json."""
    version = str(info.get("codebase_version", ""))
    if version and not version.startswith(("v2", "v3")):
        raise UnitError(f"unsupported LeRobot codebase_version {version!r} (expected v2.x or v3.0)", file=info_rel)
    fps = info.get("fps")
    if not isinstance(fps, (int, float)) or not fps > 0:
        raise UnitError(f"meta/info.json has no valid fps ({fps!r})", file=info_rel)
    data_path = info.get("data_path")
    if not isinstance(data_path, str) or not data_path:
        raise UnitError("meta/info.json has no data_path template", file=info_rel)
    video_path = info.get("video_path")
    features = info.get("features")
    if not isinstance(features, dict):
        raise UnitError("meta/info.json has no features", file=info_rel)
    video_keys = {
        (k[len(VIDEO_PREFIX) :] if k.startswith(VIDEO_PREFIX) else k): k
        for k, f in features.items()
        if isinstance(f, dict) and f.get("dtype") == "video"
    }
    chunks = info.get("chunks_size")
    chunks = chunks if isinstance(chunks, int) and chunks > 0 else DEFAULT_CHUNKS_SIZE
    return fps, data_path, video_path, features, video_keys, chunks
