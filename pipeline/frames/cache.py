"""The content-addressed frame cache: one pack file per video, whose entries prove themselves when read.

A decoded frame is stored under a key that names what it is, never where it came from on this machine:

    key    = "<video digest>.<frame_index>"
    digest = sha256(compact JSON ["pbframe", cache version, decoder id, reader id, source, unit_id,
                                  upstream fingerprint, camera])

(decoder id = upstream_adapters.media.video.decoder_id(decoder setting): decoder logic version + PyAV/decord versions;
reader id = how the frames of that source are opened, e.g. "adapter:gm100"; upstream fingerprint = the adapter's
`fingerprint(root, unit_id)`: sizes and full-content sha256 of the unit's upstream files, no path, no mtime, so a
video replaced or edited under the same unit id gets a new digest). Upstream roots are not part of the key, so the cache moves with
the work folder and two checkouts can share it. The digest names the video, so a key says which pack holds it.

Layout under the cache root:
    frames/<digest[:2]>/<digest>.pack   the video's cached frames (format: pack.py): one record per frame, sorted by
                                        frame index, each with its key, its stats (pixel_sha256, height, width, mean,
                                        std, thumb), its native RGB pixels as lossless PNG (cv2, fixed zlib level and
                                        filter), its lengths and a CRC.
    renders/<sha256[:32]>.jsonl         render memos, a few tables of one checked line per item: the sha256 list of
                                        its rendered images under its render key (render.py; rkey covers the
                                        frames' pixel hashes); memos.py
One file per video, not per frame: a release-scale sample build wrote ~165,000 frame files (a file create each,
inode pressure, slow listings); it now writes one pack per video. Files of the older one-PNG-per-frame layout
(frames/<kk>/<64 hex>.png) are never read (other names): they can stay, or be deleted to free the space.

Reading an entry checks it: its record must be intact (lengths and CRC) and name the key it is looked up under (a
record or a pack of another video does not), and, when pixels are read (`get`/`get_many`, and `lookup` unless
frames.cache.check_pixels_on_lookup is false), its decoded pixels must hash to the recorded pixel_sha256 (a record
re-encoded from other pixels does not). Bytes of a pack that are no good record (cut, damaged, another video's) are
a gap: a frame whose index lies between the good records around it is reported bad, not absent (pack.py). A bad
entry is never used: `lookup` reports it as a miss (the frame is decoded again and its pack rewritten), `get` raises
`BadEntry`; `counters["bad_entries"]` counts them and each is logged with its reason. One damaged record leaves the
other records of its pack readable (each has its own lengths and CRC) and never makes them trusted wrongly (each is
checked on its own). `lookup(key, pixels=False)` checks the record without decoding its PNG (`has`).

Writing: the frames one decode task gets of its video are written in one pack write (`put_many`, worker.py). When
the pack exists already (a rebuild asks for other frames of the video, or some of its entries were bad), the new
pack is its good records plus the new ones (a new record replaces the old one of its frame). Every pack is written
to a temp file and renamed over its name, so a reader never sees a torn pack: a write cut short leaves a stray temp
file, not a pack (a pack damaged later is read record by record, as above). Two processes writing one pack at once:
the last rename wins, and the frames only the other one wrote are misses later (decoded again), never wrong data.
Render-memo tables are written the same way (memos.py).

Pack bytes are deterministic for a given OpenCV/libpng/zlib build and settings, whether a pack's frames were
written at once or over several runs (records sorted by frame index). The cache is a plain picklable object (worker
processes write into the same folder); `counters` counts what this process (and, through `extract_frames`, its
workers) did: decoded frames, cache hits, bad entries, rendered items, render-memo hits. A read keeps no pack
beyond its call (real packs hold tens of MB). This module is imported by pool workers: keep it free of polars.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import hashlib
import json
import logging
import os
import secrets
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from upstream_adapters.media import video

from . import pack
from .memos import RenderMemos
from .pixels import decode_png, encode_png, pixel_sha256

if TYPE_CHECKING:
    from pipeline.settings.root import Settings

log = logging.getLogger(__name__)

PNG_FILTERS = ("none", "sub", "up", "avg", "paeth", "fast", "all")


def _compact(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


_MADE_DIRS: set[str] = set()  # folders this process already created (skips a mkdir syscall per write)


def _temp_file(parent: str, name: str) -> tuple[int, str]:
    """A new `.<name>.<random>.tmp` in `parent` (the name pipeline.core.io's leftover cleaner knows), created 0666 so
    the umask applies as for a plain open() (mkstemp's 0600 would keep a shared cache from other users)."""
    while True:
        tmp = f"{parent}{os.sep}.{name}.{secrets.token_hex(4)}.tmp"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue


def _atomic_write(path: Path | str, data: bytes) -> None:
    parent, name = os.path.split(os.fspath(path))
    if parent not in _MADE_DIRS:
        os.makedirs(parent, exist_ok=True)
        _MADE_DIRS.add(parent)
    try:
        fd, tmp = _temp_file(parent, name)
    except FileNotFoundError:  # the folder was removed since: make it again
        os.makedirs(parent, exist_ok=True)
        fd, tmp = _temp_file(parent, name)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class BadEntry(Exception):
    """A cache entry that is there but cannot be trusted (damaged or cut record, another video's, undecodable, pixels
    not as recorded)."""


Checked = tuple[dict | None, np.ndarray | None, BadEntry | None]  # (stats, pixels, why it is bad); all None: absent
KEYS_PER_TASK = 64  # keys per thread task: a future per pack of a few frames would cost more than reading it


class FrameCache:
    def __init__(
        self,
        root: Path | str,
        *,
        png_compression: int = 1,
        png_filter: str = "up",
        version: int | str = 1,
        decoder: str = "auto",
        decoder_threads: int = 1,
        thumb_size: int = 16,
        check_pixels: bool = True,
    ):
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
        self.counters = {
            "decoded": 0,
            "hits": 0,
            "errors": 0,
            "bad_entries": 0,
            "rendered": 0,
            "render_hits": 0,
            "bad_renders": 0,
            "worker_peak_rss_mb": 0.0,
        }
        self._render_memos: RenderMemos | None = None

    @classmethod
    def from_config(cls, cfg: Settings, root: Path | str | None = None) -> "FrameCache":
        """From the config; `root` defaults to <build.work_dir>/<frames.cache.dir>."""
        fr = cfg.frames
        if root is None:
            from pipeline.settings.config import path_in_repo

            root = path_in_repo(cfg.build.work_dir) / fr.cache.dir
        c = fr.cache
        return cls(
            root,
            png_compression=c.png_compression,
            png_filter=c.png_filter,
            version=fr.version,
            decoder=fr.decoder,
            decoder_threads=fr.decoder_threads,
            thumb_size=fr.stats.thumb_size,
            check_pixels=c.check_pixels_on_lookup,
        )

    # -------------------------------------------------------------------------------------------- keys, paths
    def key(self, source: str, unit_id: str, camera: str, frame_index: int, reader_id: str, fingerprint: str) -> str:
        """fingerprint: the unit's upstream fingerprint (readers.unit_fingerprint), so changed upstream data never
        meets an old entry."""
        return self.video_keys(source, unit_id, camera, [frame_index], reader_id, fingerprint)[0]

    def video_keys(
        self, source: str, unit_id: str, camera: str, frame_indices, reader_id: str, fingerprint: str
    ) -> list[str]:
        """`key` of each frame index of one video (the digest is computed once)."""
        digest = hashlib.sha256(
            _compact(
                ["pbframe", self.version, self.decoder_id, reader_id, source, unit_id, fingerprint, camera]
            ).encode()
        ).hexdigest()
        return [f"{digest}.{int(i)}" for i in frame_indices]

    def pack_path(self, key: str) -> Path:
        """The pack file that holds (or would hold) the entry `key`: the one file of its video."""
        return Path(self._pack_file(pack.split_key(key)[0]))

    def _pack_file(self, digest: str) -> str:
        return f"{self.root}{os.sep}frames{os.sep}{digest[:2]}{os.sep}{digest}.pack"

    # -------------------------------------------------------------------------------------------- reading
    def _load(self, digest: str) -> pack.Pack | None:
        """The parsed pack of video `digest`, None when there is none; BadEntry when it cannot be read."""
        try:
            with open(self._pack_file(digest), "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise BadEntry(f"unreadable pack: {exc}") from None
        return pack.Pack(data, digest)

    @staticmethod
    def _entry(pk: pack.Pack | None, index: int, pixels: bool) -> tuple[dict, np.ndarray | None]:
        """(stats, pixels or None) of a checked entry; KeyError when absent, BadEntry when untrustworthy."""
        rec = pk.records.get(index) if pk is not None else None
        if rec is None:
            why = pk.damaged(index) if pk is not None else None
            if why is not None:
                raise BadEntry(f"in a damaged part of its pack: {why}")
            raise KeyError(index)
        stats = rec.stats()
        if not pixels:
            return stats, None
        try:
            img = decode_png(rec.png)
        except Exception as exc:  # noqa: BLE001 - whatever the PNG decoder says, the entry is unusable
            raise BadEntry(f"undecodable: {exc}") from None
        if pixel_sha256(img) != stats["pixel_sha256"]:
            raise BadEntry("pixels do not hash to the recorded pixel_sha256")
        return stats, img

    def _read_video(
        self, digest: str, wanted: list[tuple[int, int]], pixels: bool, keep: bool
    ) -> list[tuple[int, Checked]]:
        """[(position, checked entry)] of the (position, frame index) pairs `wanted` of one video: its pack is read
        and parsed once. keep: return the checked pixels (else they are checked and dropped: a lookup of a whole
        build's frames would hold them all)."""
        try:
            pk = self._load(digest)
        except BadEntry as exc:
            return [(n, (None, None, exc)) for n, _ in wanted]
        out = []
        for n, index in wanted:
            try:
                stats, img = self._entry(pk, index, pixels)
                out.append((n, (stats, img if keep else None, None)))
            except KeyError:
                out.append((n, (None, None, None)))
            except BadEntry as exc:
                out.append((n, (None, None, exc)))
        return out

    def _read_many(self, keys: list[str], pixels: bool, keep: bool, threads: int = 1) -> list[Checked]:
        """Checked entries of `keys`, in order; each pack is read once, packs spread over `threads` threads (reading,
        PNG decoding and hashing release the GIL) in tasks of about KEYS_PER_TASK keys."""
        videos: dict[str, list[tuple[int, int]]] = {}
        for n, key in enumerate(keys):
            digest, index = pack.split_key(key)
            videos.setdefault(digest, []).append((n, index))
        tasks: list[list[tuple[str, list[tuple[int, int]]]]] = [[]]
        size = 0
        for digest, wanted in videos.items():
            if size >= KEYS_PER_TASK:
                tasks.append([])
                size = 0
            tasks[-1].append((digest, wanted))
            size += len(wanted)

        def run(task):
            return [c for digest, wanted in task for c in self._read_video(digest, wanted, pixels, keep)]

        if threads > 1 and len(tasks) > 1:
            with ThreadPoolExecutor(threads) as pool:
                parts = list(pool.map(run, tasks))
        else:
            parts = [run(task) for task in tasks]
        out: list[Checked] = [(None, None, None)] * len(keys)
        for part in parts:
            for n, checked in part:
                out[n] = checked
        return out

    def _bad(self, key: str, exc: BadEntry, counters: dict | None = None) -> None:
        (self.counters if counters is None else counters)["bad_entries"] += 1
        log.warning("frame cache: entry %s is bad (%s); it is not used and the frame is decoded again", key, exc)

    def lookup(self, key: str, pixels: bool | None = None) -> dict | None:
        """The stored stats of a checked cache entry, or None when the frame is not cached or its entry is bad
        (counted, logged). pixels: decode and hash the pixels too (default: `check_pixels`); False checks the
        record only (CRC, key), without decoding."""
        return self.lookup_many([key], pixels)[0]

    def lookup_many(self, keys: list[str], pixels: bool | None = None, threads: int = 1) -> list[dict | None]:
        """`lookup` of many keys: each video's pack read once, on `threads` threads."""
        checked = self._read_many(keys, self.check_pixels if pixels is None else pixels, False, threads)
        for key, (_, _, exc) in zip(keys, checked):
            if exc is not None:
                self._bad(key, exc)
        return [stats for stats, _, _ in checked]

    def has(self, key: str) -> bool:
        return self.lookup(key, pixels=False) is not None

    def get(self, key: str, counters: dict | None = None) -> np.ndarray:
        """The checked RGB pixels; KeyError when absent, BadEntry (counted, logged) when the entry is bad.
        counters: where to count it (default self.counters; a thread passes its own, summed by its caller)."""
        ((_, img, exc),) = self._read_many([key], pixels=True, keep=True)
        if exc is not None:
            self._bad(key, exc, counters)
            raise exc
        if img is None:
            raise KeyError(key)
        return img

    def get_many(self, keys: list[str], counters: dict | None = None) -> list[np.ndarray | None]:
        """`get` of several frames (of one video: its pack is read once), in order: None for an absent frame or a
        bad entry (counted, logged as in `get`)."""
        out = []
        for key, (_, img, exc) in zip(keys, self._read_many(keys, pixels=True, keep=True)):
            if exc is not None:
                self._bad(key, exc, counters)
            out.append(img)
        return out

    # -------------------------------------------------------------------------------------------- writing
    def put(self, key: str, img: np.ndarray, meta: dict) -> None:
        self.put_many([(key, img, meta)])

    def put_many(self, entries) -> None:
        """Write (key, RGB pixels, stats) entries: one pack write per video, merged into its existing pack."""
        videos: dict[str, dict[int, bytes]] = {}
        for key, img, stats in entries:
            digest, index = pack.split_key(key)
            png = encode_png(img, self.png_compression, self.png_filter)
            videos.setdefault(digest, {})[index] = pack.encode_record(key, png, stats)
        for digest, records in videos.items():
            try:
                old = self._load(digest)
            except BadEntry:  # unreadable: replaced by the new records alone
                old = None
            _atomic_write(self._pack_file(digest), old.merged(records) if old is not None else pack.pack_bytes(records))

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
