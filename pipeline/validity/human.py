"""The human check's verdicts (pipeline/review.py pages) merged into the validity report.

    files = load_verdicts([Path("verdicts_gm100_T5_ann1.json"), ...])  # ValueError: "<file>: <reason>", one line
    keys = release_keys(release, cfg)                     # item_uid -> what the verdicts are judged against
    merged = match_verdicts(files, keys, fingerprint, drop_unknown=False)   # ValueError per file naming the refused
    human = human_report(merged, keys, vcfg.human)        # the report's `human` section

Verdicts are matched to the release's items by `item_uid` (docs/release-format.md "Item and release identity"): an
item that did not change between two builds keeps its uid, so its verdicts hold in the new build; a verdict whose uid
is not an item of this release is refused, counted per file, and nothing is merged unless the caller drops them
(`processbench validity --human FILE ... --drop-unknown`). A file made for another release (its
`release_fingerprint`) is reported as such with what it carried over.

Multiple-choice pages, per (source, family): judgments, items, annotators, human accuracy against the key ("cannot
tell" counts as not correct, and its share is reported), chance (1 / num_choices), a Wilson interval over the
judgments, and whether humans clear chance (`decidable`: the interval's lower bound above chance, given at least
`min_judgments`); a cell below that is listed in `not_decidable`. Agreement between annotators: over the items two
annotators both judged, the share of equal verdicts ("cannot tell" is a verdict) and Cohen's kappa, averaged over the
pairs.

Step pages (T13), per class of step label (correct; wrong, of natural and of injected kinds and of each kind;
neutral), over all sources and per source: the shares of the verdicts right / wrong / unsure, the agreement with the
label (the share of the verdict the label implies: right for a correct step, wrong for a wrong one, "unsure" counts
as not agreeing; a neutral step is never scored and implies no verdict, so its row gives the shares only) with a
Wilson interval, and the agreement between annotators on the steps two of them judged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal, Optional

import math
from collections import defaultdict
from itertools import combinations
from pathlib import Path

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from ..review import STEP_VERDICTS, TRACKS, VERDICTS_FORMAT, VERDICTS_VERSION
from pipeline.core.io import strict_json
from pipeline.release.schema import CHOICE_LETTERS

if TYPE_CHECKING:
    from pipeline.settings.models import ValidityHuman
    from pipeline.settings.root import Settings


def _not_blank(v: str) -> str:
    if not v.strip():
        raise ValueError("empty (a name is required)")
    return v


Name = Annotated[str, StringConstraints(strict=True), AfterValidator(_not_blank)]  # more than blanks


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    item_uid: Name
    item_id: Optional[str] = None  # the release's positional id, for a reader; never matched on


class ChoiceVerdict(_Row):
    answer: Optional[Literal[tuple(CHOICE_LETTERS)]] = Field(...)  # type: ignore[valid-type]
    cannot_tell: StrictBool

    @model_validator(mode="after")
    def _one_of_two(self):
        if (self.answer is None) != self.cannot_tell:
            raise ValueError("a verdict is either a letter (cannot_tell false) or cannot_tell true with answer null")
        return self


class StepVerdict(_Row):
    step: StrictInt = Field(ge=0)
    verdict: Literal[STEP_VERDICTS]  # type: ignore[valid-type]


class VerdictFile(BaseModel):
    """A page's export (pipeline/review.py): who judged which items of which release."""

    model_config = ConfigDict(frozen=True)
    format: Literal[VERDICTS_FORMAT]  # type: ignore[valid-type]
    version: Literal[VERDICTS_VERSION]  # type: ignore[valid-type]
    release: Optional[str] = None  # the release version, for a reader
    release_fingerprint: Name
    track: Literal[TRACKS]  # type: ignore[valid-type]
    source: Name
    family: Name
    annotator: Name
    verdicts: list  # ChoiceVerdict | StepVerdict rows, by track (checked after the header)
    name: str = ""  # the file's name (set by load_verdicts; never read from the file)


_ROWS = {"mcq": TypeAdapter(list[ChoiceVerdict]), "steps": TypeAdapter(list[StepVerdict])}


def _first_error(exc: ValidationError, prefix: str = "") -> str:
    e = exc.errors()[0]
    where = ".".join(str(p) for p in (prefix, *e["loc"]) if p != "")
    got = e.get("input")
    shown = "" if isinstance(got, (dict, list)) else f" (got {got!r:.60})"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where or 'file'}: {e['msg'].removeprefix('Value error, ')}{shown}{more}"


def read_verdict_file(path: Path) -> VerdictFile:
    """One verdict file, checked whole; ValueError '<path>: <reason>' (one line) when it is not one."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"{path}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a readable JSON verdicts file (not UTF-8 text)") from None
    try:
        data = strict_json(text)
    except ValueError as exc:
        raise ValueError(f"{path}: not a readable JSON verdicts file ({' '.join(str(exc).split())})") from None
    if not isinstance(data, dict) or data.get("format") != VERDICTS_FORMAT:
        what = (
            f"a JSON {type(data).__name__}"
            if not isinstance(data, dict)
            else ("no format field" if "format" not in data else f"format {data['format']!r:.60}")
        )
        raise ValueError(f"{path}: not a {VERDICTS_FORMAT} file ({what})")
    if data.get("version") != VERDICTS_VERSION:
        raise ValueError(
            f"{path}: verdicts version {data.get('version')!r:.20}, expected {VERDICTS_VERSION}"
            + (" (made by a page without item uids: its items cannot be matched)" if data.get("version") == 1 else "")
        )
    try:
        head = VerdictFile.model_validate({**data, "name": path.name})
    except ValidationError as exc:
        raise ValueError(f"{path}: {_first_error(exc)}") from None
    try:
        rows = _ROWS[head.track].validate_python(head.verdicts)
    except ValidationError as exc:
        raise ValueError(f"{path}: {_first_error(exc, 'verdicts')}") from None
    return head.model_copy(update={"annotator": head.annotator.strip(), "verdicts": rows})


def load_verdicts(files: list[Path]) -> list[VerdictFile]:
    """Every file read and checked before any is used: the first bad one raises (ValueError naming it)."""
    out = [read_verdict_file(Path(f)) for f in files]
    names = [f.name for f in out]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"{twice[0]}: given twice (two verdict files of one name: rename one)")
    return out


# ------------------------------------------------------------------------------------------------ the release's keys


def release_keys(release: Path, cfg: Settings) -> dict[str, dict]:
    """What the verdicts are judged against, by item uid: {"mcq": uid -> (source, family, answer letter,
    num_choices), "steps": uid -> (source, labels, error kinds)} over every eval file of the release."""
    import json

    import polars as pl

    from pipeline.release.files import eval_level_files
    from ..steps.tables import read_step_tables

    choices = {}
    for rel in eval_level_files(Path(release), cfg).values():
        p = Path(release) / rel
        if p.exists():
            cols = ["item_uid", "source_slug", "task_id", "answer", "num_choices"]
            for r in pl.read_parquet(p, columns=cols).iter_rows():
                choices[r[0]] = (r[1], r[2], r[3], int(r[4]))
    steps = {}
    tables = read_step_tables(
        Path(release), cfg, columns=["item_uid", "source_slug", "response", "step_error_kinds_json"]
    )
    if tables is not None:
        for r in tables["eval"].iter_rows(named=True):
            labels = [int(v) for v in r["response"]["process_correctness"]]
            steps[r["item_uid"]] = (r["source_slug"], labels, json.loads(r["step_error_kinds_json"]))
    return {"mcq": choices, "steps": steps}


# ------------------------------------------------------------------------------------------------ matching by uid


def short(fingerprint: str) -> str:
    """A fingerprint as a line shows it: its first 12 hex digits (the report's JSON keeps it whole)."""
    return fingerprint[:12] + "…" if len(fingerprint) > 12 else fingerprint


def verdict_problem(v: ChoiceVerdict | StepVerdict, size: int) -> str | None:
    """Why a verdict cannot be one on its item, an item of `size` options (multiple choice) or steps (None: it can)."""
    if isinstance(v, StepVerdict):
        return None if v.step < size else f"step {v.step} of item {v.item_uid}, which has {size} steps"
    if v.answer is not None and v.answer not in CHOICE_LETTERS[:size]:
        return f"answer {v.answer} to item {v.item_uid}, which has {size} options"
    return None


def _size(track: str, entry: tuple) -> int:
    return entry[3] if track == "mcq" else len(entry[1])


def match_verdicts(files: list[VerdictFile], keys: dict, fingerprint: str, drop_unknown: bool = False) -> dict:
    """Verdict rows of `files` whose item uid is an item of this release (of the file's track), the same annotator's
    later file winning for an item (a step) judged twice, and one record per file: {file, annotator, track, source,
    family, release_fingerprint, this_release, verdicts, merged, refused}. A verdict on an item not in this release
    raises ValueError (one line per such file: its name and count) unless `drop_unknown`; then it is counted in
    `refused` and left out."""
    rows: dict[tuple, dict] = {}
    records, refusals = [], []
    for f in files:
        known = keys[f.track]
        unknown = [v for v in f.verdicts if v.item_uid not in known]
        for v in f.verdicts:
            if v.item_uid in known and (why := verdict_problem(v, _size(f.track, known[v.item_uid]))):
                raise ValueError(f"{f.name}: {why}")
        other = f.release_fingerprint != fingerprint
        if unknown:
            refusals.append(
                f"{f.name}: {len(unknown)} of {len(f.verdicts)} verdicts name items not in this release"
                + (f"; made for release {short(f.release_fingerprint)}, this is {short(fingerprint)}" if other else "")
            )
        for v in f.verdicts:
            if v.item_uid in known:
                if f.track == "mcq":
                    rows[("mcq", f.annotator, v.item_uid)] = {
                        "annotator": f.annotator,
                        "item_uid": v.item_uid,
                        "answer": v.answer,
                        "cannot_tell": v.cannot_tell,
                    }
                else:
                    rows[("steps", f.annotator, v.item_uid, v.step)] = {
                        "annotator": f.annotator,
                        "item_uid": v.item_uid,
                        "step": v.step,
                        "verdict": v.verdict,
                    }
        records.append(
            {
                "file": f.name,
                "annotator": f.annotator,
                "track": f.track,
                "source": f.source,
                "family": f.family,
                "release_fingerprint": f.release_fingerprint,
                "this_release": not other,
                "verdicts": len(f.verdicts),
                "merged": len(f.verdicts) - len(unknown),
                "refused": len(unknown),
            }
        )
    if refusals and not drop_unknown:
        raise ValueError(
            "\n".join(refusals) + "\nnothing merged: these verdicts judged other items (of another build); "
            "--drop-unknown merges the rest and counts them"
        )
    return {
        "mcq": [rows[k] for k in sorted(rows) if k[0] == "mcq"],
        "steps": [rows[k] for k in sorted(rows) if k[0] == "steps"],
        "files": sorted(records, key=lambda r: r["file"]),
    }


# ------------------------------------------------------------------------------------------------ figures


def wilson(k: int, n: int, z: float) -> tuple[float, float]:
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, c - h), min(1.0, c + h))


def _kappa(a: list[str], b: list[str]) -> float | None:
    n = len(a)
    po = sum(x == y for x, y in zip(a, b)) / n
    cats = set(a) | set(b)
    pe = sum((a.count(c) / n) * (b.count(c) / n) for c in cats)
    return None if pe >= 1 else (po - pe) / (1 - pe)


def _agreement(judged: dict[str, dict]) -> dict:
    """judged: annotator -> unit judged (an item, a step) -> verdict. Mean pairwise agreement and Cohen's kappa over
    the units two annotators share."""
    pairs = []
    for x, y in combinations(sorted(judged), 2):
        shared = sorted(set(judged[x]) & set(judged[y]))
        if shared:
            a, b = [judged[x][i] for i in shared], [judged[y][i] for i in shared]
            pairs.append((len(shared), sum(p == q for p, q in zip(a, b)) / len(shared), _kappa(a, b)))
    if not pairs:
        return {"pairs": 0, "shared_items": 0, "agreement": None, "kappa": None}
    kap = [p[2] for p in pairs if p[2] is not None]
    return {
        "pairs": len(pairs),
        "shared_items": sum(p[0] for p in pairs),
        "agreement": round(sum(p[1] for p in pairs) / len(pairs), 4),
        "kappa": round(sum(kap) / len(kap), 4) if kap else None,
    }


def _family_order(c: tuple[str, str]) -> tuple:
    return (c[0], int(c[1][1:]) if c[1][1:].isdigit() else 999, c[1])


def choice_cells(verdicts: list[dict], key: dict[str, tuple], hcfg: ValidityHuman) -> list[dict]:
    """Per (source, family) of the multiple-choice items judged. key: item_uid -> (source, family, answer letter,
    num_choices); every verdict's uid is in it (match_verdicts)."""
    z = _z(float(hcfg.ci))
    min_n = int(hcfg.min_judgments)
    cells: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for v in verdicts:
        src, fam, _, _ = key[v["item_uid"]]
        cells[(src, fam)].append(v)
    out = []
    for src, fam in sorted(cells, key=_family_order):
        vs = cells[(src, fam)]
        correct = sum(v["answer"] == key[v["item_uid"]][2] for v in vs)
        chance = sum(1 / int(key[v["item_uid"]][3]) for v in vs) / len(vs)
        lo, hi = wilson(correct, len(vs), z)
        judged: dict[str, dict[str, str]] = defaultdict(dict)
        for v in vs:
            judged[v["annotator"]][v["item_uid"]] = "?" if v["cannot_tell"] else v["answer"]
        out.append(
            {
                "source": src,
                "family": fam,
                "judgments": len(vs),
                "items": len({v["item_uid"] for v in vs}),
                "annotators": sorted(judged),
                "accuracy": round(correct / len(vs), 4),
                "cannot_tell": round(sum(v["cannot_tell"] for v in vs) / len(vs), 4),
                "chance": round(chance, 4),
                "ci": [round(lo, 4), round(hi, 4)],
                "decidable": bool(len(vs) >= min_n and lo > chance),
                "agreement": _agreement(judged),
            }
        )
    return out


def step_class(label: int, kind: str | None) -> list[str]:
    """The classes a step counts in: its label's ("correct", "neutral", "wrong"), and for a wrong step its kind's
    group ("wrong: natural" / "wrong: injected") and its kind ("wrong: <kind>")."""
    from ..steps.tables import kind_class

    if label == 1:
        return ["correct"]
    if label == 0:
        return ["neutral"]
    return ["wrong", f"wrong: {kind_class(kind)}", f"wrong: {kind}"]


def _class_order(name: str) -> tuple:
    from ..steps.items import STEP_ERROR_KINDS

    kinds = [f"wrong: {k}" for k in STEP_ERROR_KINDS]
    fixed = ["correct", "wrong", "wrong: natural", "wrong: injected"]
    if name in fixed:
        return (fixed.index(name), "")
    if name == "neutral":
        return (len(fixed) + len(kinds) + 1, "")
    return (len(fixed) + (kinds.index(name) if name in kinds else len(kinds)), name)


def step_classes(verdicts: list[dict], key: dict[str, tuple], hcfg: ValidityHuman) -> list[dict]:
    """Per (source, class of step label), sources "all" first. key: item_uid -> (source, labels, error kinds)."""
    z = _z(float(hcfg.ci))
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for v in verdicts:
        src, labels, kinds = key[v["item_uid"]]
        for cls in step_class(labels[v["step"]], kinds[v["step"]]):
            groups[("all", cls)].append(v)
            groups[(src, cls)].append(v)
    out = []
    for src, cls in sorted(groups, key=lambda g: (g[0] != "all", g[0], _class_order(g[1]))):
        vs = groups[(src, cls)]
        n = len(vs)
        share = {s: round(sum(v["verdict"] == s for v in vs) / n, 4) for s in STEP_VERDICTS}
        expect = None if cls == "neutral" else ("right" if cls == "correct" else "wrong")
        judged: dict[str, dict] = defaultdict(dict)
        for v in vs:
            judged[v["annotator"]][(v["item_uid"], v["step"])] = v["verdict"]
        row = {
            "source": src,
            "class": cls,
            "judgments": n,
            "steps": len({(v["item_uid"], v["step"]) for v in vs}),
            "items": len({v["item_uid"] for v in vs}),
            "annotators": sorted(judged),
            **share,
            "expected": expect,
            "agreement": None,
            "ci": None,
            "between_annotators": _agreement(judged),
        }
        if expect is not None:
            k = sum(v["verdict"] == expect for v in vs)
            lo, hi = wilson(k, n, z)
            row.update(agreement=round(k / n, 4), ci=[round(lo, 4), round(hi, 4)])
        out.append(row)
    return out


def human_report(merged: dict, keys: dict, hcfg: ValidityHuman) -> dict:
    """The report's `human` section from match_verdicts' result and release_keys."""
    cells = choice_cells(merged["mcq"], keys["mcq"], hcfg)
    return {
        "ci": float(hcfg.ci),
        "min_judgments": int(hcfg.min_judgments),
        "annotators": sorted({v["annotator"] for v in merged["mcq"] + merged["steps"]}),
        "files": merged["files"],
        "cells": cells,
        "not_decidable": [f"{c['source']}/{c['family']}" for c in cells if not c["decidable"]],
        "steps": step_classes(merged["steps"], keys["steps"], hcfg),
    }


def _z(ci: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + ci / 2)


# ------------------------------------------------------------------------------------------------ the report


def human_markdown(human: dict) -> list[str]:
    """The report's human-check section (markdown lines)."""

    def f(x):
        return "–" if x is None else (f"{x:.3f}" if isinstance(x, float) else str(x))

    lines = [
        "",
        "## Human check",
        "",
        f"Verdicts of {len(human['annotators'])} annotator(s) ({', '.join(human['annotators'])}) on the review "
        "pages, matched to this release's items by item uid.",
        "",
        "| file | annotator | page | verdicts | merged | refused | made for |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for r in human.get("files", []):
        made = "this release" if r["this_release"] else f"another release ({short(r['release_fingerprint'])})"
        lines.append(
            f"| {r['file']} | {r['annotator']} | {r['source']} {r['family']} | {r['verdicts']} | {r['merged']} "
            f"| {r['refused']} | {made} |"
        )
    if human["cells"]:
        lines += [
            "",
            'Multiple-choice items, against the key; "cannot tell" counts as not correct. '
            f"{int(human['ci'] * 100)} % Wilson interval over judgments; decidable = lower bound above chance with at "
            f"least {human['min_judgments']} judgments. Agreement: mean over annotator pairs of the share of equal "
            "verdicts on shared items, and Cohen's kappa.",
            "",
            "| source | family | judgments | human acc. | interval | chance | cannot tell | agreement | kappa "
            "| decidable |",
            "|---|---|---:|---:|---|---:|---:|---:|---:|---|",
        ]
        for c in human["cells"]:
            a = c["agreement"]
            lines.append(
                f"| {c['source']} | {c['family']} | {c['judgments']} | {f(c['accuracy'])} "
                f"| [{f(c['ci'][0])}, {f(c['ci'][1])}] | {f(c['chance'])} | {f(c['cannot_tell'])} "
                f"| {f(a['agreement'])} | {f(a['kappa'])} | {'yes' if c['decidable'] else '**no**'} |"
            )
        lines += ["", "Not decidable by humans: " + (", ".join(human["not_decidable"]) or "none")]
    if human.get("steps"):
        lines += [
            "",
            "Step track (T13): is each step's sentence true of its frames (right / wrong / unsure), per class of the "
            "step's label. Agrees = the share of the verdict the label implies (right for correct, wrong for every "
            f"wrong kind; unsure counts as not agreeing), {int(human['ci'] * 100)} % Wilson interval; a neutral step "
            "implies no verdict (never scored). Between annotators: share of equal verdicts on shared steps, kappa.",
            "",
            "| source | class | judgments | steps | agrees | interval | right | wrong | unsure | between annotators "
            "| kappa |",
            "|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|",
        ]
        for c in human["steps"]:
            a = c["between_annotators"]
            ci = "–" if c["ci"] is None else f"[{f(c['ci'][0])}, {f(c['ci'][1])}]"
            lines.append(
                f"| {c['source']} | {c['class']} | {c['judgments']} | {c['steps']} | {f(c['agreement'])} | {ci} "
                f"| {f(c['right'])} | {f(c['wrong'])} | {f(c['unsure'])} | {f(a['agreement'])} | {f(a['kappa'])} |"
            )
    dropped = [r for r in human.get("files", []) if r["refused"]]
    if dropped:
        lines += [
            "",
            "Left out (--drop-unknown): verdicts on items not in this release, "
            + ", ".join(f"{r['refused']} of {r['file']}" for r in dropped)
            + ".",
        ]
    return lines
