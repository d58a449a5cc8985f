"""Bad inputs of bench/fault_campaign.py for the REASSEMBLE split list and unit ids: `cases(tmp)` yields (case, slug, root, good units, units
lost at least, undo callables) per planted defect."""

from __future__ import annotations

from pathlib import Path

from upstream_adapters.samples import reassemble as R


def _reassemble_root(tmp: Path, bad_line: bytes | None, bad_id: str | None) -> Path:
    recs = ["2025-01-09-13-57-17", "2025-01-09-14-01-02"]
    root = tmp / "reassemble"
    for seed, rec in enumerate(recs + ([bad_id] if bad_id else [])):
        R.write_recording(root / "data" / f"{rec}.h5", R.RecSpec(recs[seed % 2]), "tiny", seed=seed)
    (root / "splits").mkdir()
    listed = "\n".join(recs + ([bad_id] if bad_id else [])).encode() + b"\n" + (bad_line or b"")
    (root / "splits" / "test_split1.txt").write_bytes(listed)
    return root


def cases(tmp: Path):
    yield (
        "reassemble: non-UTF-8 split-list line",
        "reassemble",
        _reassemble_root(tmp / "r0", b"2025-01-09-14-\xff9-00\n", None),
        2,
        1,
        [],
    )
    for n, (what, uid) in enumerate(
        {
            "zero-width space": "2025-01-09-14-01-02\u200b",
            "ANSI escape": "2025-01-09-14-01-02\x1b[2J",
            "not NFC": "2025-01-09-14-01-02e\u0301",
        }.items()
    ):
        yield (
            f"reassemble: unit id with {what}",
            "reassemble",
            _reassemble_root(tmp / f"r{n + 1}", None, uid),
            2,
            1,
            [],
        )
