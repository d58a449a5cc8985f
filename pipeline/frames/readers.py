"""Frame readers: picklable factories `open_reader(source) -> read(unit_id, camera, indices) -> {index: RGB}`.

They cross process boundaries (the extraction pool pickles them into every task), so they hold only plain data
(slugs, options, root paths, the decoder setting) and build the adapter inside the worker. The decoder and its
thread count are fields of the factory, passed to every `read_frames` call (no process-global decoder state).

- `AdapterReaders` (the build, reconstruction): adapter.read_frames for each source's configured root.
- `DirectoryReaders` (tests, benchmark): one video file per (source, unit, camera) under a folder.

Each factory also gives `fingerprint(source, unit_id, camera)`: a path-free content fingerprint of the upstream files the
frames come from (`SourceAdapter.fingerprint` of the unit; a single file's size + full-content sha256 for
`DirectoryReaders`), part of every frame-cache key (cache.py). `unit_fingerprint(open_reader, ...)` is the one
entry point; a factory without one cannot use the cache.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from upstream_adapters import get_adapter
from upstream_adapters.media import video
from upstream_adapters.base import SourceAdapter, file_digest

if TYPE_CHECKING:
    from pipeline.settings.root import Settings

Reader = Callable[[str, str, Sequence[int]], dict[int, np.ndarray]]

# Adapters built in this process, reused across videos: some keep per-process indexes (RH20T's tar member index).
_ADAPTERS: dict[tuple, SourceAdapter] = {}


class AdapterReaders:
    """source slug -> reader through `get_adapter(slug, **options).read_frames(root, ..., decoder=...)`."""

    def __init__(self, sources: dict[str, tuple[dict, str | Path]], decoder: str = "auto", threads: int = 1):
        self.sources = {slug: (dict(opts or {}), str(root)) for slug, (opts, root) in sources.items()}
        self.decoder = decoder
        self.threads = int(threads)

    @classmethod
    def from_config(cls, cfg: Settings, roots: dict[str, str | Path] | None = None) -> "AdapterReaders":
        """Every source of cfg.sources; `roots` (slug -> path) overrides the configured roots."""
        roots = roots or {}
        fr = cfg.frames
        return cls(
            {slug: (src.adapter.options(), roots.get(slug, src.root)) for slug, src in cfg.sources.items()},
            decoder=fr.decoder,
            threads=int(fr.decoder_threads),
        )

    def reader_id(self, source: str) -> str:
        """Part of the frame-cache key."""
        return f"adapter:{source}"

    def fingerprint(self, source: str, unit_id: str, camera: str) -> str:
        """The unit's upstream fingerprint (every camera of a unit shares it); UnitError when the unit's files
        cannot be listed."""
        return self.adapter(source).fingerprint(Path(self.sources[source][1]), unit_id)

    def adapter(self, source: str) -> SourceAdapter:
        if source not in self.sources:
            raise KeyError(f"no upstream root configured for source {source!r}")
        opts, _ = self.sources[source]
        memo_key = (source, repr(sorted(opts.items())))
        adapter = _ADAPTERS.get(memo_key)
        if adapter is None:
            adapter = _ADAPTERS[memo_key] = get_adapter(source, **opts)
        return adapter

    def __call__(self, source: str) -> Reader:
        adapter = self.adapter(source)
        root_path = Path(self.sources[source][1])
        decoder, threads = self.decoder, self.threads

        def read(unit_id: str, camera: str, indices: Sequence[int]) -> dict[int, np.ndarray]:
            return adapter.read_frames(root_path, unit_id, camera, list(indices), decoder=decoder, threads=threads)

        return read


class DirectoryReaders:
    """source -> reader of `<root>/<pattern>` video files, pattern fields {source} {unit_id} {camera}."""

    def __init__(
        self,
        root: str | Path,
        pattern: str = "{source}/{unit_id}/{camera}.mp4",
        decoder: str = "auto",
        threads: int = 1,
    ):
        self.root = str(root)
        self.pattern = pattern
        self.decoder = decoder
        self.threads = int(threads)

    def reader_id(self, source: str) -> str:
        return f"dir:{self.pattern}"

    def fingerprint(self, source: str, unit_id: str, camera: str) -> str:
        return file_digest(Path(self.root) / self.pattern.format(source=source, unit_id=unit_id, camera=camera))

    def __call__(self, source: str) -> Reader:
        root = Path(self.root)
        pattern, decoder, threads = self.pattern, self.decoder, self.threads

        def read(unit_id: str, camera: str, indices: Sequence[int]) -> dict[int, np.ndarray]:
            path = root / pattern.format(source=source, unit_id=unit_id, camera=camera)
            if not path.exists():
                raise FileNotFoundError(f"no video for {source}/{unit_id}/{camera}")
            return video.read_frames(path, indices, decoder=decoder, threads=threads)

        return read


def unit_fingerprint(open_reader, source: str, unit_id: str, camera: str) -> str:
    """The upstream fingerprint of (source, unit, camera) from the reader factory; raises what it raises."""
    fn = getattr(open_reader, "fingerprint", None)
    if not callable(fn):
        raise TypeError(
            f"{type(open_reader).__name__} has no fingerprint(source, unit_id, camera): frames read "
            "through it cannot be cached"
        )
    return str(fn(source, unit_id, camera))


def reader_id(open_reader, source: str) -> str:
    fn = getattr(open_reader, "reader_id", None)
    return fn(source) if callable(fn) else ""
