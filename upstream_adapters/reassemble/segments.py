"""REASSEMBLE segment annotations (`segments_info/<i>/...`, low_level children) -> rows of the IR `segments` table.

The mapping (levels, frame clipping, dropped segments, the index check) is described in reassemble.py's docstring.

How it reads: a recording holds thousands of tiny scalar datasets (start, end, success, text, index per segment,
~30 000 over the release sample's 37 files). Through h5py's high-level objects each cost a Group lookup, a Dataset
object, a datatype conversion and a selection (~0.2 ms: most of REASSEMBLE's ingest time). Here the groups are
walked and the scalars read with h5py's low-level ids (`h5d.open`, `DatasetID.read`), reading a scalar dataspace
as h5py's `Dataset[()]` does (a zero-dimensional array of the dataset's dtype, h5py's memory type for that dtype,
the whole selection, then `arr[()]`), so the values are the same; the dtype of each distinct HDF5 datatype is
converted once per file (`_Scalars`). A dataset that is not a scalar dataspace (an array, an empty dataspace) or a
link that is not a dataset goes through h5py's high-level `group[key][()]`, unchanged.
"""

from __future__ import annotations

import re

import h5py
import numpy as np
from h5py import h5d, h5g, h5o, h5s, h5t

from upstream_adapters.base import hdf5_read
from upstream_adapters.ir import UnitError
from upstream_adapters.limits import InputLimits

_INDEX_NAME = re.compile(r"\d+")


def _text(value) -> str:
    if isinstance(value, np.ndarray):
        value = value.item() if value.size == 1 else value.tobytes()
    if isinstance(value, (bytes, bytearray, np.bytes_)):
        value = bytes(value).decode("utf-8", errors="replace")
    return " ".join(str(value).replace("\x00", "").split())


class _Scalars:
    """Reads `group[key][()]` from low-level group ids (the fast path of the module docstring). The numpy dtype of
    each HDF5 datatype met is kept (a file holds a handful: float64, int64, bool, a few string lengths): h5py's
    conversion of a datatype to a dtype costs about as much as the read."""

    def __init__(self, relpath: str = "", limits: InputLimits = InputLimits()):
        self.relpath, self.limits = relpath, limits
        self._types: list[tuple[h5t.TypeID, np.dtype, h5t.TypeID]] = []

    def _dtype(self, ds: h5d.DatasetID) -> tuple[np.dtype, h5t.TypeID]:
        tid = ds.get_type()
        for known, dtype, mtype in self._types:
            if tid == known:  # H5Tequal: the same datatype, so h5py gives it the same dtype
                return dtype, mtype
        dtype = ds.dtype
        mtype = h5t.py_create(dtype)  # the memory type h5py's own read uses for this dtype
        self._types.append((tid, dtype, mtype))
        return dtype, mtype

    def __call__(self, gid: h5g.GroupID, key: str):
        """`group[key][()]` of the group `gid`, or None when `key` is not in it (as `key in group`)."""
        try:
            ds = h5d.open(gid, key.encode())  # KeyError: no such link, a dangling one, or not a dataset
        except KeyError:
            ds = None
        if ds is not None and ds.get_space().get_simple_extent_type() == h5s.SCALAR:
            dtype, mtype = self._dtype(ds)
            arr = np.zeros((), dtype=dtype)
            ds.read(h5s.ALL, h5s.ALL, arr, mtype)
            return arr[()]
        if key.encode() not in gid:
            return None
        obj = h5py.Group(gid)[key]  # an array, an empty dataspace, a group: h5py's own reading (or its error)
        return hdf5_read(obj, self.relpath, self.limits) if isinstance(obj, h5py.Dataset) else obj[()]


def _group(gid: h5g.GroupID, name: bytes) -> h5g.GroupID | None:
    """The group `name` of `gid` (as `isinstance(group.get(name), h5py.Group)`), else None: no such link, a
    dangling soft link, a dataset or a named datatype."""
    if name not in gid:
        return None
    obj = h5o.open(gid, name)
    return obj if isinstance(obj, h5g.GroupID) else None


def _ordered_groups(
    gid: h5g.GroupID, where: str, relpath: str, check_index: bool, scalar: _Scalars
) -> list[tuple[int, h5g.GroupID]]:
    """The child groups of `gid` by their integer name; a child group whose name is not an index, or (check_index)
    whose `index` dataset disagrees with its name, fails the unit. Other children (datasets) are skipped."""
    out = []
    for raw in gid:  # link names in HDF5's name order, as h5py's Group.items()
        g = _group(gid, raw)
        if g is None:
            continue
        name = raw.decode("utf-8", errors="surrogateescape")
        if not _INDEX_NAME.fullmatch(name):
            raise UnitError(f"{where}/{name}: segment group name is not an index", file=relpath)
        if check_index:
            idx = scalar(g, "index")
            if idx is not None and str(int(np.asarray(idx).reshape(-1)[0])) != name:
                raise UnitError(
                    f"{where}/{name}/index is {int(np.asarray(idx).reshape(-1)[0])}, not {name}", file=relpath
                )
        out.append((int(name), g))
    return sorted(out, key=lambda x: x[0])


def segment_rows(
    h5: h5py.File,
    slug: str,
    unit_id: str,
    cam_ts: np.ndarray,
    t0: float,
    relpath: str,
    limits: InputLimits = InputLimits(),
) -> list[dict]:
    """The `segments` rows of one open recording, its primary camera's timestamps `cam_ts` (Unix s) and frame-0
    time `t0`; a malformed group fails the unit (UnitError naming the group and `relpath`)."""
    info = h5.get("segments_info")
    if not isinstance(info, h5py.Group):
        return []
    n = cam_ts.size
    rows: list[dict] = []
    scalar = _Scalars(relpath, limits)

    def row(level, seg_index, parent, g, where):
        start, end = scalar(g, "start"), scalar(g, "end")
        if start is None or end is None or b"text" not in g:
            raise UnitError(f"{where}: start/end/text missing", file=relpath)
        start, end = float(start), float(end)
        if not (np.isfinite(start) and np.isfinite(end)) or end < start:
            raise UnitError(f"{where}: invalid interval {start}..{end}", file=relpath)
        succ = scalar(g, "success")
        text = _text(scalar(g, "text"))
        if end < cam_ts[0] or start > cam_ts[-1]:
            return None  # wholly outside the camera's recording: no frame to refer to
        lo = int(np.searchsorted(cam_ts, start, side="left"))
        hi = int(np.searchsorted(cam_ts, end, side="right")) - 1
        lo, hi = max(0, min(lo, n - 1)), max(0, min(hi, n - 1))
        if hi < lo:
            return None  # shorter than one frame interval: contains no frame
        return {
            "source": slug,
            "unit_id": unit_id,
            "level": level,
            "seg_index": seg_index,
            "parent_index": parent,
            "text": text,
            "start_frame": lo,
            "end_frame": hi,
            "start_sec": start - t0,
            "end_sec": end - t0,
            "success": None if succ is None else bool(np.asarray(succ).reshape(-1)[0]),
        }

    for i, g in _ordered_groups(info.id, "segments_info", relpath, True, scalar):
        where = f"segments_info/{i}"
        high = row("high", i, None, g, where)
        if high is not None:
            rows.append(high)
        low_group = _group(g, b"low_level")
        if low_group is None:
            low_group = _group(g, b"Low_level")
        if low_group is not None:
            for j, lg in _ordered_groups(low_group, f"{where}/low_level", relpath, False, scalar):
                low = row("low", j, i, lg, f"{where}/low_level/{j}")
                if low is not None:
                    rows.append(low)
    return rows
