"""RH20T adapter: the resized/mp4 release (`RH20T_cfgN/` folders and/or `RH20T_cfgN.tar.gz` archives).

Layout (reference: upstream-formats.md §3):

    <root>/RH20T_cfg2/                                    extracted folder, and/or
    <root>/RH20T_cfg2.tar.gz                              the archive as downloaded (top-level dir RH20T_cfg2/)
        calib/<ts>/{intrinsics,extrinsics,tcp}.npy        (not needed by the IR)
        task_0059_user_0007_scene_0006_cfg_0002/          one robot scene = one unit (unit_type `recording`)
            metadata.json                                 finish_time, rating, calib, calib_quality (+ maybe more)
            cam_<serial>/color.mp4, cam_<serial>/timestamps.npy   {'color': [ms...], 'depth': [...]}
            transformed/{tcp_base,force_torque_base,gripper}.npy  pickled dicts keyed by camera serial
        task_..._human[_N]/                               paired human demo: skipped, never a unit

A root that is itself an extracted `RH20T_cfgN/` folder (scene folders directly inside) is accepted as well.

Decisions (documented in the module so the quarantine reasons make sense):
- Required per scene: metadata.json, the primary camera's color.mp4 + timestamps.npy, transformed/tcp_base.npy,
  transformed/force_torque_base.npy and transformed/gripper.npy (the reference loaders skip scenes missing them).
  A missing one is a UnitError naming the file.
- Clock: timestamps.npy['color'] (ms Unix) must be strictly increasing integers; frame i of color.mp4 is
  timestamps[i] [I]. If the video's frame count differs from the timestamp count by at most
  `max_frame_count_mismatch` (default 1) the unit keeps the common prefix; a larger difference is a UnitError.
- Signals (arm `single`) come from the primary camera's entries of the transformed dicts, matched to each frame's
  timestamp by the nearest sample within `sync_tolerance_ms` (default 100 ms, as the OXE converter); otherwise
  null. pos = tcp_base xyz (m); gripper_width = gripper_info[0]; force = |zeroed[:3]| of force_torque_base;
  speed and gripper_effort are null (RH20T's transformed/ data has no TCP velocity or gripper effort).
- Archives are read without extracting: the first access indexes the tar members in one pass and keeps zlib
  checkpoints, so reading a scene later costs at most one checkpoint span of decompression. The index lives in
  this adapter object (per process). A damaged archive (corrupt or truncated gzip/tar) is never trusted: its
  scenes seen before the damage are listed and each fails with a UnitError naming the damage, the problem is
  recorded in `self.issues`, and other folders/archives still read. SourceError only if nothing is usable.
- All .npy files except plain arrays are pickles; they are loaded with a restricted unpickler that only admits
  numpy array/scalar reconstruction, never arbitrary objects.
"""

from __future__ import annotations

import bisect
import io
import json
import logging
import math
import os
import pickle
import re
import tarfile
import threading
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pyarrow as pa

from . import video
from .base import check_unit_id, require_root, safe_join
from .ir import (
    FRAMES_SCHEMA,
    SEGMENTS_SCHEMA,
    SIGNALS_SCHEMA,
    SourceError,
    UnitError,
    UnitIR,
    empty,
)

log = logging.getLogger(__name__)

SCENE_RE = re.compile(r"task_(\d+)_user_(\d+)_scene_(\d+)_cfg_(\d+)")
HUMAN_RE = re.compile(r"task_\d+_user_\d+_scene_\d+_cfg_\d+_human(?:_\d+)?")
CFG_DIR_RE = re.compile(r"RH20T_cfg(\d+)")
CFG_TAR_RE = re.compile(r"RH20T_cfg(\d+)\.tar\.gz")
CAMERA_RE = re.compile(r"[A-Za-z0-9_-]+")

REQUIRED_TRANSFORMED = ("transformed/tcp_base.npy", "transformed/force_torque_base.npy", "transformed/gripper.npy")


def licence_for_scene(scene_number: int) -> str:
    """RH20T licence per scene id (project page): scenes 1-5 CC BY-SA 4.0, 6-10 CC BY-NC 4.0."""
    if 1 <= scene_number <= 5:
        return "CC BY-SA 4.0"
    if 6 <= scene_number <= 10:
        return "CC BY-NC 4.0"
    return "unknown"


def parse_scene_name(name: str) -> dict:
    """Ids of a robot scene folder name; ValueError if it is not one (human folders are not)."""
    m = SCENE_RE.fullmatch(name)
    if not m:
        raise ValueError(f"{name!r} is not an RH20T robot scene folder name")
    return {
        "task_id": name.split("_user_")[0],
        "operator_id": f"user_{m.group(2)}",
        "scene_id": f"scene_{m.group(3)}",
        "config_id": f"cfg_{m.group(4)}",
        "scene_number": int(m.group(3)),
        "cfg_number": int(m.group(4)),
    }


# ---------------------------------------------------------------------------------------------------------------
# Restricted loading of RH20T's pickled .npy dicts
# ---------------------------------------------------------------------------------------------------------------

_NUMPY_ALIASES = {"numpy.core.multiarray": "numpy._core.multiarray", "numpy.core.numeric": "numpy._core.numeric"}
_ALLOWED_GLOBALS = {
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy._core.numeric", "_frombuffer"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("collections", "OrderedDict"),
    ("_codecs", "encode"),  # how pickle protocol <= 2 stores bytes
}


class _NumpyOnlyUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        module = _NUMPY_ALIASES.get(module, module)
        if (module, name) in _ALLOWED_GLOBALS or (module == "numpy.dtypes" and name.endswith("DType")):
            import importlib

            return getattr(importlib.import_module(module), name)
        raise pickle.UnpicklingError(f"pickled object {module}.{name} is not allowed")


def load_npy(data: bytes):
    """np.load(allow_pickle=True).item() semantics for RH20T files, without executing arbitrary pickles."""
    from numpy.lib import format as npf

    bio = io.BytesIO(data)
    version = npf.read_magic(bio)
    if version == (1, 0):
        shape, fortran, dtype = npf.read_array_header_1_0(bio)
    elif version == (2, 0):
        shape, fortran, dtype = npf.read_array_header_2_0(bio)
    else:
        shape, fortran, dtype = npf._read_array_header(bio, version)  # (3, 0): utf-8 header
    if dtype.hasobject:
        arr = _NumpyOnlyUnpickler(bio).load()
    else:
        arr = np.load(io.BytesIO(data), allow_pickle=False)
    if isinstance(arr, np.ndarray) and arr.dtype.hasobject and arr.shape == ():
        return arr.item()
    return arr


# ---------------------------------------------------------------------------------------------------------------
# Random access into a .tar.gz without extracting it
# ---------------------------------------------------------------------------------------------------------------

_CHUNK = 1 << 16


class ArchiveDamaged(Exception):
    """The gzip or tar structure of an archive is broken."""


class _Checkpoints:
    """Decompressor snapshots along one gzip file: (uncompressed pos, compressed pos, zlib state or None)."""

    def __init__(self, span: int):
        self.span = span
        self.upos = [0]
        self.points: list[tuple[int, int, object]] = [(0, 0, None)]
        self.lock = threading.Lock()

    def want(self, upos: int) -> bool:
        return upos >= self.upos[-1] + self.span

    def add(self, upos: int, cpos: int, state) -> None:
        with self.lock:
            if upos >= self.upos[-1] + self.span:
                self.upos.append(upos)
                self.points.append((upos, cpos, state))

    def best(self, target: int) -> tuple[int, int, object]:
        with self.lock:
            return self.points[bisect.bisect_right(self.upos, target) - 1]


class _GzReader:
    """A forward reader of the uncompressed bytes of a (possibly multi-member) gzip file, seekable through
    checkpoints. Raises ArchiveDamaged on corrupt data, a failed CRC, truncation or trailing garbage."""

    def __init__(self, fh, checkpoints: _Checkpoints):
        self._fh = fh
        self._cps = checkpoints
        self._restore(checkpoints.points[0])

    def _restore(self, point) -> None:
        upos, cpos, state = point
        self._d = state.copy() if state is not None else zlib.decompressobj(31)
        self._cpos = cpos
        self._upos = upos
        self._buf = b""
        self._off = 0
        self._eof = False

    def _fill(self) -> None:
        if self._d.eof:  # one gzip member ended: another member, zero padding, or the end
            self._fh.seek(self._cpos)
            head = self._fh.read(2)
            if not head:
                self._eof = True
                return
            if head != b"\x1f\x8b":
                rest = head + self._fh.read(1 << 20)
                if rest.strip(b"\0") or self._fh.read(1):
                    raise ArchiveDamaged("unexpected bytes after the end of the gzip stream")
                self._eof = True
                return
            self._d = zlib.decompressobj(31)
        self._fh.seek(self._cpos)
        raw = self._fh.read(_CHUNK)
        if not raw:
            raise ArchiveDamaged(f"gzip stream ends early at byte {self._cpos} (truncated archive)")
        try:
            out = self._d.decompress(raw)
        except zlib.error as exc:
            raise ArchiveDamaged(f"corrupt gzip data near byte {self._cpos} ({exc})") from None
        self._cpos += len(raw) - (len(self._d.unused_data) if self._d.eof else 0)
        self._buf, self._off = out, 0
        end = self._upos + len(out)
        if not self._d.eof and self._cps.want(end):
            self._cps.add(end, self._cpos, self._d.copy())

    def tell(self) -> int:
        return self._upos

    def read(self, n: int = -1) -> bytes:
        parts = []
        need = n if n is not None and n >= 0 else math.inf
        while need > 0:
            avail = len(self._buf) - self._off
            if not avail:
                if self._eof:
                    break
                self._fill()
                continue
            take = int(min(avail, need))
            parts.append(self._buf[self._off:self._off + take])
            self._off += take
            self._upos += take
            need -= take
        return b"".join(parts)

    def _skip(self, n: int) -> None:
        while n > 0:
            avail = len(self._buf) - self._off
            if not avail:
                if self._eof:
                    raise ArchiveDamaged("tar member data runs past the end of the archive")
                self._fill()
                continue
            take = min(avail, n)
            self._off += take
            self._upos += take
            n -= take

    def seek(self, target: int, whence: int = 0) -> int:
        if whence == 1:
            target += self._upos
        elif whence != 0:
            raise io.UnsupportedOperation("seek from the end of a gzip stream")
        if target == self._upos:
            return target
        point = self._cps.best(target)
        if target < self._upos or point[0] > self._upos + self._cps.span:
            self._restore(point)
        self._skip(target - self._upos)
        return target

    def drain(self) -> None:
        """Read to the end (verifies every gzip member's CRC and length)."""
        while True:
            self._upos += len(self._buf) - self._off
            self._buf, self._off = b"", 0
            if self._eof:
                return
            self._fill()


@dataclass
class _Member:
    name: str  # full member name inside the tar (normalised: no leading ./)
    offset: int  # uncompressed offset of the data
    size: int
    kind: str  # file | dir | link | other


@dataclass
class _Archive:
    """Member index of one RH20T_cfgN.tar.gz, built in a single pass."""

    rel: str  # archive path relative to the root
    key: tuple
    checkpoints: _Checkpoints
    scenes: dict[str, dict[str, _Member]] = field(default_factory=dict)  # scene -> {path in scene: member}
    human: set[str] = field(default_factory=set)
    ignored: list[str] = field(default_factory=list)  # unsafe member names (.., absolute)
    damage: str | None = None

    @classmethod
    def build(cls, path: Path, rel: str, key: tuple, span: int | None = None) -> "_Archive":
        span = span or max(16 << 20, key[1] // 1024)  # <= ~1000 checkpoints of ~40 KB each
        arc = cls(rel=rel, key=key, checkpoints=_Checkpoints(span))
        try:
            with open(path, "rb") as fh:
                reader = _GzReader(fh, arc.checkpoints)
                with tarfile.open(fileobj=reader, mode="r:") as tf:
                    for ti in tf:
                        arc._record(ti)
                reader.drain()
        except (ArchiveDamaged, tarfile.TarError, EOFError, OSError, zlib.error, ValueError) as exc:
            arc.damage = f"{type(exc).__name__}: {exc}" if not isinstance(exc, ArchiveDamaged) else str(exc)
        return arc

    def _record(self, ti: tarfile.TarInfo) -> None:
        name = ti.name
        while name.startswith("./"):
            name = name[2:]
        parts = name.split("/")
        if name.startswith("/") or any(p in ("", ".", "..") for p in parts):
            self.ignored.append(name)
            return
        kind = "file" if ti.isreg() else "dir" if ti.isdir() else "link" if (ti.issym() or ti.islnk()) else "other"
        if len(parts) >= 2 and CFG_DIR_RE.fullmatch(parts[0]):
            parts = parts[1:]
        if SCENE_RE.fullmatch(parts[0]):
            self.scenes.setdefault(parts[0], {})["/".join(parts[1:])] = _Member(name, ti.offset_data, ti.size, kind)
        elif HUMAN_RE.fullmatch(parts[0]):
            self.human.add(parts[0])

    def read(self, path: Path, members: Iterable[_Member]) -> dict[str, bytes]:
        """Read several members in one forward pass (sorted by offset)."""
        out: dict[str, bytes] = {}
        with open(path, "rb") as fh:
            reader = _GzReader(fh, self.checkpoints)
            for m in sorted(members, key=lambda m: m.offset):
                reader.seek(m.offset)
                data = reader.read(m.size)
                if len(data) != m.size:
                    raise ArchiveDamaged(f"member {m.name} is cut short")
                out[m.name] = data
        return out


# ---------------------------------------------------------------------------------------------------------------
# A scene, wherever it is stored
# ---------------------------------------------------------------------------------------------------------------


class _FolderScene:
    def __init__(self, root: Path, prefix: str, scene: str):
        self.root, self.prefix, self.scene = root, prefix, scene
        self.base = safe_join(root, f"{prefix}{scene}")  # refuses a symlinked scene dir pointing outside
        if not self.base.is_dir():
            raise UnitError("scene folder is not a directory", file=f"{prefix}{scene}")

    def where(self, rel: str) -> str:
        return f"{self.prefix}{self.scene}/{rel}"

    def cameras(self) -> list[str]:
        out = []
        for entry in os.scandir(self.base):
            if entry.name.startswith("cam_") and os.path.isfile(os.path.join(entry.path, "color.mp4")):
                out.append(entry.name[4:])
        return sorted(out)

    def _path(self, rel: str) -> Path:
        p = safe_join(self.root, self.where(rel))
        if not p.is_file():
            raise UnitError(f"missing {rel}", file=self.where(rel))
        return p

    def read(self, rels: Sequence[str]) -> dict[str, bytes]:
        out = {}
        for rel in rels:
            p = self._path(rel)
            try:
                out[rel] = p.read_bytes()
            except OSError as exc:
                raise UnitError(f"cannot read {rel}: {exc.strerror}", file=self.where(rel)) from None
        return out

    def video(self, rel: str, data: dict[str, bytes] | None = None):
        return self._path(rel)


class _TarScene:
    def __init__(self, root: Path, archive: _Archive, scene: str):
        self.root, self.archive, self.scene = root, archive, scene
        self.path = safe_join(root, archive.rel)
        self.members = archive.scenes[scene]
        if archive.damage:
            raise UnitError(f"archive {archive.rel} is damaged, its scenes are not trusted: {archive.damage}",
                            file=archive.rel)
        top = self.members.get("")
        if top is not None and top.kind not in ("dir",):
            raise UnitError("scene folder is a link inside the archive (refused)", file=self.where(""))

    def where(self, rel: str) -> str:
        m = self.members.get(rel)
        name = m.name if m else f"{self.scene}/{rel}"
        return f"{self.archive.rel}:{name}"

    def cameras(self) -> list[str]:
        return sorted({rel.split("/")[0][4:] for rel, m in self.members.items()
                       if rel.startswith("cam_") and rel.endswith("/color.mp4") and rel.count("/") == 1})

    def _member(self, rel: str) -> _Member:
        m = self.members.get(rel)
        if m is None:
            raise UnitError(f"missing {rel}", file=self.where(rel))
        if m.kind != "file":
            raise UnitError(f"{rel} is not a regular file in the archive ({m.kind}; links are refused)",
                            file=self.where(rel))
        return m

    def read(self, rels: Sequence[str]) -> dict[str, bytes]:
        members = {rel: self._member(rel) for rel in rels}
        try:
            got = self.archive.read(self.path, members.values())
        except (ArchiveDamaged, OSError) as exc:
            raise UnitError(f"cannot read scene from archive {self.archive.rel}: {exc}",
                            file=self.archive.rel) from None
        return {rel: got[m.name] for rel, m in members.items()}

    def video(self, rel: str, data: dict[str, bytes] | None = None):
        if data is not None and rel in data:
            return data[rel]
        return self.read([rel])[rel]


# ---------------------------------------------------------------------------------------------------------------
# Parsing helpers
# ---------------------------------------------------------------------------------------------------------------


def _int_ms(values, what: str, where: str) -> np.ndarray:
    try:
        arr = np.asarray(values)
    except Exception:  # noqa: BLE001 - any unconvertible content
        raise UnitError(f"{what} is not a list of millisecond timestamps", file=where) from None
    if arr.ndim != 1 or arr.size == 0:
        raise UnitError(f"{what} is empty or not one-dimensional", file=where)
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64)
    if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
        return arr.astype(np.int64)
    if arr.dtype.kind == "O":
        try:
            ints = np.array([int(v) for v in arr], dtype=np.int64)
        except (TypeError, ValueError):
            raise UnitError(f"{what} holds non-integer values", file=where) from None
        if all(float(a) == float(v) for a, v in zip(ints, arr)):
            return ints
    raise UnitError(f"{what} holds non-integer values", file=where)


def _serial_entry(obj, camera: str, rel: str, where: str):
    if not isinstance(obj, dict):
        raise UnitError(f"{rel} is not a dict keyed by camera serial", file=where)
    for key in (camera, int(camera) if camera.isdigit() else None):
        if key is not None and key in obj:
            return obj[key]
    raise UnitError(f"{rel} has no entry for camera {camera} (has {sorted(map(str, obj))[:6]})", file=where)


def _as_float(v, n: int) -> np.ndarray | None:
    """v as a float vector with at least n finite leading values, else None."""
    try:
        a = np.asarray(v, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        return None
    if a.size < n or not np.all(np.isfinite(a[:n])):
        return None
    return a


def _samples(entries, rel: str, where: str, value_fn) -> tuple[np.ndarray, np.ndarray]:
    """(sorted unique ms timestamps, values (m, k) with NaN where a sample lacks the field) from either a list of
    {'timestamp': ms, ...} dicts (tcp, force_torque) or a {ms: {...}} dict (gripper)."""
    if isinstance(entries, dict):
        items = list(entries.items())
    elif isinstance(entries, (list, tuple)):
        items = [(e.get("timestamp") if isinstance(e, dict) else None, e) for e in entries]
    else:
        raise UnitError(f"{rel}: per-camera data is neither a list nor a dict", file=where)
    ts, vals = [], []
    for t, e in items:
        try:
            t = int(t)
        except (TypeError, ValueError):
            continue
        ts.append(t)
        vals.append(value_fn(e) if isinstance(e, dict) else None)
    if not ts:
        raise UnitError(f"{rel} has no timestamped samples for the primary camera", file=where)
    width = max((len(v) for v in vals if v is not None), default=1)
    out = np.full((len(ts), width), np.nan)
    for i, v in enumerate(vals):
        if v is not None:
            out[i, :len(v)] = v
    ts_arr = np.asarray(ts, dtype=np.int64)
    order = np.argsort(ts_arr, kind="stable")
    ts_arr, out = ts_arr[order], out[order]
    keep = np.ones(len(ts_arr), bool)
    keep[1:] = ts_arr[1:] != ts_arr[:-1]
    return ts_arr[keep], out[keep]


def _nearest(sample_ts: np.ndarray, values: np.ndarray, query: np.ndarray, tol: float) -> np.ndarray:
    """values of the nearest sample (ties: the earlier one) within tol ms of each query time, NaN otherwise."""
    m = len(sample_ts)
    pos = np.searchsorted(sample_ts, query)
    left = np.clip(pos - 1, 0, m - 1)
    right = np.clip(pos, 0, m - 1)
    dl = np.abs(query - sample_ts[left])
    dr = np.abs(sample_ts[right] - query)
    pick = np.where(dr < dl, right, left)
    ok = np.minimum(dl, dr) <= tol
    out = values[pick].astype(np.float64)
    out[~ok] = np.nan
    return out


def _col(arr: np.ndarray) -> pa.Array:
    arr = np.asarray(arr, dtype=np.float64)
    return pa.array(arr, type=pa.float64(), mask=np.isnan(arr))


# ---------------------------------------------------------------------------------------------------------------
# The adapter
# ---------------------------------------------------------------------------------------------------------------


class Rh20tAdapter:
    slug = "rh20t"
    name = "RH20T"
    unit_type = "recording"

    def __init__(self, camera: str = "036422060215", cfgs: Sequence[str | int] | None = ("cfg2",),
                 sync_tolerance_ms: float = 100.0, max_frame_count_mismatch: int = 1):
        camera = str(camera)
        if camera.startswith("cam_"):
            camera = camera[4:]
        if not CAMERA_RE.fullmatch(camera):
            raise ValueError(f"invalid RH20T camera serial {camera!r}")
        self.camera = camera
        self.cfgs = None if cfgs is None else frozenset(self._cfg_number(c) for c in cfgs)
        self.sync_tolerance_ms = float(sync_tolerance_ms)
        self.max_frame_count_mismatch = int(max_frame_count_mismatch)
        self.issues: list[tuple[str, str]] = []  # (file relative to root, reason) found by discover()
        self._archives: dict[str, _Archive] = {}
        self._lock = threading.Lock()
        self._languages: dict[str, tuple[tuple, dict]] = {}

    @staticmethod
    def _cfg_number(c) -> int:
        m = re.fullmatch(r"(?:RH20T_)?(?:cfg_?)?0*(\d+)", str(c).strip())
        if not m:
            raise ValueError(f"invalid RH20T cfg {c!r} (expected e.g. 'cfg2')")
        return int(m.group(1))

    def _selected(self, n: int) -> bool:
        return self.cfgs is None or n in self.cfgs

    # -- containers -----------------------------------------------------------------------------------------------

    def _containers(self, root: Path) -> tuple[list[tuple[str, str, int]], list[str]]:
        """[(kind 'dir'|'tar'|'root', name relative to root, cfg number)] present in root, and unselected names."""
        found, skipped = [], []
        names = sorted(os.listdir(root))
        for n in names:
            m_dir, m_tar = CFG_DIR_RE.fullmatch(n), CFG_TAR_RE.fullmatch(n)
            if m_dir and os.path.isdir(os.path.join(root, n)):
                kind, cfg = "dir", int(m_dir.group(1))
            elif m_tar and os.path.isfile(os.path.join(root, n)):
                kind, cfg = "tar", int(m_tar.group(1))
            else:
                continue
            (found if self._selected(cfg) else skipped).append((kind, n, cfg))
        if not found and not skipped and any(SCENE_RE.fullmatch(n) for n in names):
            found.append(("root", "", -1))  # the root is itself an extracted RH20T_cfgN folder
        return found, [n for _, n, _ in skipped]

    def _archive(self, root: Path, name: str) -> _Archive:
        path = safe_join(root, name)
        st = os.stat(path)
        key = (os.path.realpath(path), st.st_size, st.st_mtime_ns)
        with self._lock:
            arc = self._archives.get(key[0])
            if arc is None or arc.key != key:
                arc = _Archive.build(path, name, key)
                self._archives[key[0]] = arc
        return arc

    def _folder_scenes(self, root: Path, prefix: str) -> list[str]:
        base = Path(root, prefix) if prefix else Path(root)
        out = []
        for entry in os.scandir(base):
            if SCENE_RE.fullmatch(entry.name) and (entry.is_dir() or entry.is_symlink()):
                out.append(entry.name)
        return out

    def discover(self, root: Path) -> list[str]:
        root = require_root(root, self.slug)
        self.issues = []
        containers, skipped = self._containers(root)
        if not containers:
            if skipped:
                raise SourceError(f"rh20t: root {root.name!r} holds {skipped} but none of the selected cfgs "
                                  f"{sorted(f'cfg{c}' for c in self.cfgs or [])}")
            raise SourceError(f"rh20t: root {root.name!r} holds no RH20T_cfgN/ folder, RH20T_cfgN.tar.gz archive "
                              "or robot scene folder (expected the RH20T resized release layout)")
        ids: set[str] = set()
        readable = 0
        for kind, name, cfg in containers:
            healthy = True
            if kind == "tar":
                try:
                    arc = self._archive(root, name)
                except (UnitError, OSError) as exc:  # e.g. a symlink pointing outside the root
                    self.issues.append((name, f"archive not read: {getattr(exc, 'reason', None) or exc}"))
                    continue
                healthy = arc.damage is None
                if arc.damage:
                    self.issues.append((name, f"damaged archive: {arc.damage}"))
                    log.warning("rh20t: archive %s is damaged (%s); %d scenes seen before the damage will be "
                                "quarantined", name, arc.damage, len(arc.scenes))
                for bad in arc.ignored[:20]:
                    self.issues.append((name, f"unsafe member name ignored: {bad!r}"))
                scenes = list(arc.scenes)
            else:
                scenes = self._folder_scenes(root, name)
            for s in scenes:
                scfg = parse_scene_name(s)["cfg_number"]
                if kind == "root" and not self._selected(scfg):
                    continue
                if kind != "root" and scfg != cfg:
                    self.issues.append((f"{name}/{s}" if kind == "dir" else name,
                                        f"scene of cfg {scfg} inside {name} ignored"))
                    continue
                ids.add(s)
                readable += healthy
        if not readable:  # only scenes of damaged archives (or none at all): nothing can be read
            detail = "; ".join(f"{f}: {r}" for f, r in self.issues) or "no robot scene folders found"
            raise SourceError(f"rh20t: root {root.name!r} has no readable RH20T scenes ({detail})")
        return sorted(ids)

    def _locate(self, root: Path, unit_id: str):
        check_unit_id(unit_id)
        try:
            ids = parse_scene_name(unit_id)
        except ValueError as exc:
            raise UnitError(str(exc)) from None
        if not self._selected(ids["cfg_number"]):
            raise UnitError(f"scene {unit_id} belongs to a cfg that is not selected ({sorted(self.cfgs or [])})")
        root = Path(root)
        if not root.is_dir():
            raise UnitError(f"source root {root.name!r} is not a directory")
        containers, _ = self._containers(root)
        for kind, name, cfg in containers:  # extracted folders win over archives (sorted: dir name < tar name)
            if kind in ("dir", "root") and (kind == "root" or cfg == ids["cfg_number"]):
                prefix = f"{name}/" if name else ""
                if os.path.lexists(os.path.join(root, prefix, unit_id)):
                    return _FolderScene(root, prefix, unit_id), ids
        for kind, name, cfg in containers:
            if kind == "tar" and cfg == ids["cfg_number"]:
                arc = self._archive(root, name)
                if unit_id in arc.scenes:
                    return _TarScene(root, arc, unit_id), ids
        raise UnitError(f"scene {unit_id} not found under RH20T_cfg{ids['cfg_number']}/ or "
                        f"RH20T_cfg{ids['cfg_number']}.tar.gz")

    # -- language -------------------------------------------------------------------------------------------------

    def _language(self, root: Path, unit_id: str) -> str | None:
        p = Path(root, "task_description.json")
        if not p.is_file():
            return None
        st = p.stat()
        key = (st.st_size, st.st_mtime_ns)
        cached = self._languages.get(str(p))
        if cached is None or cached[0] != key:
            try:
                table = json.loads(p.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                table = {}
            self._languages[str(p)] = cached = (key, table if isinstance(table, dict) else {})
        entry = cached[1].get(unit_id[:9])
        if isinstance(entry, dict):
            text = entry.get("task_description_english")
            return text.strip() if isinstance(text, str) and text.strip() else None
        return entry.strip() if isinstance(entry, str) and entry.strip() else None

    # -- units ----------------------------------------------------------------------------------------------------

    def read_unit(self, root: Path, unit_id: str) -> UnitIR:
        scene, ids = self._locate(root, unit_id)
        cam = self.camera
        cameras = scene.cameras()
        if cam not in cameras:
            raise UnitError(f"primary camera {cam} has no color.mp4 (cameras: {cameras})",
                            file=scene.where(f"cam_{cam}"))
        rel_ts, rel_mp4 = f"cam_{cam}/timestamps.npy", f"cam_{cam}/color.mp4"
        rels = ["metadata.json", rel_ts, *REQUIRED_TRANSFORMED, rel_mp4]
        if isinstance(scene, _FolderScene):
            rels.remove(rel_mp4)  # decoded from the file path
        data = scene.read(rels)

        # metadata.json
        try:
            meta = json.loads(data["metadata.json"].decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise UnitError("metadata.json is not valid JSON", file=scene.where("metadata.json")) from None
        if not isinstance(meta, dict):
            raise UnitError("metadata.json is not a JSON object", file=scene.where("metadata.json"))
        notes: list[str] = []  # assumptions/repairs for this unit (kept in UnitIR.notes, not fatal)
        rating = meta.get("rating")
        if "rating" not in meta:
            notes.append("metadata.json has no 'rating': rating is null")
        if rating is not None:
            if isinstance(rating, bool) or not isinstance(rating, (int, float)) or rating != int(rating):
                raise UnitError(f"metadata.json rating {rating!r} is not an integer", file=scene.where("metadata.json"))
            rating = int(rating)

        def npy(rel):
            try:
                return load_npy(data[rel])
            except (ValueError, EOFError, pickle.UnpicklingError, OSError, TypeError, AttributeError,
                    IndexError, KeyError) as exc:
                raise UnitError(f"{rel} cannot be loaded: {exc}", file=scene.where(rel)) from None

        # clock
        tsobj = npy(rel_ts)
        if not isinstance(tsobj, dict) or "color" not in tsobj:
            raise UnitError(f"{rel_ts} is not a dict with a 'color' list", file=scene.where(rel_ts))
        ts = _int_ms(tsobj["color"], f"{rel_ts}['color']", scene.where(rel_ts))
        if np.any(np.diff(ts) <= 0):
            raise UnitError(f"{rel_ts}['color'] is not strictly increasing", file=scene.where(rel_ts))

        # video: frame count must match the clock (frame i <-> timestamps[i])
        src = scene.video(rel_mp4, data)
        try:
            n_video = video.count_frames(src)
            if n_video:
                video.read_frames(src, [0])
        except video.DecodeError as exc:
            raise UnitError(f"{rel_mp4} is unreadable: {exc}", file=scene.where(rel_mp4)) from None
        if n_video == 0:
            raise UnitError(f"{rel_mp4} has no frames", file=scene.where(rel_mp4))
        if n_video != len(ts):
            if abs(n_video - len(ts)) > self.max_frame_count_mismatch:
                raise UnitError(f"{rel_mp4} has {n_video} frames but {rel_ts}['color'] has {len(ts)} timestamps "
                                f"(tolerance {self.max_frame_count_mismatch})", file=scene.where(rel_mp4))
            notes.append(f"{rel_mp4} has {n_video} frames but {rel_ts}['color'] has {len(ts)} timestamps: "
                         f"kept the first {min(n_video, len(ts))} (frame i <-> timestamps[i])")
        n = min(n_video, len(ts))
        if n < 2:
            raise UnitError(f"{rel_mp4} has fewer than 2 timestamped frames", file=scene.where(rel_mp4))
        ts = ts[:n]
        t_sec = (ts - ts[0]) / 1000.0
        fps = 1000.0 / float(np.median(np.diff(ts)))

        # signals on the primary camera's frames
        tol = self.sync_tolerance_ms
        rel_tcp, rel_ft, rel_gr = REQUIRED_TRANSFORMED
        tcp_ts, tcp = _samples(_serial_entry(npy(rel_tcp), cam, rel_tcp, scene.where(rel_tcp)), rel_tcp,
                               scene.where(rel_tcp), lambda e: _as_float(e.get("tcp"), 3))
        ft_ts, ft = _samples(_serial_entry(npy(rel_ft), cam, rel_ft, scene.where(rel_ft)), rel_ft,
                             scene.where(rel_ft), lambda e: _as_float(e.get("zeroed"), 3))
        gr_ts, gr = _samples(_serial_entry(npy(rel_gr), cam, rel_gr, scene.where(rel_gr)), rel_gr,
                             scene.where(rel_gr), lambda e: _as_float(e.get("gripper_info"), 1))
        pos = [_nearest(tcp_ts, tcp[:, k], ts, tol) for k in range(3)] if tcp.shape[1] >= 3 else [
            np.full(n, np.nan)] * 3
        force = (_nearest(ft_ts, np.linalg.norm(ft[:, :3], axis=1), ts, tol) if ft.shape[1] >= 3
                 else np.full(n, np.nan))
        width = _nearest(gr_ts, gr[:, 0], ts, tol)
        for rel, chan, arr in ((rel_tcp, "pos", pos[0]), (rel_ft, "force", force), (rel_gr, "gripper_width", width)):
            k = int(np.isnan(arr).sum())
            if k:
                notes.append(f"{rel}: no usable sample within {tol:g} ms for {k} of {n} frames ({chan} null there)")

        frame_index = pa.array(np.arange(n, dtype=np.int64))
        t_col = pa.array(t_sec, type=pa.float64())
        frames = pa.table(
            {
                "source": pa.array([self.slug] * n, pa.string()),
                "unit_id": pa.array([unit_id] * n, pa.string()),
                "camera": pa.array([cam] * n, pa.string()),
                "frame_index": frame_index,
                "t_sec": t_col,
                "native_ts": pa.array(ts.astype(np.float64), type=pa.float64()),
            },
            schema=FRAMES_SCHEMA,
        )
        nulls = pa.nulls(n, pa.float64())
        signals = pa.table(
            {
                "source": pa.array([self.slug] * n, pa.string()),
                "unit_id": pa.array([unit_id] * n, pa.string()),
                "arm": pa.array(["single"] * n, pa.string()),
                "frame_index": frame_index,
                "t_sec": t_col,
                "pos_x": _col(pos[0]),
                "pos_y": _col(pos[1]),
                "pos_z": _col(pos[2]),
                "speed": nulls,  # RH20T transformed/ records no TCP velocity: never invented here
                "gripper_effort": nulls,
                "gripper_width": _col(width),
                "force": _col(force),
            },
            schema=SIGNALS_SCHEMA,
        )
        unit = {
            "source": self.slug,
            "unit_id": unit_id,
            "unit_type": self.unit_type,
            "task_id": ids["task_id"],
            "operator_id": ids["operator_id"],
            "scene_id": ids["scene_id"],
            "config_id": ids["config_id"],
            "taxonomy": None,
            "official_split": None,
            "cameras": cameras,
            "camera": cam,
            "fps": fps,
            "num_frames": int(n),
            "arm_layout": "single_arm",
            "licence": licence_for_scene(ids["scene_number"]),
            "rating": rating,
            "language": self._language(root, unit_id),
        }
        for note in notes:
            log.info("rh20t: %s: %s", unit_id, note)
        return UnitIR(unit=unit, frames=frames, signals=signals, segments=empty(SEGMENTS_SCHEMA), notes=notes)

    # -- frames ---------------------------------------------------------------------------------------------------

    def read_frames(self, root: Path, unit_id: str, camera: str, indices: Sequence[int]) -> dict[int, np.ndarray]:
        camera = str(camera)
        camera = camera[4:] if camera.startswith("cam_") else camera
        if not CAMERA_RE.fullmatch(camera):
            raise UnitError(f"invalid camera serial {camera!r}")
        idx = [int(i) for i in indices]
        if not idx:
            return {}
        scene, _ = self._locate(root, unit_id)
        rel = f"cam_{camera}/color.mp4"
        src = scene.video(rel)
        try:
            got = video.read_frames(src, idx)
        except video.DecodeError as exc:
            raise UnitError(f"{rel}: {exc}", file=scene.where(rel)) from None
        return {i: got[i] for i in idx}
