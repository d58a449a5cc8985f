"""What identifies an item and a release: `item_uid` and the release fingerprint, and the one reader of both.

    item_uid(doc)                          -> 32 hex: sha256 of the item's identity document (below), cut
    mcq_uid(row, variant)                  -> the uid of a multiple-choice release row (release columns)
    step_uid(row, variant)                 -> the uid of a T13 step-track row (step columns)
    fingerprint_of(sums, excluded)         -> 64 hex: sha256 of the checksum lines of the covered files
    stamp_release(release_dir, cfg)        -> the fingerprint, written into provenance.json and the card (with the
                                              validity report's, the release step's last act before checksums.sha256)
    read_identity(release_dir[, cfg])      -> ReleaseIdentity(fingerprint, items: item_id -> item_uid, ...)
    release_fingerprint(release_dir[, cfg])-> the fingerprint alone (no item file read)

Item identity (docs/release-format.md "Item and release identity"). `item_uid` is derived from what the item is, never
from where it lies: for a multiple-choice item the family (task_id) and its template variant, the path-free keys of
the frames it shows (reconstruction_key_json: source slug, source task, unit type and id, camera, frame indices in
display order), the labels drawn on them (display_labels_json), the question, the option texts in order and the answer
letter; for a T13 step item the family and variant, the goal (question), and per step its sentence, the path-free key
of its frames, its label (1 / 0 / -1) and its error kind. Not in it: item_id (a position), the split, eval level and
split group (an item moved from SFT to eval keeps its uid: `processbench diff` reports the move), image hashes and
render specs (how the images are drawn and encoded: the eval runner compares those itself), the prompt protocol, the
licence and the versions. The identity document is compact sorted JSON with `"v": UID_VERSION`, so a change of this
derivation changes every uid rather than matching two different derivations.

The uid is in the model-facing files (next to item_id: every answer and verdict a user keeps carries it), never in a
prompt. It cannot give the answer away: it is a one-way digest over fields no model-facing file shows (the unit, the
camera, the frame indices), so a guess at the answer cannot be checked against it without those.

Release identity. The fingerprint is the sha256 of the lines of checksums.sha256 (`<sha256>  <path>\\n`, sorted by
path) of every release file except the files that state it or are rewritten after the build: checksums.sha256 itself,
metadata/provenance.json, the dataset card README.md, metadata/validity_report.{json,md} (`processbench validity`
rewrites the report of a published release). So it is reproducible with coreutils:

    grep -v -E '  (checksums.sha256|metadata/provenance.json|README.md|metadata/validity_report.(json|md))$' \\
        checksums.sha256 | sha256sum

(`provenance.json` `release_fingerprint_excludes` lists the excluded files.) Two releases with the same fingerprint
hold the same bytes in every covered file.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from pipeline.core import io
from pipeline.core.errors import ProjectError
from pipeline.release.files import (
    VALIDITY_REPORT_FILES,
    file_names,
    not_a_release,
    release_files_on_disk,
    sha256_file,
)

if TYPE_CHECKING:
    from pipeline.settings.root import Settings

UID_VERSION = 1  # of the identity document: provenance.json `item_uid_version`
UID_HEX = 32  # 128 bits: no two items of any number of releases share one by chance
FINGERPRINT_KEY = "release_fingerprint"
EXCLUDES_KEY = "release_fingerprint_excludes"
UID_VERSION_KEY = "item_uid_version"
VARIANTS_KEY = "template_variants"
TRACKS = ("mcq", "steps")


class ReleaseIdentityError(ValueError, ProjectError):
    """A folder whose identity cannot be read: not a release, a release of an older format, a damaged file (one
    line: which folder or file, and why)."""


# ------------------------------------------------------------------------------------------------ item identity


def item_uid(doc: dict) -> str:
    """The uid of an item whose identity document is `doc` (module docstring)."""
    text = io.compact_json({"v": UID_VERSION, **doc})
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:UID_HEX]


def mcq_doc(row: dict, variant: str) -> dict:
    """The identity document of a multiple-choice release row (its release columns)."""
    from pipeline.release.schema import CHOICE_LETTERS

    n = int(row["num_choices"])
    labels = row.get("display_labels_json")
    return {
        "track": "mcq",
        "family": row["task_id"],
        "variant": variant,
        "frames": json.loads(row["reconstruction_key_json"]),
        "display_labels": json.loads(labels) if labels else None,
        "question": row["question"],
        "options": [row[f"choice_{c}"] for c in CHOICE_LETTERS[:n]],
        "answer": row["answer"],
    }


def mcq_uid(row: dict, variant: str) -> str:
    return item_uid(mcq_doc(row, variant))


# release columns mcq_doc reads (the release rows compute the uid from exactly these)
MCQ_UID_COLUMNS = (
    "task_id",
    "reconstruction_key_json",
    "display_labels_json",
    "question",
    "num_choices",
    "answer",
)


def step_doc(row: dict, variant: str) -> dict:
    """The identity document of a T13 step row (pipeline/steps/rows.py STEP_SCHEMA columns)."""
    response = row["response"]
    keys = json.loads(row["step_reconstruction_keys_json"])
    kinds = json.loads(row["step_error_kinds_json"])
    return {
        "track": "steps",
        "family": row["task_id"],
        "variant": variant,
        "question": row["question"],
        "steps": [
            {"text": text, "frames": key, "label": int(label), "error": kind}
            for text, key, label, kind in zip(response["steps"], keys, response["process_correctness"], kinds)
        ],
    }


def step_uid(row: dict, variant: str) -> str:
    return item_uid(step_doc(row, variant))


def template_variants(cfg: Settings) -> dict[str, str]:
    """{task_id: variant} of every template of the configuration (multiple choice and step track)."""
    out = {t: tpl.variant for t, tpl in cfg.tasks.items()}
    out.update({t: tpl.variant for t, tpl in (cfg.step_tasks or {}).items()})
    return dict(sorted(out.items()))


# ------------------------------------------------------------------------------------------------ release identity


def excluded_files(cfg: Settings) -> list[str]:
    """The release files the fingerprint does not cover (module docstring), sorted."""
    files = file_names(cfg)
    return sorted(
        {
            files["checksums"],
            files["provenance"],
            cfg.exports.files.card,
            *(f"metadata/{name}" for name in VALIDITY_REPORT_FILES),
        }
    )


def fingerprint_of(sums: dict[str, str], excluded) -> str:
    """sha256 of the checksum lines (`<sha256>  <path>\\n`, sorted by path) of the files of `sums` not `excluded`."""
    skip = set(excluded)
    text = "".join(f"{sums[rel]}  {rel}\n" for rel in sorted(sums) if rel not in skip)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def fingerprint_line(fingerprint: str | None) -> str:
    """The card's line that states the fingerprint (a placeholder until the release step has computed it)."""
    if fingerprint is None:
        return "Release fingerprint: (stated once the build has written every file it covers)"
    return f"Release fingerprint: `{fingerprint}`"


def built_variants(release_dir: Path, cfg: Settings) -> dict[str, str]:
    """{task_id: variant} the release was built with (provenance.json `template_variants`; the configuration's when
    the provenance names none): what its uids were derived with."""
    try:
        prov = json.loads((Path(release_dir) / file_names(cfg)["provenance"]).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        prov = None
    found = prov.get(VARIANTS_KEY) if isinstance(prov, dict) else None
    if isinstance(found, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in found.items()):
        return found
    return template_variants(cfg)


def uid_problems(
    mcq: pl.DataFrame | None, steps: list[tuple[str, pl.DataFrame]], variants: dict[str, str]
) -> list[str]:
    """Rows whose item_uid is not the uid of what they hold (an item edited without its uid, a uid copied from
    another row), and uids given to two rows: `mcq` every multiple-choice row (all files), `steps` (file, rows) of
    every step file. One line per kind of defect and file, with examples."""
    from pipeline.release.schema import CHOICE_COLUMNS

    out, seen = [], {}
    tables = (
        [("multiple-choice files", mcq, mcq_uid, (*MCQ_UID_COLUMNS, *CHOICE_COLUMNS))] if mcq is not None else []
    ) + [
        (
            rel,
            df,
            step_uid,
            ("task_id", "question", "response", "step_reconstruction_keys_json", "step_error_kinds_json"),
        )
        for rel, df in steps
    ]
    for where, df, uid_of, cols in tables:
        if "item_uid" not in df.columns:
            out.append(f"{where}: no item_uid column")
            continue
        wrong = []
        for r, uid, iid in zip(df.select(cols).iter_rows(named=True), df["item_uid"], df["item_id"]):
            variant = variants.get(r["task_id"])
            if variant is None or uid != uid_of(r, variant):
                wrong.append(iid)
            if uid in seen:
                out.append(f"{where}: item_uid {uid} of {iid} is also the uid of {seen[uid]}")
            seen[uid] = iid
        if wrong:
            out.append(
                f"{where}: item_uid is not the identity of the row's family, variant, frames, question, options and "
                f"answer / steps ({len(wrong)} rows, e.g. {wrong[:3]})"
            )
    return out[:20]


def stated_fingerprint(release_dir: Path, cfg: Settings) -> str | None:
    """The fingerprint provenance.json states, unchecked (None when it states none): what the card and the validity
    report repeat. Readers of a release use `release_fingerprint` / `read_identity`, which check it."""
    try:
        prov = json.loads((Path(release_dir) / file_names(cfg)["provenance"]).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    fp = prov.get(FINGERPRINT_KEY) if isinstance(prov, dict) else None
    return fp if isinstance(fp, str) else None


def stamp_release(release_dir: Path, cfg: Settings) -> tuple[str, dict[str, str]]:
    """Compute the fingerprint of a release folder whose covered files are final, and state it in
    metadata/provenance.json (with the item_uid version and the template variants the uids were derived with) and the
    card (its placeholder line) when it is there; the validity report is the release step's to state it in
    (pipeline/validity state_fingerprint). Returns
    (fingerprint, {release-relative file: sha256} of the covered files), which the caller's checksums.sha256 reuses."""
    root = Path(release_dir)
    excluded = excluded_files(cfg)
    sums = {rel: sha256_file(root / rel) for rel in release_files_on_disk(root, cfg) if rel not in excluded}
    fp = fingerprint_of(sums, excluded)
    files = file_names(cfg)
    prov_path = root / files["provenance"]
    prov = json.loads(prov_path.read_text(encoding="utf-8"))
    prov.update(
        {
            FINGERPRINT_KEY: fp,
            EXCLUDES_KEY: excluded,
            UID_VERSION_KEY: UID_VERSION,
            VARIANTS_KEY: template_variants(cfg),
        }
    )
    io.atomic_write_text(prov_path, io.dumps_json(prov))
    card = root / cfg.exports.files.card
    if card.is_file():
        text = card.read_text(encoding="utf-8")
        if text.count(fingerprint_line(None)) != 1:
            raise ValueError(f"{cfg.exports.files.card}: no single fingerprint placeholder line to state it on")
        io.atomic_write_text(card, text.replace(fingerprint_line(None), fingerprint_line(fp)))
    return fp, sums


# ------------------------------------------------------------------------------------------------ the reader


@dataclass(frozen=True)
class ReleaseIdentity:
    """A release folder's identity: its fingerprint, its provenance, and one row per item (`items`: item_id,
    item_uid, track (mcq / steps), split, eval_level, source_slug, task_id, file)."""

    root: Path
    fingerprint: str
    provenance: dict
    items: pl.DataFrame

    def uids(self) -> dict[str, str]:
        """item_id -> item_uid of every item (both tracks)."""
        return dict(zip(self.items["item_id"].to_list(), self.items["item_uid"].to_list()))


ITEM_COLUMNS = ("item_id", "item_uid", "split", "eval_level", "source_slug", "task_id")
IDENTITY_SCHEMA = {
    "item_id": pl.String,
    "item_uid": pl.String,
    "track": pl.String,
    "split": pl.String,
    "eval_level": pl.String,
    "source_slug": pl.String,
    "task_id": pl.String,
    "file": pl.String,
}
_OLDER = "a release of an older format ({what}): rebuild it with this builder (processbench build)"


def _fail(msg: str):
    raise ReleaseIdentityError(msg)


def _checksums(root: Path, rel: str) -> dict[str, str]:
    try:
        text = (root / rel).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        _fail(f"{root / rel}: unreadable ({type(exc).__name__})")
    sums = {}
    for n, line in enumerate(text.splitlines(), 1):
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest) or not name:
            _fail(f"{root / rel}:{n}: not a sha256sum line (a truncated or edited checksum file)")
        sums[name] = digest
    return sums


def _provenance(root: Path, cfg: Settings, sums: dict[str, str]) -> tuple[dict, str]:
    rel = file_names(cfg)["provenance"]
    try:
        prov = io.strict_json((root / rel).read_text(encoding="utf-8"))
    except FileNotFoundError:
        _fail(f"{root}: {_OLDER.format(what=f'no {rel}')}")
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        _fail(f"{root / rel}: unreadable ({type(exc).__name__}: truncated or edited)")
    if not isinstance(prov, dict):
        _fail(f"{root / rel}: not a JSON object")
    fp = prov.get(FINGERPRINT_KEY)
    if fp is None:
        _fail(f"{root}: {_OLDER.format(what=f'no {FINGERPRINT_KEY} in {rel}')}")
    if prov.get(UID_VERSION_KEY) != UID_VERSION:
        _fail(
            f"{root}: {_OLDER.format(what=f'item_uid version {prov.get(UID_VERSION_KEY)!r}, this builder reads {UID_VERSION}')}"
        )
    excludes = prov.get(EXCLUDES_KEY)
    if not (isinstance(excludes, list) and all(isinstance(x, str) for x in excludes)):
        _fail(f"{root / rel}: {EXCLUDES_KEY} is not a list of files")
    if fingerprint_of(sums, excludes) != fp:
        _fail(
            f"{root}: the {FINGERPRINT_KEY} of {rel} is not the one {file_names(cfg)['checksums']} gives (a file "
            "edited after the build, or a file of another release): run processbench validate on it"
        )
    return prov, fp


def item_files(root: Path, cfg: Settings) -> list[tuple[str, str]]:
    """(track, release-relative parquet) of every item file of a release: each eval level, SFT, the step files."""
    from pipeline.release.files import eval_level_files, step_files

    try:
        mcq = [*eval_level_files(root, cfg).values(), file_names(cfg)["sft_parquet"]]
    except (OSError, UnicodeDecodeError, ValueError, AttributeError) as exc:
        _fail(f"{root / file_names(cfg)['split_summary']}: unreadable ({type(exc).__name__}: truncated or edited)")
    return [("mcq", rel) for rel in mcq] + [("steps", pq) for pq, _ in step_files(cfg, root).values()]


def _items(root: Path, cfg: Settings, sums: dict[str, str]) -> pl.DataFrame:
    parts = []
    for track, rel in item_files(root, cfg):
        path = root / rel
        if rel not in sums:
            _fail(f"{path}: not listed in {file_names(cfg)['checksums']}")
        if not path.is_file():
            _fail(f"{path}: missing (the release lists it in {file_names(cfg)['checksums']})")
        if sha256_file(path) != sums[rel]:
            _fail(f"{path}: other bytes than its checksum (truncated, edited or another release's file)")
        try:
            schema = pl.read_parquet_schema(path)
            if "item_uid" not in schema:
                _fail(f"{root}: {_OLDER.format(what=f'no item_uid column in {rel}')}")
            df = pl.read_parquet(path, columns=list(ITEM_COLUMNS))
        except ReleaseIdentityError:
            raise
        except Exception as exc:  # noqa: BLE001 - any unreadable parquet is one line naming it
            _fail(f"{path}: unreadable parquet ({type(exc).__name__})")
        parts.append(df.with_columns(track=pl.lit(track), file=pl.lit(rel)).select(list(IDENTITY_SCHEMA)))
    items = (
        pl.concat(parts, how="vertical_relaxed").cast(IDENTITY_SCHEMA)
        if parts
        else pl.DataFrame(schema=IDENTITY_SCHEMA)
    )
    dup = items.filter(pl.col("item_uid").is_duplicated())
    if dup.height:
        _fail(f"{root}: item_uid {dup['item_uid'][0]} is given to {dup.height} rows (an edited release)")
    return items


def _open(release_dir: Path, cfg: Settings | None) -> tuple[Path, Settings, dict[str, str]]:
    if cfg is None:
        from pipeline.settings.config import load_settings

        cfg = load_settings()
    root = Path(release_dir)
    if not root.is_dir():
        _fail(f"{root.absolute()} is not a folder: give a release folder (release/ by default)")
    if problem := not_a_release(root, file_names(cfg)):
        _fail(problem)
    rel = file_names(cfg)["checksums"]
    if not (root / rel).is_file():
        _fail(f"{root.absolute()}: no {rel} (a release whose build did not finish, or not a release)")
    return root, cfg, _checksums(root, rel)


def release_fingerprint(release_dir: Path, cfg: Settings | None = None) -> str:
    """The release's fingerprint as its provenance.json states it, checked against its checksums.sha256 (no item
    file read). ReleaseIdentityError (one line) for a folder that is not a release, an older format, a damaged file."""
    root, cfg, sums = _open(release_dir, cfg)
    return _provenance(root, cfg, sums)[1]


def read_identity(release_dir: Path, cfg: Settings | None = None) -> ReleaseIdentity:
    """The release's fingerprint and every item's uid (both tracks, every eval level and SFT), each item file checked
    against its checksum first. ReleaseIdentityError (one line) for a folder that is not a release, a release of an
    older format (no fingerprint or no item_uid), a truncated or replaced file."""
    root, cfg, sums = _open(release_dir, cfg)
    prov, fp = _provenance(root, cfg, sums)
    return ReleaseIdentity(root, fp, prov, _items(root, cfg, sums))
