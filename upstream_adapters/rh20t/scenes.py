"""Where an RH20T scene is stored: an extracted folder (`_FolderScene`) or members of a tar.gz (`_TarScene`, on the
archive index `_Archive`). Both answer the same questions (cameras, read files, the video source) and name files
relative to the source root (`<archive>:<member>` inside an archive). Links inside an archive are refused.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from upstream_adapters.base import safe_join
from upstream_adapters.ir import UnitError
from upstream_adapters.limits import ArchiveLimits
from upstream_adapters.storage.targz import ArchiveDamaged, Member as _Member, MemberRefused, TarGzIndex

SCENE_RE = re.compile(r"task_(\d+)_user_(\d+)_scene_(\d+)_cfg_(\d+)")
HUMAN_RE = re.compile(r"task_\d+_user_\d+_scene_\d+_cfg_\d+_human(?:_\d+)?")
CFG_DIR_RE = re.compile(r"RH20T_cfg(\d+)")
CFG_TAR_RE = re.compile(r"RH20T_cfg(\d+)\.tar\.gz")


@dataclass
class _Archive(TarGzIndex):
    """Member index of one RH20T_cfgN.tar.gz: robot scenes and paired human folders."""

    scenes: dict[str, dict[str, _Member]] = field(default_factory=dict)  # scene -> {path in scene: member}
    human: set[str] = field(default_factory=set)

    def record(self, parts: list[str], member: _Member) -> None:
        if len(parts) >= 2 and CFG_DIR_RE.fullmatch(parts[0]):
            parts = parts[1:]
        if SCENE_RE.fullmatch(parts[0]):
            self.scenes.setdefault(parts[0], {})["/".join(parts[1:])] = member
        elif HUMAN_RE.fullmatch(parts[0]):
            self.human.add(parts[0])


# ---------------------------------------------------------------------------------------------------------------
# A scene, wherever it is stored
# ---------------------------------------------------------------------------------------------------------------


class _FolderScene:
    def __init__(self, root: Path, prefix: str, scene: str, limits: ArchiveLimits | None = None):
        self.root, self.prefix, self.scene = root, prefix, scene
        self.limits = limits or ArchiveLimits()
        self.base = safe_join(root, f"{prefix}{scene}")  # refuses a symlinked scene dir pointing outside
        if not self.base.is_dir():
            raise UnitError("scene folder is not a directory", file=f"{prefix}{scene}")

    def where(self, rel: str) -> str:
        return f"{self.prefix}{self.scene}/{rel}"

    def cameras(self) -> list[str]:
        out = []
        for entry in os.scandir(self.base):
            if entry.name.startswith("cam_") and os.path.isfile(os.path.join(entry.path, "color.mp4")):
                out.append(entry.name[4:])
        return sorted(out)

    def _path(self, rel: str) -> Path:
        p = safe_join(self.root, self.where(rel))
        if not p.is_file():
            raise UnitError(f"missing {rel}", file=self.where(rel))
        return p

    def read(self, rels: Sequence[str], json_max: int | None = None) -> dict[str, bytes]:
        out = {}
        for rel in rels:
            p = self._path(rel)
            try:  # the files read whole (metadata, pickles) are bounded like archive members
                why = self.limits.refuse(rel, p.stat().st_size, None) or _json_over(rel, p.stat().st_size, json_max)
                if why:
                    raise UnitError(why, file=self.where(rel))
                out[rel] = p.read_bytes()
            except OSError as exc:
                raise UnitError(f"cannot read {rel}: {exc.strerror}", file=self.where(rel)) from None
        return out

    def video(self, rel: str, data: dict[str, bytes] | None = None):
        return self._path(rel)

    def files(self) -> list[tuple[str, Path, tuple | None]]:
        """Every regular file of the scene folder (for the unit fingerprint)."""
        out = []
        for dirpath, _dirs, names in os.walk(self.base, followlinks=True):
            for n in names:
                p = Path(dirpath, n)
                out.append((f"{self.prefix}{self.scene}/{p.relative_to(self.base).as_posix()}", p, None))
        return out


class _TarScene:
    def __init__(self, root: Path, archive: _Archive, scene: str):
        self.root, self.archive, self.scene = root, archive, scene
        self.path = safe_join(root, archive.rel)
        self.members = archive.scenes[scene]
        if archive.damage:
            raise UnitError(
                f"archive {archive.rel} is damaged, its scenes are not trusted: {archive.damage}", file=archive.rel
            )
        top = self.members.get("")
        if top is not None and top.kind not in ("dir",):
            raise UnitError("scene folder is a link inside the archive (refused)", file=self.where(""))

    def where(self, rel: str) -> str:
        m = self.members.get(rel)
        name = m.name if m else f"{self.scene}/{rel}"
        return f"{self.archive.rel}:{name}"

    def cameras(self) -> list[str]:
        return sorted(
            {
                rel.split("/")[0][4:]
                for rel, m in self.members.items()
                if rel.startswith("cam_") and rel.endswith("/color.mp4") and rel.count("/") == 1
            }
        )

    def _member(self, rel: str) -> _Member:
        m = self.members.get(rel)
        if m is None:
            raise UnitError(f"missing {rel}", file=self.where(rel))
        if m.kind != "file":
            raise UnitError(
                f"{rel} is not a regular file in the archive ({m.kind}; links are refused)", file=self.where(rel)
            )
        return m

    def read(self, rels: Sequence[str], json_max: int | None = None) -> dict[str, bytes]:
        members = {rel: self._member(rel) for rel in rels}
        for rel, m in members.items():  # refused from the archive's index, before a byte is inflated
            why = _json_over(rel, m.size, json_max)
            if why:
                raise UnitError(why, file=self.where(rel))
        try:
            got = self.archive.read(self.path, members.values())
        except MemberRefused as exc:
            raise UnitError(str(exc), file=f"{self.archive.rel}:{exc.member}") from None
        except (ArchiveDamaged, OSError) as exc:
            raise UnitError(
                f"cannot read scene from archive {self.archive.rel}: {exc}", file=self.archive.rel
            ) from None
        return {rel: got[m.name] for rel, m in members.items()}

    def files(self) -> list[tuple[str, Path, tuple | None]]:
        """The archive, once per member of the scene with the member's identity (for the unit fingerprint)."""
        return [(f"{self.archive.rel}:{m.name}", self.path, (m.offset, m.size, m.kind)) for m in self.members.values()]

    def video(self, rel: str, data: dict[str, bytes] | None = None):
        if data is not None and rel in data:
            return data[rel]
        return self.read([rel])[rel]


def _json_over(rel: str, size: int, json_max: int | None) -> str | None:
    """Why a JSON file or member of `size` bytes is not read (input_limits.max_metadata_bytes), or None."""
    if json_max is not None and rel.endswith(".json") and size > json_max:
        return f"{rel} is {size} bytes, over input_limits.max_metadata_bytes ({json_max}): refused before reading"
    return None
