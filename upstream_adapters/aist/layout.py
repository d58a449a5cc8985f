"""Where AIST-Bimanual episodes are stored in a source root: task zips, extracted task folders and the selected20
re-layout (docs/upstream-formats.md, AIST-Bimanual), and how each task gets its id. `AistLayout` is a mixin of
`AistAdapter` (it reads the adapter's options `tasks` and `task_ids`)."""

from __future__ import annotations

import csv
import io
import os
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from upstream_adapters.base import read_metadata, require_root, safe_join, typical_units
from upstream_adapters.ir import SourceError, UnitAbsent, UnitError
from upstream_adapters.storage.zipwindow import is_symlink, local_members, unsafe_member as _unsafe_member

SLUG = "aist"
MANIFEST = "aist_bimanual_manifest.csv"
_EPISODE_RE = re.compile(r"episode_(\d+)\.hdf5")
_TASK_ID_RE = re.compile(r"task_\d+")


@dataclass(frozen=True)
class _Episode:
    number: int
    rel: str  # hdf5 path (folder layout) or zip path (zip layout), relative to the root
    member: str | None = None  # zip member name
    refused: str | None = None  # why this member is never read (unsafe name)

    @property
    def label(self) -> str:
        """The file named in errors: the hdf5 path, or `<zip>/<member>` for a zip member."""
        return f"{self.rel}/{self.member}" if self.member is not None else self.rel


@dataclass
class _Task:
    task_name: str
    kind: str  # zip | dir
    rel: str  # the zip or the folder, relative to the root
    task_id: str | None = None
    taxonomy: str | None = None  # from the manifest (the HDF5 attr wins)
    error: str | None = None  # set when the task's storage cannot be listed
    absent: bool = False  # the task is selected but has no zip or folder in the root (not downloaded)
    episodes: dict[int, _Episode] = field(default_factory=dict)
    partial: bool = False  # an unreadable zip whose local headers end at a cut: it held more than `episodes` names

    @property
    def sentinel(self) -> str:
        return f"{self.task_id}_unreadable" if self.task_id else f"unmapped_{self.task_name}"


# The public AIST-Bimanual task table (task id, task name, taxonomy) as shipped with this repository.
TASK_TABLE = Path(__file__).resolve().parents[2] / "configs" / "aist_tasks.csv"


def read_task_table(path: Path, what: str) -> dict[str, tuple[str, str | None]]:
    """task_name -> (task_id, taxonomy) from a CSV whose first columns are task_id,task_name[,taxonomy,...]."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise SourceError(f"{SLUG}: {what} is unreadable: {type(exc).__name__}") from None
    return parse_task_table(text, what)


def parse_task_table(text: str, what: str) -> dict[str, tuple[str, str | None]]:
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or [c.strip() for c in rows[0][:2]] != ["task_id", "task_name"]:
        raise SourceError(f"{SLUG}: {what} does not start with the columns task_id,task_name,taxonomy")
    out: dict[str, tuple[str, str | None]] = {}
    for row in rows[1:]:
        if len(row) < 2 or not row[0].strip():
            continue
        tid, tname = row[0].strip(), row[1].strip()
        taxonomy = row[2].strip() if len(row) > 2 and row[2].strip() else None
        if _TASK_ID_RE.fullmatch(tid) and tname:
            out[tname] = (tid, taxonomy)
    return out


class AistLayout:
    def _known_tasks(self, root: Path) -> dict[str, tuple[str, str | None]]:
        """task_name -> (task_id, taxonomy): the public task table, extended (and overridden) by a manifest in the
        root when there is one."""
        table = read_task_table(
            self.task_table or TASK_TABLE,
            f"task table {Path(self.task_table).name if self.task_table else 'configs/aist_tasks.csv'}",
        )
        return {**table, **(self._read_manifest(root) or {})}

    def _read_manifest(self, root: Path) -> dict[str, tuple[str, str | None]] | None:
        """task_name -> (task_id, taxonomy), or None when the root has no manifest."""
        if not os.path.lexists(root / MANIFEST):
            return None
        try:
            text = read_metadata(root, MANIFEST, self.input_limits.max_metadata_bytes)
        except UnitError as exc:
            raise SourceError(
                f"{SLUG}: manifest {MANIFEST} in root {root.name!r} is unreadable: {exc.reason}"
            ) from None
        if not text.strip():
            return {}
        return parse_task_table(text, f"manifest {MANIFEST} in root {root.name!r}")

    def _scan(self, root: Path) -> list[_Task]:
        """The tasks stored in the root (episodes not listed yet), with their task ids; sorted by task name."""
        root = require_root(root, SLUG)
        manifest = self._known_tasks(root)
        found: dict[str, _Task] = {}
        names = sorted(os.listdir(root))
        if not names:
            raise SourceError(f"{SLUG}: root {root.name!r} is empty")
        for entry in names:
            if entry.startswith(".") or entry == MANIFEST or entry == "__MACOSX":
                continue
            path = root / entry
            if entry.lower().endswith(".zip") and not path.is_dir():
                tname = entry[:-4]
                found.setdefault(tname, _Task(tname, "zip", entry))
                continue
            if not path.is_dir():
                continue
            if entry.lower().endswith(".zip"):  # a task zip extracted into a folder of its own name: read as one
                found.setdefault(entry[:-4], _Task(entry[:-4], "dir", entry))
                continue
            try:
                safe_join(root, entry)
            except UnitError as exc:
                # a task folder symlinked out of the root: listed, never read
                tname = entry
                found[tname] = _Task(tname, "dir", entry, error=f"task folder {entry!r} refused: {exc.reason}")
                if _TASK_ID_RE.fullmatch(entry):
                    found[tname].task_id = entry
                continue
            if _TASK_ID_RE.fullmatch(entry):
                # ProcessBench selected20 layout: task_XXX/<task_name>/episode_N.hdf5
                try:
                    subs = sorted(os.listdir(path))
                except OSError as exc:  # one unreadable folder: its <task_id>_unreadable unit is quarantined
                    found[entry] = _Task(
                        entry,
                        "dir",
                        entry,
                        task_id=entry,
                        error=f"task folder {entry!r} cannot be listed: {type(exc).__name__}",
                    )
                    continue
                for sub in subs:
                    subrel = f"{entry}/{sub}"
                    if sub.startswith(".") or not (path / sub).is_dir():
                        continue
                    task = _Task(sub, "dir", subrel, task_id=entry)
                    try:
                        safe_join(root, subrel)
                    except UnitError as exc:
                        task.error = f"task folder {subrel!r} refused: {exc.reason}"
                    found[sub] = task
                continue
            try:
                listing = os.listdir(path)
            except OSError as exc:
                found[entry] = _Task(
                    entry, "dir", entry, error=f"task folder {entry!r} cannot be listed: {type(exc).__name__}"
                )
                continue
            if any(_EPISODE_RE.fullmatch(n) for n in listing) or (path / entry).is_dir():
                found[entry] = _Task(entry, "dir", entry)  # an extracted zip; wins over the zip itself
            elif any(n.lower().endswith(".hdf5") for n in listing):
                found[entry] = _Task(
                    entry, "dir", entry, error=f"task folder {entry!r} holds .hdf5 files but none named episode_N.hdf5"
                )
        if not found:
            raise SourceError(
                f"{SLUG}: root {root.name!r} holds no AIST task zips (<task_name>.zip) or task "
                "folders (<task_name>/episode_N.hdf5)"
            )
        for tname, task in found.items():
            m = (manifest or {}).get(tname)
            if m and task.taxonomy is None:
                task.taxonomy = m[1]
            if task.task_id is None:
                task.task_id = self.task_ids.get(tname) or (m[0] if m else None)
        tasks = [found[k] for k in sorted(found)]
        owner: dict[str, str] = {}
        for task in tasks:  # two task names claiming one task id: neither is trusted
            if task.task_id is None:
                continue
            if task.task_id in owner:
                for t in tasks:
                    if t.task_id == task.task_id:
                        t.error = (
                            f"task id {task.task_id} is claimed by several task names "
                            f"({owner[task.task_id]!r}, {task.task_name!r})"
                        )
            owner.setdefault(task.task_id, task.task_name)
        if self.tasks is not None:
            have = {t.task_id for t in tasks}
            known = have | {v[0] for v in (manifest or {}).values()} | set(self.task_ids.values())
            unknown = sorted(set(self.tasks) - known)
            if unknown:
                raise SourceError(
                    f"{SLUG}: requested tasks {unknown} are neither in {MANIFEST} nor in root {root.name!r}"
                )
            keep = set(self.tasks)
            tasks = [t for t in tasks if t.task_id in keep]
            for tid in sorted(keep - have):
                name = next((n for n, v in (manifest or {}).items() if v[0] == tid), None) or next(
                    (n for n, v in self.task_ids.items() if v == tid), tid
                )
                tasks.append(
                    _Task(
                        name,
                        "zip",
                        f"{name}.zip",
                        task_id=tid,
                        absent=True,
                        error=f"task {tid} ({name}) has no zip or folder in the root",
                    )
                )
        return tasks

    def _list_episodes(self, root: Path, task: _Task) -> None:
        """Fill task.episodes (or task.error) from the folder or the zip's central directory, listed once per
        (file, size, mtime, inode): every unit of a task resolves through it, and a zip's central directory read per
        unit made a task of n members cost n^2 (10,000 empty members: 18 minutes)."""
        if task.error or task.episodes:
            return
        try:
            st = os.stat(safe_join(root, task.rel))
            key = (
                os.path.realpath(safe_join(root, task.rel)),
                task.task_name,
                task.kind,
                st.st_size,
                st.st_mtime_ns,
                st.st_ino,
            )
        except (OSError, UnitError):
            key = None
        cache = self.__dict__.setdefault("_listings", {})  # per-process state (not pickled: `_` prefix)
        if key is not None and key in cache:
            episodes, task.error, task.partial = cache[key]
            task.episodes.update(episodes)
            return
        self._list_episodes_uncached(root, task)
        if key is not None:
            if len(cache) >= 256:
                cache.clear()
            cache[key] = (dict(task.episodes), task.error, task.partial)

    def _list_episodes_uncached(self, root: Path, task: _Task) -> None:
        if task.kind == "dir":
            # episodes directly inside, else inside <folder>/<task_name>/ (the zip's member layout, extracted)
            for rel in (task.rel, f"{task.rel}/{task.task_name}"):
                folder = safe_join(root, rel)
                if not folder.is_dir():
                    continue
                try:
                    listing = sorted(os.listdir(folder))
                except OSError as exc:
                    task.error = f"task folder {rel!r} cannot be listed: {type(exc).__name__}"
                    return
                for fn in listing:
                    m = _EPISODE_RE.fullmatch(fn)
                    if m:
                        task.episodes.setdefault(int(m.group(1)), _Episode(int(m.group(1)), f"{rel}/{fn}"))
                if task.episodes:
                    break
            if not task.episodes:
                task.error = f"task folder {task.rel!r} holds no episode_N.hdf5 files"
            return
        try:
            zpath = safe_join(root, task.rel)
        except UnitError as exc:
            task.error = f"task zip {task.rel!r} refused: {exc.reason}"
            return
        try:
            with zipfile.ZipFile(zpath) as zf:
                infos = zf.infolist()
        except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
            task.error = f"task zip {task.rel!r} is not a readable zip archive: {exc}"
            try:  # name the episodes its local headers still show, so each counts as a lost unit
                names, complete = local_members(zpath)
            except OSError:
                names, complete = [], False
            task.partial = bool(names) and not complete
            for name in names:
                m = _EPISODE_RE.fullmatch(name.split("/")[-1])
                if m and not _unsafe_member(name):
                    n = int(m.group(1))
                    task.episodes.setdefault(n, _Episode(n, task.rel, name, refused=task.error))
            return
        exact = re.compile(re.escape(task.task_name) + r"/episode_(\d+)\.hdf5")
        loose = re.compile(r"(?:[^/]+/)?episode_(\d+)\.hdf5")
        refused: dict[int, _Episode] = {}
        ranked: dict[int, tuple[int, str, int]] = {}
        for info in sorted(infos, key=lambda i: i.filename):
            name = info.filename
            if name.endswith("/"):
                continue
            why = _unsafe_member(name)
            if why is None and is_symlink(info):
                m = _EPISODE_RE.fullmatch(name.split("/")[-1])
                if m:
                    n = int(m.group(1))
                    refused.setdefault(
                        n,
                        _Episode(
                            n, task.rel, name, f"zip member {name!r} is a symlink; links inside archives are refused"
                        ),
                    )
                continue
            if why:
                m = _EPISODE_RE.fullmatch(re.split(r"[/\\]", name)[-1])
                if m:
                    n = int(m.group(1))
                    refused.setdefault(
                        n,
                        _Episode(n, task.rel, name, f"zip member name {name!r} is unsafe ({why}); refused (zip-slip)"),
                    )
                continue
            m = exact.fullmatch(name)
            rank = 0
            if not m:
                m, rank = loose.fullmatch(name), 1
            if m:
                n = int(m.group(1))
                if n not in ranked or rank < ranked[n][0]:
                    ranked[n] = (rank, name, info.file_size)
        for n, (_, name, size) in ranked.items():
            # an empty member is refused from the directory read here, never by opening the zip again for it
            task.episodes[n] = _Episode(
                n, task.rel, name, None if size else f"zip member {name!r} is empty (0 bytes): not an HDF5 episode"
            )
        for n, ep in refused.items():
            task.episodes.setdefault(n, ep)
        if not task.episodes:
            task.error = f"task zip {task.rel!r} holds no {task.task_name}/episode_N.hdf5 members"

    def _refuse_sentinel(self, root: Path, tasks: list[_Task], unit_id: str) -> None:
        """Raise the error of a task's placeholder unit (`<task_id>_unreadable`, `unmapped_<task_name>`): UnitAbsent
        for a task not downloaded, else UnitError with the episodes it stands for (`units`)."""
        held = [t for t in tasks if t.sentinel == unit_id]  # two task names may claim one task id
        counts = [self._episode_count(root, t) for t in held]
        units = sum(c for c in counts if c) if any(counts) else None  # the episodes this placeholder loses
        for task in held:
            if task.absent:
                raise UnitAbsent(task.error or "task not downloaded", file=task.rel)
            if task.error:
                raise self._lost(root, tasks, task, task.error, units)
            if task.task_id is None:
                raise UnitError(
                    f"task {task.task_name!r} has no task id: it is not in the AIST task table "
                    f"(configs/aist_tasks.csv), the root's {MANIFEST} nor the task_ids option"
                    + (f" ({units} episodes not read)" if units else ""),
                    file=task.rel,
                    units=units,
                )
            self._list_episodes(root, task)
            raise self._lost(root, tasks, task, task.error or f"task {task.task_id} is unreadable", units)

    def _lost(self, root: Path, tasks: list[_Task], task: _Task, why: str, units: int | None) -> UnitError:
        """The error of a task whose episodes cannot all be named (an unreadable, empty or cut-short zip, a folder
        that cannot be listed): counted as many episodes as the source's readable tasks hold (base.typical_units),
        less those its local headers name (each of those is a unit and a row of its own)."""
        if task.task_id is not None and (units is None or task.partial):
            typical = self._typical_count(root, tasks, task)
            if typical and typical > len(task.episodes):
                units = typical - len(task.episodes)
                why += f" (counted as {units} lost episodes: the median of this source's readable tasks" + (
                    f", less the {len(task.episodes)} its local headers name)" if task.episodes else ")"
                )
        return UnitError(why, file=task.rel, units=units)

    def _typical_count(self, root: Path, tasks: list[_Task], but: _Task) -> int | None:
        """The episodes a task whose episodes cannot all be listed is counted as: base.typical_units over the
        source's other tasks that list theirs."""
        counts = []
        for t in tasks:
            if t is but or t.absent or t.task_id is None or t.error:
                continue
            probe = _Task(t.task_name, t.kind, t.rel, task_id=t.task_id)
            try:
                self._list_episodes(root, probe)
            except (UnitError, OSError):
                continue
            if not probe.error:
                counts.append(len(probe.episodes))
        return typical_units(counts)

    def _episode_count(self, root: Path, task: _Task) -> int | None:
        """Episodes a task holds even when it cannot be used (no task id, a task id claimed twice), or None when
        they cannot be listed: the number of units its placeholder row stands for."""
        if task.absent:
            return None
        probe = _Task(task.task_name, task.kind, task.rel, task_id=task.task_id)
        if task.error and task.error.startswith("task folder") and "refused" in task.error:
            return None
        try:
            self._list_episodes(root, probe)
        except (UnitError, OSError):
            return None
        return len(probe.episodes) or None
