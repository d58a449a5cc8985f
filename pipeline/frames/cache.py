"""The content-addressed frame cache, whose entries prove themselves when read.

A decoded frame is stored under a key that names what it is, never where it came from on this machine:

    key = sha256(compact JSON ["pbframe", cache version, decoder id, reader id, source, unit_id, upstream fingerprint,
                               camera, frame_index])

(decoder id = upstream_adapters.video.decoder_id(decoder setting): decoder logic version + PyAV/decord versions;
reader id = how the frames of that source are opened, e.g. "adapter:gm100"; upstream fingerprint = the adapter's
`fingerprint(root, unit_id)`: sizes and head/tail sha256 of the unit's upstream files, no path, no mtime, so a video
replaced under the same unit id gets new keys). Upstream roots are not part of the key, so the cache moves with the
work folder and two checkouts can share it.

Layout under the cache root:
    frames/<key[:2]>/<key>.png      native decoded RGB pixels, lossless PNG (cv2, fixed zlib level and filter), with
                                    the entry's key and the frame's stats (pixel_sha256, height, width, mean, std,
                                    thumb) in a tEXt chunk "pbframe" right after IHDR; one file per frame (how it is
                                    written: below).
    renders/<sha256[:32]>.jsonl     render memos, a few tables of one checked line per item: the sha256 list of its
                                    rendered images under its render key (render.py; rkey covers the frames' pixel
                                    hashes); memos.py

Reading an entry checks it: the header must name the key it is stored under (a swapped or renamed file does not),
and, when pixels are read (`get(key)`, and `lookup(key)` unless frames.cache.check_pixels_on_lookup is false), the
decoded pixels must hash to the recorded pixel_sha256 (a truncated, re-encoded or undecodable file does not). A bad
entry is never used: `lookup` reports it as a miss (the frame is decoded again and the entry rewritten), `get` raises
`BadEntry`; `counters["bad_entries"]` counts them and each is logged with its reason. `lookup(key, pixels=False)`
checks only the header and the stats it records, without decoding (`has`).

Writing: a new entry is written in place (created with O_EXCL, no temp file and rename: a file create is the
dearest part of a put, ~50,000 per release build), because every read checks the entry anyway: a write cut short
(a killed worker, a full disk) leaves a file without its header or with pixels that do not hash to the recorded
pixel_sha256, which is a bad entry, decoded again and then replaced. Replacing an existing file (a bad entry, or two
processes writing the same key at once) goes through a temp file + rename, so a good entry is never torn under a
reader. Render-memo tables are always written with temp file + rename (memos.py).

PNG bytes are deterministic for a given OpenCV/libpng/zlib build and settings. The cache is a plain picklable object
(worker processes write into the same folder); `counters` counts what this process (and, through
`extract_frames`, its workers) did: decoded frames, cache hits, bad entries, rendered items, render-memo hits.
This module is imported by pool workers: keep it free of polars.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
import tempfile
import zlib
from pathlib import Path

import numpy as np

from upstream_adapters import video

from .memos import RenderMemos
from .pixels import decode_png, encode_png, pixel_sha256

log = logging.getLogger(__name__)

META_KEYWORD = b"pbframe"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PNG_FILTERS = ("none", "sub", "up", "avg", "paeth", "fast", "all")


def _compact(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


_MADE_DIRS: set[str] = set()  # folders this process already created (skips a mkdir syscall per frame)


def _atomic_write(path: Path | str, data: bytes) -> None:
    parent, name = os.path.split(os.fspath(path))
    if parent not in _MADE_DIRS:
        os.makedirs(parent, exist_ok=True)
        _MADE_DIRS.add(parent)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=parent)
    except FileNotFoundError:  # the folder was removed since: make it again
        os.makedirs(parent, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_new(path: str, data: bytes) -> None:
    """Write a frame entry in place when its file does not exist yet (see the module docstring), else replace it
    atomically."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    try:
        try:
            fd = os.open(path, flags, 0o644)
        except FileNotFoundError:  # its folder does not exist (yet, or any more)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, flags, 0o644)
    except FileExistsError:
        return _atomic_write(path, data)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
    except BaseException:
        Path(path).unlink(missing_ok=True)  # a partial entry would be found bad on reading; do not leave it
        raise


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_with_meta(png: bytes, meta: dict) -> bytes:
    """Insert a tEXt chunk `pbframe` holding compact JSON right after the IHDR chunk."""
    if not png.startswith(PNG_SIGNATURE) or png[12:16] != b"IHDR":
        raise ValueError("not a PNG starting with IHDR")
    ihdr_end = 8 + 8 + struct.unpack(">I", png[8:12])[0] + 4
    return png[:ihdr_end] + _chunk(b"tEXt", META_KEYWORD + b"\0" + _compact(meta).encode("ascii")) + png[ihdr_end:]


def meta_of_png_head(head: bytes) -> dict | None:
    """The `pbframe` metadata of a PNG from its first bytes, or None."""
    if not head.startswith(PNG_SIGNATURE):
        return None
    pos = 8
    while pos + 8 <= len(head):
        length = struct.unpack(">I", head[pos:pos + 4])[0]
        kind = head[pos + 4:pos + 8]
        if kind == b"IDAT" or kind == b"IEND":
            return None
        end = pos + 8 + length
        if kind == b"tEXt":
            if end + 4 > len(head):
                return None
            data = head[pos + 8:end]
            crc = struct.unpack(">I", head[end:end + 4])[0]
            if crc != zlib.crc32(kind + data) & 0xFFFFFFFF:
                return None
            keyword, _, text = data.partition(b"\0")
            if keyword == META_KEYWORD:
                try:
                    return json.loads(text.decode("ascii"))
                except (UnicodeDecodeError, json.JSONDecodeError):
                    return None
        pos = end + 4
    return None


class BadEntry(Exception):
    """A cache entry that is there but cannot be trusted (wrong key, undecodable, pixels not as recorded)."""


class FrameCache:
    def __init__(self, root: Path | str, *, png_compression: int = 1, png_filter: str = "up",
                 version: int | str = 1, decoder: str = "auto", decoder_threads: int = 1, thumb_size: int = 16,
                 check_pixels: bool = True):
        if png_filter not in PNG_FILTERS:
            raise ValueError(f"png_filter must be one of {PNG_FILTERS}, got {png_filter!r}")
        self.root = Path(root)
        self.png_compression = int(png_compression)
        self.png_filter = png_filter
        self.version = str(version)
        self.decoder = decoder
        self.decoder_threads = int(decoder_threads)
        self.thumb_size = int(thumb_size)
        self.check_pixels = bool(check_pixels)
        self.decoder_id = video.decoder_id(decoder)
        self.counters = {"decoded": 0, "hits": 0, "errors": 0, "bad_entries": 0, "rendered": 0, "render_hits": 0,
                         "bad_renders": 0, "worker_peak_rss_mb": 0.0}
        self._render_memos: RenderMemos | None = None

    @classmethod
    def from_config(cls, cfg: dict, root: Path | str | None = None) -> "FrameCache":
        """From the merged config (or its `frames` section); `root` defaults to <build.work_dir>/<frames.cache.dir>."""
        fr = cfg["frames"] if "frames" in cfg else cfg
        if root is None:
            from ..config import path_in_repo

            root = path_in_repo(cfg["build"]["work_dir"]) / fr["cache"]["dir"]
        c = fr["cache"]
        return cls(root, png_compression=c["png_compression"], png_filter=c["png_filter"],
                   version=fr["version"], decoder=fr["decoder"], decoder_threads=fr["decoder_threads"],
                   thumb_size=fr["stats"]["thumb_size"], check_pixels=c["check_pixels_on_lookup"])

    # -------------------------------------------------------------------------------------------- keys, paths
    def key(self, source: str, unit_id: str, camera: str, frame_index: int, reader_id: str, fingerprint: str) -> str:
        """fingerprint: the unit's upstream fingerprint (readers.unit_fingerprint), so changed upstream data never
        meets an old entry."""
        return self.video_keys(source, unit_id, camera, [frame_index], reader_id, fingerprint)[0]

    def video_keys(self, source: str, unit_id: str, camera: str, frame_indices, reader_id: str,
                   fingerprint: str) -> list[str]:
        """`key` of each frame index of one video: the compact JSON up to the camera is built once per video (the
        index, an int, is last in the list, so prefix + index + "]" is exactly the compact JSON of the list)."""
        prefix = _compact(["pbframe", self.version, self.decoder_id, reader_id, source, unit_id, fingerprint,
                           camera])[:-1] + ","
        return [hashlib.sha256(f"{prefix}{int(i)}]".encode()).hexdigest() for i in frame_indices]

    def image_path(self, key: str) -> Path:
        return Path(self._image_file(key))

    def _image_file(self, key: str) -> str:
        # a plain string: building a Path costs more than the open on a warm lookup (~50,000 per release build)
        return f"{self.root}{os.sep}frames{os.sep}{key[:2]}{os.sep}{key}.png"

    # -------------------------------------------------------------------------------------------- frames
    def _read(self, key: str, pixels: bool) -> tuple[dict, np.ndarray | None]:
        """(header metadata, pixels or None) of a checked entry; KeyError when absent, BadEntry when untrustworthy."""
        try:
            with open(self._image_file(key), "rb") as fh:
                data = fh.read() if pixels else fh.read(4096)
        except FileNotFoundError:
            raise KeyError(key) from None
        except OSError as exc:
            raise BadEntry(f"unreadable: {exc}") from None
        meta = meta_of_png_head(data)
        if meta is None:
            raise BadEntry("no readable pbframe header (truncated, or not written by this cache)")
        if meta.get("key") != key:
            raise BadEntry(f"header names key {str(meta.get('key'))[:16]}... (a swapped or renamed entry)")
        if not pixels:
            return meta, None
        try:
            img = decode_png(data)
        except Exception as exc:  # noqa: BLE001 - whatever the PNG decoder says, the entry is unusable
            raise BadEntry(f"undecodable: {exc}") from None
        if pixel_sha256(img) != meta.get("pixel_sha256"):
            raise BadEntry("pixels do not hash to the recorded pixel_sha256")
        return meta, img

    def _check(self, key: str, pixels: bool) -> tuple[dict | None, BadEntry | None]:
        try:
            return self._read(key, pixels)[0], None
        except KeyError:
            return None, None
        except BadEntry as exc:
            return None, exc

    def _bad(self, key: str, exc: BadEntry, counters: dict | None = None) -> None:
        (self.counters if counters is None else counters)["bad_entries"] += 1
        log.warning("frame cache: entry %s is bad (%s); it is not used and the frame is decoded again", key, exc)

    def lookup(self, key: str, pixels: bool | None = None) -> dict | None:
        """The stored stats of a checked cache entry, or None when the frame is not cached or its entry is bad
        (counted, logged). pixels: decode and hash the pixels too (default: `check_pixels`); False checks the
        header only (key), without decoding."""
        return self.lookup_many([key], pixels)[0]

    def lookup_many(self, keys: list[str], pixels: bool | None = None, threads: int = 1) -> list[dict | None]:
        """`lookup` of many keys, checked on `threads` threads (PNG decoding and hashing release the GIL)."""
        pixels = self.check_pixels if pixels is None else pixels
        if threads > 1 and len(keys) > 1:
            from concurrent.futures import ThreadPoolExecutor

            # chunks of keys per task: a thread pool ignores map's chunksize, and a future per key cost ~60 us
            chunks = [keys[i:i + 64] for i in range(0, len(keys), 64)]
            with ThreadPoolExecutor(threads) as pool:
                checked = [c for part in pool.map(lambda ks: [self._check(k, pixels) for k in ks], chunks)
                           for c in part]
        else:
            checked = [self._check(k, pixels) for k in keys]
        for key, (_, exc) in zip(keys, checked):
            if exc is not None:
                self._bad(key, exc)
        return [meta for meta, _ in checked]

    def has(self, key: str) -> bool:
        return self.lookup(key, pixels=False) is not None

    def put(self, key: str, img: np.ndarray, meta: dict) -> None:
        png = encode_png(img, self.png_compression, self.png_filter)
        _write_new(self._image_file(key), png_with_meta(png, {**meta, "key": key}))

    def get(self, key: str, counters: dict | None = None) -> np.ndarray:
        """The checked RGB pixels; KeyError when absent, BadEntry (counted, logged) when the entry is bad.
        counters: where to count it (default self.counters; a thread passes its own, summed by its caller)."""
        try:
            return self._read(key, pixels=True)[1]
        except BadEntry as exc:
            self._bad(key, exc, counters)
            raise

    # -------------------------------------------------------------------------------------------- render memo
    @property
    def _renders(self) -> RenderMemos:
        if self._render_memos is None:
            self._render_memos = RenderMemos(self.root / "renders", self.counters, _atomic_write)
        return self._render_memos

    def __getstate__(self) -> dict:
        # pool workers get the cache with every task: never the memo table (they do not render)
        return {**self.__dict__, "_render_memos": None}

    def get_render(self, rkey: str) -> list[str] | None:
        """The memoised image hashes of render key `rkey`, or None (absent, or damaged: counted, see memos.py)."""
        return self._renders.get(rkey)

    def put_render(self, rkey: str, hashes: list[str]) -> None:
        """Memoise; written with the next `flush_renders` (or after memos.FLUSH_EVERY puts)."""
        self._renders.put(rkey, hashes)

    def flush_renders(self) -> None:
        self._renders.flush()
