"""The content-addressed frame cache.

A decoded frame is stored under a key that names what it is, never where it came from on this machine:

    key = sha256(compact JSON ["pbframe", cache version, decoder id, reader id, source, unit_id, camera, frame_index])

(decoder id = upstream_adapters.video.decoder_id(decoder setting): decoder logic version + PyAV/decord versions;
reader id = how the frames of that source are opened, e.g. "adapter:gm100"). Upstream roots are not part of the
key, so the cache moves with the work folder and two checkouts can share it.

Layout under the cache root:
    frames/<key[:2]>/<key>.png      native decoded RGB pixels, lossless PNG (cv2, fixed zlib level and filter), with
                                    the frame's stats (pixel_sha256, height, width, mean, std, thumb) in a tEXt chunk
                                    "pbframe" right after IHDR: one file per frame, written atomically, so an entry
                                    exists iff its file exists, and a lookup reads only the file's first few hundred
                                    bytes.
    renders/<rkey[:2]>/<rkey>.json  memo: sha256 list of an item's rendered images (see render.py)

PNG bytes are deterministic for a given OpenCV/libpng/zlib build and settings. The cache is a plain picklable object
(worker processes write into the same folder); `counters` counts what this process (and, through
`extract_frames`, its workers) did: decoded frames, cache hits, rendered items, render-memo hits.
This module is imported by pool workers: keep it free of polars.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
import zlib
from pathlib import Path

import numpy as np

from upstream_adapters import video

from .pixels import decode_png, encode_png

META_KEYWORD = b"pbframe"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PNG_FILTERS = ("none", "sub", "up", "avg", "paeth", "fast", "all")


def _compact(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


_MADE_DIRS: set[str] = set()  # folders this process already created (skips a mkdir syscall per frame)


def _atomic_write(path: Path, data: bytes) -> None:
    parent = str(path.parent)
    if parent not in _MADE_DIRS:
        path.parent.mkdir(parents=True, exist_ok=True)
        _MADE_DIRS.add(parent)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    except FileNotFoundError:  # the folder was removed since: make it again
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
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


class FrameCache:
    def __init__(self, root: Path | str, *, png_compression: int = 1, png_filter: str = "up",
                 version: int | str = 1, decoder: str = "auto", decoder_threads: int = 1, thumb_size: int = 16):
        if png_filter not in PNG_FILTERS:
            raise ValueError(f"png_filter must be one of {PNG_FILTERS}, got {png_filter!r}")
        self.root = Path(root)
        self.png_compression = int(png_compression)
        self.png_filter = png_filter
        self.version = str(version)
        self.decoder = decoder
        self.decoder_threads = int(decoder_threads)
        self.thumb_size = int(thumb_size)
        self.decoder_id = video.decoder_id(decoder)
        self.counters = {"decoded": 0, "hits": 0, "errors": 0, "rendered": 0, "render_hits": 0,
                         "worker_peak_rss_mb": 0.0}

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
                   thumb_size=fr["stats"]["thumb_size"])

    # -------------------------------------------------------------------------------------------- keys, paths
    def key(self, source: str, unit_id: str, camera: str, frame_index: int, reader_id: str = "") -> str:
        ident = ["pbframe", self.version, self.decoder_id, reader_id, source, unit_id, camera, int(frame_index)]
        return hashlib.sha256(_compact(ident).encode()).hexdigest()

    def image_path(self, key: str) -> Path:
        return self.root / "frames" / key[:2] / f"{key}.png"

    # -------------------------------------------------------------------------------------------- frames
    def lookup(self, key: str) -> dict | None:
        """The stored stats of a cached frame, or None when the frame is not cached (or its entry is damaged)."""
        try:
            with open(self.image_path(key), "rb") as fh:
                head = fh.read(4096)
        except FileNotFoundError:
            return None
        return meta_of_png_head(head)

    def has(self, key: str) -> bool:
        return self.lookup(key) is not None

    def put(self, key: str, img: np.ndarray, meta: dict) -> None:
        png = encode_png(img, self.png_compression, self.png_filter)
        _atomic_write(self.image_path(key), png_with_meta(png, meta))

    def get(self, key: str) -> np.ndarray:
        """The cached RGB pixels; KeyError when absent."""
        try:
            data = self.image_path(key).read_bytes()
        except FileNotFoundError:
            raise KeyError(key) from None
        return decode_png(data)

    # -------------------------------------------------------------------------------------------- render memo
    def _render_path(self, rkey: str) -> Path:
        return self.root / "renders" / rkey[:2] / f"{rkey}.json"

    def get_render(self, rkey: str) -> list[str] | None:
        try:
            return json.loads(self._render_path(rkey).read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def put_render(self, rkey: str, hashes: list[str]) -> None:
        _atomic_write(self._render_path(rkey), (_compact(hashes) + "\n").encode())
