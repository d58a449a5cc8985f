"""Bad inputs of bench/fault_campaign.py for the AIST zips and the GM-100 task metadata: `cases(tmp)` yields (case, slug, root, good units, units
lost at least, undo callables) per planted defect."""

from __future__ import annotations

import builtins
import io
import os
from pathlib import Path

from upstream_adapters.samples import aist as A
from upstream_adapters.samples import gm100 as G

EPISODES = 4


def _aist_ep(tid: str, name: str, i: int) -> bytes:
    _, _, taxonomy, prompt = next(t for t in A.TASKS if t[0] == tid)
    return A.episode_bytes(tid, name, taxonomy, prompt, i, 12, (32, 24), seed=0)


def _aist_root(tmp: Path, how: str) -> tuple[Path, int, list]:
    """An AIST root of two good tasks (4 episodes each) and task_016 damaged `how`; (root, units it held, undo)."""
    root = tmp / "aist"
    root.mkdir(parents=True)
    A.write_manifest(root)
    for name, tid in (("insert_usb_cable", "task_004"), ("close_cardboard_box", "task_089")):
        A.write_task_zip(root / f"{name}.zip", {f"{name}/episode_{i}.hdf5": _aist_ep(tid, name, i)
                                                for i in range(EPISODES)})
    bad = root / "insert_rod_board.zip"
    A.write_task_zip(bad, {f"insert_rod_board/episode_{i}.hdf5": _aist_ep("task_016", "insert_rod_board", i)
                           for i in range(EPISODES)})
    undo = []
    if how == "zero-length zip":
        bad.write_bytes(b"")
    elif how == "not a zip":
        bad.write_bytes(b"<html>Dropbox: this link has expired</html>")
    elif how == "unreadable zip":
        real = builtins.open

        def deny(file, *a, **kw):
            if isinstance(file, (str, os.PathLike)) and os.fspath(file) == os.fspath(bad):
                raise PermissionError(13, "Permission denied", os.fspath(file))
            return real(file, *a, **kw)
        builtins.open = io.open = deny
        undo.append(lambda: setattr(builtins, "open", real) or setattr(io, "open", real))
    elif how == "directory instead of the zip":
        bad.unlink()
        bad.mkdir()
    elif how == "zip cut at 50 %":
        data = bad.read_bytes()
        bad.write_bytes(data[: len(data) // 2])
    return root, EPISODES, undo


def _gm100_root(tmp: Path, line: bytes) -> Path:
    root = tmp / "gm100"
    G.write(root, scale="tiny", seed=0)
    path = root / "task_00001" / "meta" / "episodes.jsonl"
    path.write_bytes(path.read_bytes() + line + b"\n")
    return root


def cases(tmp: Path):
    for n, how in enumerate(["zero-length zip", "not a zip", "unreadable zip", "directory instead of the zip",
                             "zip cut at 50 %"]):
        root, held, undo = _aist_root(tmp / f"a{n}", how)
        yield f"aist: {how}", "aist", root, 2 * EPISODES, held, undo
    gm_lines = {"cut JSON": b'{"episode_index": 3,', "string index": b'{"episode_index": "3"}',
                "a list": b"[1,2]", "NaN": b'{"episode_index": NaN}', "key twice": b'{"episode_index": 0, '
                b'"episode_index": 1}', "NUL bytes": b"\x00\x00", "non-UTF-8": b'{"task": "\xff"}',
                "5000 deep": b"[" * 5000 + b"]" * 5000, "missing episode": b'{"episode_index": 99999}'}
    for n, (what, line) in enumerate(gm_lines.items()):
        yield (f"gm100: episodes.jsonl line {what}", "gm100", _gm100_root(tmp / f"g{n}", line), 4,
               1 if what == "missing episode" else 0, [])
