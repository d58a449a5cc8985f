"""The validator's checks of the files derived from the release rows (pipeline/publish/validate.py runs them): every export
made again from the rows and compared with the file on disk, no image reference that is a path out of the
reconstruction folder, metadata/provenance.json against the rows, and the validity report against the rows it audits.

A consistent edit (an answer changed in an export, an image path `../../../../etc/passwd`, a source added to
provenance.json, a baseline raised in the validity report, each with checksums.sha256 re-written to match) passed the
validator before: the derived files were checked only for their checksums and their columns."""

from __future__ import annotations

from typing import TYPE_CHECKING

import re
from pathlib import Path

import polars as pl

from pipeline.release import writers
from pipeline.core.io import strict_json

if TYPE_CHECKING:
    from pipeline.settings.root import Settings

_ID = re.compile(r"[0-9a-f]{64}")


def ref_problem(ref) -> str | None:
    """Why an image reference is not a plain path inside the reconstruction folder, or None."""
    if not isinstance(ref, str) or not ref:
        return "not a non-empty string"
    if ref.startswith(("/", "~")) or "\\" in ref or ":" in ref:
        return "an absolute path, a home folder, a drive or a URL"
    if any(part in ("", ".", "..") for part in ref.split("/")):
        return "a path with an empty, '.' or '..' part"
    if not ref.isprintable():
        return "holds control or invisible characters"
    return None


def _image_refs(rel: str, data: bytes):
    """(line, reference) of every image reference of an export text: the `images` lists of a jsonl's lines, the
    `image_path` column of a TSV (a path, or a Python list literal of paths)."""
    text = data.decode("utf-8", "replace")
    if rel.endswith(".jsonl"):
        for n, line in enumerate(text.split("\n"), 1):
            try:
                obj = strict_json(line) if line else None
            except ValueError:
                continue  # the export is compared with the rows' bytes as well: reported there
            for ref in (obj.get("images") or []) if isinstance(obj, dict) else []:
                yield n, ref
    elif rel.endswith(".tsv"):
        lines = text.split("\n")
        head = lines[0].split("\t") if lines else []
        if "image_path" not in head:
            return
        col = head.index("image_path")
        for n, line in enumerate(lines[1:], 2):
            cells = line.split("\t")
            if len(cells) > col and cells[col]:
                cell = cells[col]
                refs = re.findall(r"'((?:[^'\\]|\\.)*)'", cell) if cell.startswith("[") else [cell]
                yield from ((n, r) for r in refs)


def as_built(root: Path, cfg: Settings) -> dict:
    """`cfg` with build.sources as provenance.json records them: the card and Croissant list the sources built, and
    a release of some sources is validated with the configuration of all (`processbench validate` loads the
    default one)."""
    try:
        built = strict_json((root / writers.file_names(cfg)["provenance"]).read_text(encoding="utf-8"))
        built = built.get("sources_built") if isinstance(built, dict) else None
    except (OSError, ValueError):
        built = None
    if not (isinstance(built, list) and built and all(isinstance(b, str) and b in cfg.sources for b in built)):
        return cfg
    return cfg.with_values({"build.sources": built})


def export_problems(root: Path, cfg: Settings, skip=frozenset()) -> list[str]:
    """Every export made again from the release's rows (pipeline.exports, as the release step makes them) and
    compared with the file on disk; every image reference a plain relative path. A release without exports (none
    of their files there) has nothing to compare."""
    from pipeline.exports import Run, common, export_outputs
    from pipeline.release.rows import read_tables

    cfg = as_built(root, cfg)
    xf = common.export_files(cfg)
    if not any((root / xf[k]).exists() for k in ("card", "croissant", "llamafactory_info")):
        return []
    try:
        tables = read_tables(root, cfg, levels=True)
    except Exception:  # noqa: BLE001 - a missing or unreadable table is reported by the table checks
        return []
    out: list[str] = []
    seen: set[str] = set()

    def compare(rel: str, made) -> None:  # one export at a time: the texts are never all held (the release rule)
        seen.add(rel)
        path = root / rel
        if rel in skip:
            return
        if not path.is_file():
            out.append(f"{rel}: missing export (the rows give one)")
            return
        if isinstance(made, pl.DataFrame):
            try:
                same = pl.read_parquet(path).equals(made)
            except Exception as exc:  # noqa: BLE001 - any unreadable file is a problem to report
                out.append(f"{rel}: unreadable parquet ({type(exc).__name__})")
                return
        else:
            data = path.read_bytes()
            same = data == made.encode("utf-8")
            for n, ref in _image_refs(rel, data):
                if why := ref_problem(ref):
                    out.append(f"{rel}:{n}: image reference {str(ref)[:80]!r} is {why}")
                    break
        if not same:
            out.append(f"{rel}: differs from the export the release rows give")

    try:
        for _, made in export_outputs(Run(tables, common.parts(tables, cfg), root, cfg)):  # as the release writes them
            compare(made.rel, made.data)
    except Exception as exc:  # noqa: BLE001 - rows the exports cannot read: their defects are reported by the rows' checks
        return out + [f"exports: cannot be made again from the release rows ({type(exc).__name__}: {str(exc)[:120]})"]
    folder = root / cfg.exports.dir
    for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
        rel = path.relative_to(root).as_posix()
        if path.is_file() and not path.name.startswith(".") and rel not in seen:
            out.append(f"{rel}: not an export of these rows")
    return out


def provenance_problems(root: Path, cfg: Settings, tables: dict[str, pl.DataFrame], read_json) -> list[str]:
    """metadata/provenance.json against the rows: its versions are the rows', every source of the rows is built and
    named as in the rows, lists at least the units the rows use, and its origin says what its other fields say."""
    rel = writers.file_names(cfg)["provenance"]
    if not (root / rel).is_file():
        return []
    p = read_json(root / rel)
    if not isinstance(p, dict):
        return [f"{rel}: not a JSON object"] if p is not None else []
    out: list[str] = []
    rows = (
        pl.concat([df.select("source_slug", "source", "source_unit_id", "builder_version") for df in tables.values()])
        if tables
        else None
    )
    rc = cfg.release
    bare = set(p) == {"builder_version"}  # a release written without an ingest record (tests' factories)
    for key in ("builder_version",) if bare else ("builder_version", "release_version"):
        want = {getattr(rc, key)} | (
            set(rows["builder_version"].unique().to_list()) if key == "builder_version" and rows is not None else set()
        )
        if p.get(key) not in want or len(want) != 1:
            out.append(f"{rel}: {key} {p.get(key)!r}, the release's is {sorted(want)}")
    if bare:
        return out
    sources = p.get("sources") if isinstance(p.get("sources"), dict) else {}
    if sorted(p.get("sources_built") or []) != sorted(sources):
        out.append(f"{rel}: sources_built {p.get('sources_built')!r} is not the sources it describes")
    origins = set()
    for slug, s in sources.items():
        s = s if isinstance(s, dict) else {}
        origins.add(s.get("origin"))
        fp, samples = s.get("corpus_fingerprint"), s.get("samples")
        if s.get("origin") not in ("samples", "user", "unknown"):
            out.append(f"{rel}: source {slug} has origin {s.get('origin')!r}")
        elif s.get("origin") == "samples" and (
            fp is not None or not isinstance(samples, dict) or samples.get("scale") != p.get("scale")
        ):
            out.append(f"{rel}: source {slug} is from the sample generator but its record says otherwise")
        elif s.get("origin") == "user" and (samples is not None or not (isinstance(fp, str) and _ID.fullmatch(fp))):
            out.append(f"{rel}: source {slug} is a user corpus without its content fingerprint")
    if p.get("from_sample_data") != ("samples" in origins):
        out.append(f"{rel}: from_sample_data {p.get('from_sample_data')!r} disagrees with the sources' origins")
    if "warnings" in p and not (
        isinstance(p["warnings"], list)
        and p["warnings"]
        and all(isinstance(w, str) and w.isprintable() for w in p["warnings"])
    ):
        out.append(f"{rel}: warnings is not a non-empty list of one-line texts")
    if not (isinstance(p.get("config_sha256"), str) and _ID.fullmatch(p["config_sha256"])):
        out.append(f"{rel}: config_sha256 is not a sha256")
    out += _identity_problems(root, cfg, p, rel)
    if rows is not None:
        used = rows.group_by("source_slug").agg(pl.col("source").unique(), pl.col("source_unit_id").n_unique())
        for slug, names, n_units in used.sort("source_slug").iter_rows():
            s = sources.get(slug)
            if not isinstance(s, dict):
                out.append(f"{rel}: the rows use source {slug}, which it does not list as built")
                continue
            if names != [s.get("name")]:
                out.append(f"{rel}: source {slug} is named {s.get('name')!r}, the rows name it {names}")
            listed = s.get("units_listed")
            if not isinstance(listed, int) or listed < n_units:
                out.append(f"{rel}: source {slug} lists {listed!r} units, the rows use {n_units}")
    return out


def _identity_problems(root: Path, cfg: Settings, p: dict, rel: str) -> list[str]:
    """provenance.json's release identity: the fingerprint is the one the listed checksums give, over the files
    pipeline/release/identity.py leaves out; the uid derivation's version; the template variants of every family."""
    from pipeline.release import identity as ident

    out = []
    if p.get(ident.UID_VERSION_KEY) != ident.UID_VERSION:
        out.append(
            f"{rel}: {ident.UID_VERSION_KEY} {p.get(ident.UID_VERSION_KEY)!r}, this builder's is {ident.UID_VERSION}"
        )
    variants = p.get(ident.VARIANTS_KEY)
    if not (isinstance(variants, dict) and all(isinstance(v, str) for v in variants.values())):
        out.append(f"{rel}: {ident.VARIANTS_KEY} is not a map of task id -> template variant")
    fp, excluded = p.get(ident.FINGERPRINT_KEY), ident.excluded_files(cfg)
    if not (isinstance(fp, str) and _ID.fullmatch(fp)):
        return out + [
            f"{rel}: no {ident.FINGERPRINT_KEY} (a release of an older format, or a build that did not finish)"
        ]
    if p.get(ident.EXCLUDES_KEY) != excluded:
        out.append(f"{rel}: {ident.EXCLUDES_KEY} is not {excluded}")
    try:
        lines = (root / writers.file_names(cfg)["checksums"]).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return out  # reported by the checksum check
    sums = dict(reversed(line.split("  ", 1)) for line in lines if "  " in line)
    if ident.fingerprint_of(sums, excluded) != fp:
        out.append(f"{rel}: {ident.FINGERPRINT_KEY} is not the sha256 of the checksum lines of the files it covers")
    return out


def _cheap_cells(eval_rows: list[dict], sft_rows: list[dict]) -> dict[tuple, dict]:
    """(source, family, level) -> the baselines of validity.baselines.cell_baselines that need no model fit (every
    one but bag_of_words: a fit per cell, ~45 s of a demo release's audit), from the rows as the audit groups them."""
    from pipeline.validity import _cells
    from pipeline.validity import baselines as b

    ev = _cells(eval_rows)
    sf: dict[tuple, list[dict]] = {}
    for r in sft_rows:
        sf.setdefault((r["source_slug"], r["task_id"]), []).append(r)
    keys = set(ev) | {(s, t, None) for s, t in sf if not any(c[:2] == (s, t) for c in ev)}
    out = {}
    for key in keys:
        e, s = [eval_rows[i] for i in ev.get(key, [])], sf.get(key[:2], [])
        out[key] = {
            "eval_n": len(e),
            "sft_n": len(s),
            "random": b.random_acc(e),
            "label_prior": b.label_prior_acc(s, e),
            "eval_label_share": b.eval_label_share(e),
            "majority_letter": b.majority_letter_acc(s, e),
            "memoriser": b.memoriser_acc(s, e),
            "option_only": b.option_only_acc(s, e),
        }
    return out


def validity_problems(root: Path, cfg: Settings, tables: dict[str, pl.DataFrame], read_json) -> list[str]:
    """metadata/validity_report.json against the rows it audits: per cell, every baseline the rows give without a
    model fit (_cheap_cells; `blind` is max(memoriser, bag_of_words)), the cells those rows hold and no other; its
    problems and warnings against its cells (an edited metadata or bag-of-words baseline that changes them is caught);
    validity_report.md is the rendering of the json. (Images and clocks are the work folder's, not the release's.)"""
    from pipeline.validity import REPORT_FILES, problems, warnings
    from pipeline.validity.report import render_markdown

    jrel, mrel = (f"metadata/{f}" for f in REPORT_FILES)
    if not (root / jrel).is_file() or "eval" not in tables or "sft" not in tables:
        return []
    rep = read_json(root / jrel)
    if not isinstance(rep, dict) or not isinstance(rep.get("cells"), list):
        return [f"{jrel}: not a validity report"] if rep is not None else []
    out = []
    if (root / mrel).is_file() and (root / mrel).read_bytes() != render_markdown(rep).encode("utf-8"):
        out.append(f"{mrel}: is not the rendering of {jrel}")
    from pipeline.release.identity import FINGERPRINT_KEY, stated_fingerprint

    stated = stated_fingerprint(root, cfg)
    if stated is not None and rep.get(FINGERPRINT_KEY) != stated:
        out.append(f"{jrel}: {FINGERPRINT_KEY} {rep.get(FINGERPRINT_KEY)!r} is not the release's ({stated})")
    vcfg = cfg.validity
    try:
        again = _cheap_cells(tables["eval"].to_dicts(), tables["sft"].to_dicts())
    except Exception as exc:  # noqa: BLE001 - rows the audit cannot read are reported by the table checks
        return out + [f"{jrel}: the audit cannot be made again from the rows ({type(exc).__name__})"]
    have = {(c.get("source"), c.get("family"), c.get("level")): c for c in rep["cells"] if isinstance(c, dict)}
    for key in sorted(set(again) | set(have), key=lambda k: tuple(str(x) for x in k)):
        where = "/".join(str(k) for k in key if k)
        got, want = have.get(key), again.get(key)
        if got is None or want is None:
            out.append(
                f"{jrel}: cell {where} " + ("missing, the rows hold it" if got is None else "is not one the rows hold")
            )
            continue
        diff = sorted(k for k, v in want.items() if got.get(k) != v)
        blind = [v for v in (got.get("memoriser"), got.get("bag_of_words")) if v is not None]
        if got.get("blind") != (max(blind) if blind else None):
            diff.append("blind")
        if diff:
            out.append(f"{jrel}: cell {where} differs from its rows in {diff[:5]}")
    for name, fn in (("problems", problems), ("warnings", warnings)):
        try:
            want = fn(rep, vcfg)
        except (KeyError, TypeError, ValueError) as exc:
            out.append(f"{jrel}: cells unreadable ({type(exc).__name__})")
            break
        if rep.get(name) != want:
            out.append(f"{jrel}: {name} are not what its cells give")
    return out
