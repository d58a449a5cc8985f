"""Bounds on what reading an archive may cost: the largest member read, the largest compression ratio, the most bytes
one archive may expand to. A member past a bound is refused before it is inflated, so a zip or gzip bomb costs
neither RAM nor temporary disk; the refusal is the reason of that unit's quarantine row.

The values come from the adapter option `archive_limits` (configs/sources.yaml, typed by pipeline/settings/models.py
`ArchiveLimits`); the defaults below only serve an adapter constructed without configs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

GIB = 1 << 30


@dataclass(frozen=True)
class ArchiveLimits:
    max_member_bytes: int = 4 * GIB  # one member's uncompressed size
    max_compression_ratio: float = 200.0  # uncompressed / compressed size of one member
    max_archive_bytes: int = 1 << 40  # what one archive may expand to in total (a tar.gz is read end to end)

    @classmethod
    def of(cls, value: "ArchiveLimits | dict | None") -> "ArchiveLimits":
        if isinstance(value, cls):
            return value
        limits = cls(**(value or {}))
        if limits.max_member_bytes <= 0 or limits.max_archive_bytes <= 0 or not limits.max_compression_ratio > 1:
            raise ValueError(f"archive_limits must be positive (ratio > 1): {asdict(limits)}")
        return limits

    def refuse(self, name: str, size: int, compressed: int | None) -> str | None:
        """Why member `name` (`size` bytes, `compressed` bytes in the archive when known) must not be read, or None."""
        if size > self.max_member_bytes:
            return (
                f"archive member {name!r} expands to {size} bytes, over archive_limits.max_member_bytes "
                f"({self.max_member_bytes})"
            )
        if compressed is not None and size > self.max_compression_ratio * max(compressed, 1):
            return (
                f"archive member {name!r} expands {size / max(compressed, 1):.0f}x ({compressed} -> {size} "
                f"bytes), over archive_limits.max_compression_ratio ({self.max_compression_ratio:g}): "
                "refused as a decompression bomb"
            )
        return None


MIB = 1 << 20


@dataclass(frozen=True)
class InputLimits:
    """Bounds on what one upstream file may declare, checked against the declared sizes before anything is allocated
    (a few KB of header can declare GBs): a file past a bound costs its unit, quarantined with the file and the bound
    named. The values come from `build.input_limits` (configs/build.yaml, typed by pipeline/settings/models.py
    `InputLimits`); every adapter gets them as `adapter.input_limits` (upstream_adapters.get_adapter)."""

    max_video_samples: int = 5_000_000  # samples (frames) one video track declares: MP4 sample table / fragments
    max_hdf5_dataset_bytes: int = 2 << 30  # declared size (shape x item size) of one HDF5 dataset read whole
    max_image_pixels: int = 50_000_000  # width x height of one encoded image row, from its header
    max_metadata_bytes: int = 64 * MIB  # one metadata / list file (JSON, JSONL, CSV, text), on disk or in an archive
    max_json_depth: int = 64  # nesting of one JSON document (objects and arrays)

    @classmethod
    def of(cls, value: "InputLimits | dict | None") -> "InputLimits":
        if isinstance(value, cls):
            return value
        limits = cls(**(value or {}))
        if min(asdict(limits).values()) <= 0:
            raise ValueError(f"input_limits must be positive: {asdict(limits)}")
        return limits
