"""Bad inputs of bench/fault_campaign.py for the AIST zips and the GM-100 task metadata: `cases(tmp)` yields (case, slug, root, good units, units
lost at least, undo callables) per planted defect."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the shared test factories

from factories import AIST_EPISODES, AIST_GOOD, ZIP_DAMAGE, aist_root_with_bad_zip

from upstream_adapters.samples import gm100 as G


def _recording_setattr(undo: list):
    """A setattr that records how to put the old value back (what pytest's monkeypatch does at teardown)."""

    def setattr_(obj, name, value):
        old = getattr(obj, name)
        undo.append(lambda: setattr(obj, name, old))
        setattr(obj, name, value)

    return setattr_


def _gm100_root(tmp: Path, line: bytes) -> Path:
    root = tmp / "gm100"
    G.write(root, scale="tiny", seed=0)
    path = root / "task_00001" / "meta" / "episodes.jsonl"
    path.write_bytes(path.read_bytes() + line + b"\n")
    return root


def cases(tmp: Path):
    for n, how in enumerate(ZIP_DAMAGE):
        undo: list = []
        root, _ = aist_root_with_bad_zip(tmp / f"a{n}", how, _recording_setattr(undo))
        yield (
            f"aist: task zip {how.replace('_', ' ')}",
            "aist",
            root,
            len(AIST_GOOD) * AIST_EPISODES,
            AIST_EPISODES,
            undo[::-1],
        )
    gm_lines = {
        "cut JSON": b'{"episode_index": 3,',
        "string index": b'{"episode_index": "3"}',
        "a list": b"[1,2]",
        "NaN": b'{"episode_index": NaN}',
        "key twice": b'{"episode_index": 0, "episode_index": 1}',
        "NUL bytes": b"\x00\x00",
        "non-UTF-8": b'{"task": "\xff"}',
        "5000 deep": b"[" * 5000 + b"]" * 5000,
        "missing episode": b'{"episode_index": 99999}',
    }
    for n, (what, line) in enumerate(gm_lines.items()):
        yield (
            f"gm100: episodes.jsonl line {what}",
            "gm100",
            _gm100_root(tmp / f"g{n}", line),
            4,
            1 if what == "missing episode" else 0,
            [],
        )
