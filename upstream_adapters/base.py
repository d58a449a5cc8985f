"""The contract every source adapter fulfils (`SourceAdapter`), and the small helpers they share.

An adapter is a plain object (no Dagster) constructed with its options from `configs/sources.yaml`:

    adapter = get_adapter("gm100", camera="camera_top")
    unit_ids = adapter.discover(root)                  # sorted, deterministic; SourceError if the root is unusable
    adapter.issues                                     # [(file, reason)] found while listing (damaged archive, ...)
    ir = adapter.read_unit(root, unit_id)              # UnitIR (with ir.notes); UnitError(reason, file) if unreadable
    frames = adapter.read_frames(root, unit_id, camera, [3, 10, 57], decoder="auto")   # {index: HxWx3 RGB uint8}
    adapter.fingerprint(root, unit_id)                 # content fingerprint of the unit's upstream files

`read_frames` raises UnitError when the storage cannot be opened or an index does not decode; it returns
exactly the requested indices otherwise. The decoder is an argument, never process-global state. Frame access
is the adapter's job: the rest of the pipeline never sees file names, HDF5 keys or archive members.

Adapters cross process boundaries (the frame pool pickles them): caches, locks and open handles are rebuilt
after unpickling by `_init_state()`, never pickled.
"""

from __future__ import annotations

import abc
import hashlib
import json
import os
from pathlib import Path
from typing import ClassVar, Sequence

import numpy as np

from .content_hash import content_sha256
from .ir import SourceError, UnitError, UnitIR
from .limits import InputLimits


class SourceAdapter(abc.ABC):
    """Base class of every adapter. Subclasses set the class attributes and implement the abstract methods."""

    slug: ClassVar[str]  # e.g. gm100
    name: ClassVar[str]  # e.g. GM-100
    unit_type: ClassVar[str]  # episode | recording
    # option name -> what it means (shown by `processbench ingest --help`); every __init__ keyword is listed
    options: ClassVar[dict[str, str]] = {}
    # what the root folder holds, in one line (said when a root is unusable: pipeline/source_help.py)
    layout: ClassVar[str] = ""
    # declared-size bounds (configs/build.yaml build.input_limits), set by upstream_adapters.get_adapter
    input_limits: InputLimits = InputLimits()

    def __init__(self) -> None:
        self.issues: list[tuple[str, str]] = []  # (file relative to the root, reason), refreshed by discover()
        self._init_state()

    def _init_state(self) -> None:  # noqa: B027 - optional hook: an adapter without per-process state skips it
        """(Re)create per-process state: caches, locks. Called by __init__ and after unpickling."""

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._init_state()

    @abc.abstractmethod
    def discover(self, root: Path) -> list[str]:
        """Sorted unit ids under `root`; SourceError when the root is unusable as a whole."""

    @abc.abstractmethod
    def read_unit(self, root: Path, unit_id: str) -> UnitIR:
        """The unit's IR; UnitError(reason, file) when it cannot be read."""

    @abc.abstractmethod
    def read_frames(
        self, root: Path, unit_id: str, camera: str, indices: Sequence[int], decoder: str = "auto", threads: int = 1
    ) -> dict[int, np.ndarray]:
        """{index: HxWx3 RGB uint8} for exactly `indices`; UnitError if one does not decode."""

    @abc.abstractmethod
    def unit_files(self, root: Path, unit_id: str) -> list[tuple[str, Path, tuple | None]]:
        """The upstream files a unit is read from, as (name relative to the root, path, extra identity or None).
        `extra` identifies a part of a shared file (e.g. an archive member's offset, size and CRC)."""

    def fingerprint(self, root: Path, unit_id: str) -> str:
        """A path-free content fingerprint of the unit's upstream files (sizes + full-content sha256 + member
        identities); no mtimes, no absolute paths. Part of the frame-cache key; each file is read once while its
        identity holds (`content_hash`)."""
        h = hashlib.sha256(f"{self.slug}\0{unit_id}".encode())
        for rel, path, extra in sorted(self.unit_files(Path(root), unit_id), key=lambda f: f[0]):
            h.update(f"\0{rel}\0{extra!r}\0".encode())
            h.update(file_digest(path).encode())
        return h.hexdigest()[:24]


def file_digest(path: Path) -> str:
    """size + sha256 of every byte of a file ("missing" when it cannot be read); streamed, and cached by the file's
    identity (`content_hash`: size, mtime, ctime, inode), so an unchanged file is read once."""
    try:
        size, sha = content_sha256(Path(path))
    except OSError:
        return "missing"
    return f"{size}:{sha}"


def require_root(root: Path, slug: str) -> Path:
    """The source root must exist and be a directory; anything else is a whole-source error."""
    root = Path(root)
    if not root.exists():
        raise SourceError(f"{slug}: root {root.name!r} does not exist")
    if not root.is_dir():
        raise SourceError(f"{slug}: root {root.name!r} is not a directory")
    return root


def typical_units(counts) -> int | None:
    """What a container whose units cannot be listed (an unreadable, empty or cut-short archive or folder) is counted
    as in the quarantine share: the median (low) of the units the source's readable containers hold; None when no
    container is readable (the row then counts as one)."""
    counts = sorted(c for c in counts if c)
    return counts[(len(counts) - 1) // 2] if counts else None


def safe_join(root: Path, rel: str) -> Path:
    """Join a unit-relative path under `root`, refusing names that would escape it.

    Rejects absolute paths and `..` components: the names come from unit ids, metadata and archive members, which a
    corpus author controls. Filesystem symlinks are followed: they are made by the user's own download tool (a
    Hugging Face cache snapshot links every file into `blobs/`, a big archive may live on another disk). The error
    names only the relative path, so quarantine rows stay path-free.
    """
    if rel.startswith(("/", "\\")) or os.path.isabs(rel) or "\x00" in rel:
        raise UnitError("unit path is absolute", file=rel)
    parts = [part for part in rel.split("/") if part not in ("", ".")]  # PurePosixPath(rel).parts, ~5x cheaper
    if ".." in parts or ".." in rel.split("\\"):
        raise UnitError("unit path escapes the source root ('..')", file=rel)
    return Path(root, *parts)


# Metadata and list files (split lists, task tables, info.json, dataset cards) are small; a "metadata" file larger
# than this is not what the layout says it is (or a device/FIFO), and reading it whole would stall the build.
# The default of input_limits.max_metadata_bytes (configs/build.yaml), for callers without an adapter.
MAX_METADATA_BYTES = InputLimits.max_metadata_bytes


def read_metadata(root: Path, rel: str, max_bytes: int = MAX_METADATA_BYTES) -> str:
    """The text of a small metadata file under `root`, through the same path rule as media (`safe_join`): a regular
    file (filesystem symlinks followed), at most `max_bytes` (input_limits.max_metadata_bytes), UTF-8.
    UnitError(reason, file=rel) otherwise."""
    data = read_metadata_bytes(root, rel, max_bytes)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise UnitError("not UTF-8 text", file=rel) from None


def read_metadata_bytes(root: Path, rel: str, max_bytes: int = MAX_METADATA_BYTES) -> bytes:
    """`read_metadata` without the decoding: for a list whose lines are decoded (and refused) one by one."""
    path = safe_join(root, rel)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise UnitError("file is missing", file=rel) from None
    except OSError as exc:
        raise UnitError(f"cannot stat file: {type(exc).__name__}", file=rel) from None
    import stat as _stat

    if not _stat.S_ISREG(st.st_mode):
        raise UnitError("not a regular file", file=rel)
    if st.st_size > max_bytes:
        raise UnitError(
            f"metadata file is {st.st_size} bytes, over input_limits.max_metadata_bytes ({max_bytes})", file=rel
        )
    try:
        with open(path, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise UnitError(f"cannot read file: {type(exc).__name__}", file=rel) from None
    return data


def load_json(text: str | bytes, file: str | None, limits: InputLimits = InputLimits()):
    """A JSON document of a metadata file (or archive member, or one JSONL line) within `limits`: at most
    max_metadata_bytes long and max_json_depth deep. UnitError(reason, file) naming the bound otherwise (never a
    RecursionError: CPython's parser stops deep nesting with one, caught here)."""
    if len(text) > limits.max_metadata_bytes:
        raise UnitError(
            f"JSON text is {len(text)} bytes, over input_limits.max_metadata_bytes ({limits.max_metadata_bytes})",
            file=file,
        )
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise UnitError("JSON text is not UTF-8", file=file) from None
    try:
        value = json.loads(text)
    except RecursionError:
        raise UnitError(
            f"JSON nests deeper than input_limits.max_json_depth ({limits.max_json_depth})", file=file
        ) from None
    except ValueError as exc:
        raise UnitError(f"not valid JSON: {exc}", file=file) from None
    depth, level = 0, [value] if isinstance(value, (dict, list)) else []
    while level:  # one nesting level at a time: no recursion however deep the document
        depth += 1
        if depth > limits.max_json_depth:
            raise UnitError(f"JSON nests deeper than input_limits.max_json_depth ({limits.max_json_depth})", file=file)
        level = [v for x in level for v in (x.values() if isinstance(x, dict) else x) if isinstance(v, (dict, list))]
    return value


def hdf5_check(ds, file: str, limits: InputLimits = InputLimits(), rows: int | None = None) -> None:
    """UnitError unless the declared size (shape x item size; of `rows` rows when given) of an h5py dataset is
    within input_limits.max_hdf5_dataset_bytes: a few KB of file can declare a dataset of many GB."""
    size = int(ds.size or 0) * int(ds.dtype.itemsize)
    if rows is not None and ds.ndim:
        size = size // max(int(ds.shape[0]), 1) * rows
    if size > limits.max_hdf5_dataset_bytes:
        raise UnitError(
            f"HDF5 dataset {ds.name!r} declares {size} bytes{'' if rows is None else f' in {rows} rows'} "
            f"(shape {tuple(ds.shape)}, {ds.dtype}), over input_limits.max_hdf5_dataset_bytes "
            f"({limits.max_hdf5_dataset_bytes}): refused before reading",
            file=file,
        )


def hdf5_read(ds, file: str, limits: InputLimits = InputLimits()):
    """`ds[()]` of an h5py dataset once `hdf5_check` passes."""
    hdf5_check(ds, file, limits)
    return ds[()]


def refuse_hdf5_links(h5, file: str) -> None:
    """Raise UnitError when an open HDF5 file reaches data outside itself: an external link (to another file),
    a virtual dataset (its sources may be other files) or a dataset with external raw storage. Only link
    metadata and dataset creation properties are read, so no other file is opened. Soft links stay allowed
    (they point inside the same file)."""
    if _hdf5_self_contained(h5):
        return
    import h5py

    # the walk below names the first offending link or dataset
    stack, seen = [("", h5)], set()
    while stack:
        prefix, group = stack.pop()
        for name in group.keys():
            path = f"{prefix}{name}"
            link = group.get(name, getlink=True)
            if isinstance(link, h5py.ExternalLink):
                raise UnitError(
                    f"HDF5 external link {path!r} (to another file) refused: links inside content are not followed",
                    file=file,
                )
            if isinstance(link, h5py.SoftLink):
                continue
            obj = group.get(name)
            if isinstance(obj, h5py.Group):
                if obj.id not in seen:  # a group hard-linked into its own subtree is walked once
                    seen.add(obj.id)
                    stack.append((f"{path}/", obj))
            elif isinstance(obj, h5py.Dataset):
                if obj.is_virtual:
                    raise UnitError(
                        f"HDF5 virtual dataset {path!r} refused: its data may live in other files", file=file
                    )
                if obj.external:
                    raise UnitError(
                        f"HDF5 dataset {path!r} with external raw storage refused: its data lives in other files",
                        file=file,
                    )


def _hdf5_self_contained(h5) -> bool:
    """True when no link of the file is external (or of another non-hard, non-soft kind) and no dataset is virtual
    or has external raw storage: what `refuse_hdf5_links` checks, through HDF5's own visits (low-level h5py, ~3x
    cheaper than walking the high-level objects; a REASSEMBLE file holds ~1100 objects). False sends the caller to
    the walk, which says which link or dataset."""
    from h5py import h5d, h5l, h5o

    gid = h5.id
    if gid.links.visit(lambda _name, info: None if info.type in (h5l.TYPE_HARD, h5l.TYPE_SOFT) else True, info=True):
        return False

    def outside(name, info):
        if info.type == h5o.TYPE_DATASET:
            dcpl = h5d.open(gid, name).get_create_plist()
            if dcpl.get_layout() == h5d.VIRTUAL or dcpl.get_external_count() > 0:
                return True
        return None

    return not h5o.visit(gid, outside, info=True)


def path_free(message: str, path: Path, rel: str) -> str:
    """`message` (e.g. a decoder's error, which quotes the file it opened) with the absolute `path` replaced by its
    name relative to the source root, so that frame-stage quarantine rows and logs stay path-free too."""
    for p in sorted({str(path), os.path.abspath(path), os.path.realpath(path)}, key=len, reverse=True):
        message = message.replace(p, rel)
    return message


def check_unit_id(unit_id: str) -> None:
    """A unit id is a single path-free token; ids from user input are checked before any file access."""
    if not unit_id or "/" in unit_id or "\\" in unit_id or unit_id in (".", "..") or ".." in unit_id.split("__"):
        raise UnitError(f"invalid unit id {unit_id!r}")
    if os.path.isabs(unit_id) or ".." in unit_id.split("_"):
        raise UnitError(f"invalid unit id {unit_id!r}")
