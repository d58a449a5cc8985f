"""`processbench compare RUN_DIR …`: several scored runs on one release, side by side.

    report = compare(run_dirs, cfg[, allow_mixed])     # -> dict (compare.json)
    write_report(report, out_dir)                      # compare.{json,md,png}

A run folder is what `processbench eval --out` (or `processbench score --out`) wrote: `metrics.json` and
`per_item.jsonl` (and `run_summary.json` when eval made it). For each run: accuracy overall and per level, family
and source with its interval, against the image-free baselines of the same slice (from its own metrics.json: the same
release gives every run the same baselines). For every pair of runs: the paired difference of accuracy on the items
both runs' servers answered (outcome answered, invalid, refused, truncated or empty; matched by item_uid), overall and
per level, with a paired split-group bootstrap interval: each resample draws split groups with replacement and takes
Σ(correct_a − correct_b) / n over the drawn groups' items, the scorers' one bootstrap (pipeline/scoring/bootstrap.py:
same seed, samples, minimum groups, no zero-width interval). Runs of different releases (release fingerprints) are
refused unless `allow_mixed`: then pairs are matched by item_uid across them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import json
from itertools import combinations
from pathlib import Path

import numpy as np

from pipeline.core import io
from pipeline.scoring.bootstrap import ci_text, fmt, group_bootstrap
from pipeline.scoring.outcomes import SERVER_ANSWERED as ANSWERED

if TYPE_CHECKING:
    from pipeline.settings.models import ExportsScore
    from pipeline.settings.root import Settings

OUTPUTS = ("compare.json", "compare.md", "compare.png")
SERVER_ANSWERED = frozenset(ANSWERED)
SLICES = (("by_level", "level"), ("by_task", "family"), ("by_source", "source"))
PER_ITEM_FIELDS = ("item_id", "split_group_id", "level", "correct")


class RunError(ValueError):
    """A run folder that cannot be compared (one line: the folder and the reason)."""


def _json(path: Path, run: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunError(
            f"{run}: no {path.name}: not a scored eval run folder (what `processbench eval --out` writes)"
        ) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RunError(f"{run}: {path.name} is not JSON ({exc})") from None


def read_run(run_dir: Path) -> dict:
    """{name, dir, model, release, metrics, items: [per-item rows]} of a run folder; RunError naming it otherwise."""
    run = Path(run_dir)
    if not run.is_dir():
        raise RunError(f"{run}: not a folder")
    metrics = _json(run / "metrics.json", run)
    if not isinstance(metrics, dict) or not isinstance(metrics.get("overall"), dict):
        raise RunError(f"{run}: metrics.json has no multiple-choice scores (`overall`): not an eval run's report")
    missing = [k for k, _ in SLICES if not isinstance(metrics.get(k), dict)]
    if missing:
        raise RunError(f"{run}: metrics.json lacks {missing}: made by another version of the scorer?")
    items = []
    path = run / "per_item.jsonl"
    try:
        with open(path, "rb") as fh:
            for n, raw in enumerate(fh, 1):
                if not raw.strip():
                    continue
                try:
                    row = json.loads(raw)
                except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                    raise RunError(f"{run}: per_item.jsonl:{n} is not JSON ({exc})") from None
                if not isinstance(row, dict) or any(k not in row for k in PER_ITEM_FIELDS):
                    raise RunError(f"{run}: per_item.jsonl:{n} lacks {list(PER_ITEM_FIELDS)}")
                items.append(row)
    except FileNotFoundError:
        raise RunError(f"{run}: no per_item.jsonl: not a scored eval run folder") from None
    summary = {}
    if (run / "run_summary.json").is_file():
        summary = _json(run / "run_summary.json", run)
    ident = summary.get("identity") if isinstance(summary, dict) else None
    return {
        "dir": str(run),
        "name": run.name,
        "model": (summary.get("model") if isinstance(summary, dict) else None) or run.name,
        "identity": ident,
        "release": metrics.get("release"),
        "metrics": metrics,
        "items": items,
    }


def _uid(row: dict) -> str:
    return row.get("item_uid") or row["item_id"]


def paired_difference(a: list[dict], b: list[dict], sc: ExportsScore) -> dict:
    """Accuracy of a minus b on the items both servers answered, with the paired split-group bootstrap interval."""
    rb = {_uid(r): r for r in b}
    pairs = [
        (r, rb[_uid(r)])
        for r in a
        if _uid(r) in rb
        and r.get("outcome", "answered") in SERVER_ANSWERED
        and rb[_uid(r)].get("outcome", "answered") in SERVER_ANSWERED
    ]
    if not pairs:
        return {
            "n": 0,
            "n_groups": 0,
            "accuracy_a": None,
            "accuracy_b": None,
            "difference": None,
            "ci95": None,
            "ci95_note": "no item answered in both runs",
        }
    groups = sorted({ra["split_group_id"] for ra, _ in pairs})
    gi = {g: i for i, g in enumerate(groups)}
    sums = np.zeros((len(groups), 3))
    for ra, rb_ in pairs:
        sums[gi[ra["split_group_id"]]] += (float(ra["correct"]), float(rb_["correct"]), 1.0)
    tot = sums.sum(axis=0)
    ci, note = group_bootstrap(sums, lambda t: (t[:, 0] - t[:, 1]) / t[:, 2], sc)
    out = {
        "n": int(tot[2]),
        "n_groups": len(groups),
        "accuracy_a": round(float(tot[0] / tot[2]), 4),
        "accuracy_b": round(float(tot[1] / tot[2]), 4),
        "difference": round(float((tot[0] - tot[1]) / tot[2]), 4),
        "ci95": ci,
    }
    if note:
        out["ci95_note"] = note
    return out


def _slice(b: dict) -> dict:
    base = b.get("baselines") or {}
    return {
        "accuracy": b.get("accuracy"),
        "ci95": b.get("ci95"),
        "n": b.get("n"),
        "image_free_best": base.get("image_free_best"),
        "clears_image_free": b.get("clears_image_free"),
        "answered_accuracy": b.get("answered_accuracy"),
    }


def compare(run_dirs: list[Path], cfg: Settings, allow_mixed: bool = False) -> dict:
    runs = [read_run(d) for d in run_dirs]
    names = [r["name"] for r in runs]
    for r in runs:  # two folders of one name: tell them apart by their parent
        if names.count(r["name"]) > 1:
            r["name"] = f"{Path(r['dir']).parent.name}/{r['name']}"
    releases = sorted({str(r["release"]) for r in runs})
    if len(releases) > 1 and not allow_mixed:
        listed = ", ".join(f"{r['name']} (release {r['release']})" for r in runs)
        raise RunError(
            f"runs of different releases: {listed}: their items and baselines differ; "
            f"--allow-mixed-releases compares them on the items they share (by item_uid)"
        )
    sc = cfg.exports.score
    out = {
        "releases": releases,
        "mixed_releases": len(releases) > 1,
        "runs": [],
        "pairs": [],
        "definitions": {
            "paired_difference": "accuracy of run a minus run b over the items both runs' servers answered (outcome "
            "answered, invalid, refused, truncated or empty; matched by item_uid); ci95: percentile interval over "
            "score.bootstrap_samples resamples of those items' split groups with replacement (both runs' answers of "
            "a drawn group move together: a paired cluster bootstrap, seeded by score.seed); null with a note when "
            "not estimable.",
            "accuracy": "each run's own metrics.json: every eval item of the slice is the denominator.",
        },
    }
    for r in runs:
        m = r["metrics"]
        out["runs"].append(
            {
                "name": r["name"],
                "dir": r["dir"],
                "model": r["model"],
                "identity": r["identity"],
                "release": r["release"],
                "overall": _slice(m["overall"]) | {"outcomes": m["overall"].get("outcomes")},
                **{key: {k: _slice(b) for k, b in m[key].items()} for key, _ in SLICES},
                "steps_macro_f1": ((m.get("steps") or {}).get("overall") or {}).get("macro_f1"),
            }
        )
    for a, b in combinations(runs, 2):
        levels = sorted({r["level"] for r in a["items"]} | {r["level"] for r in b["items"]})
        out["pairs"].append(
            {
                "a": a["name"],
                "b": b["name"],
                "overall": paired_difference(a["items"], b["items"], sc),
                "by_level": {
                    lv: paired_difference(
                        [r for r in a["items"] if r["level"] == lv], [r for r in b["items"] if r["level"] == lv], sc
                    )
                    for lv in levels
                },
            }
        )
    return out


def markdown(rep: dict) -> str:
    runs = rep["runs"]
    lines = [
        "# Runs compared",
        "",
        f"Release {', '.join(rep['releases'])}"
        + (" (MIXED: pairs matched by item_uid)" if rep["mixed_releases"] else ""),
        "",
        "| run | model | endpoint | accuracy | 95 % CI | image-free best | clears it | answered accuracy | step macro-F1 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        o, i = r["overall"], r["identity"] or {}
        lines.append(
            f"| {r['name']} | {r['model']} | {i.get('host', '')} | {fmt(o['accuracy'])} | {ci_text(o['ci95'])} | "
            f"{fmt(o['image_free_best'])} | {o['clears_image_free']} | {fmt(o['answered_accuracy'])} | "
            f"{fmt(r['steps_macro_f1'])} |"
        )
    for key, what in SLICES:
        slices = sorted({s for r in runs for s in r[key]}, key=lambda s: (len(s), s))
        lines += ["", f"## Accuracy per {what} (95 % CI; image-free best)", ""]
        lines += ["| " + what + " | image-free best | " + " | ".join(r["name"] for r in runs) + " |"]
        lines += ["|" + "---|" * (len(runs) + 2)]
        for s in slices:
            cells = []
            best = None
            for r in runs:
                b = r[key].get(s)
                if b is None:
                    cells.append("–")
                    continue
                best = b["image_free_best"] if best is None else best
                flag = "" if b["clears_image_free"] else " ·"
                cells.append(f"{fmt(b['accuracy'])} {ci_text(b['ci95'])}{flag}")
            lines.append(f"| {s} | {fmt(best)} | " + " | ".join(cells) + " |")
    lines += ["", "· : the interval does not clear the image-free best (or is not estimable).", ""]
    lines += ["## Paired differences (a − b, items both answered)", ""]
    lines += [
        "| a | b | slice | n | groups | accuracy a | accuracy b | a − b | 95 % CI |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in rep["pairs"]:
        for name, d in [("overall", p["overall"])] + [(f"level {k}", v) for k, v in p["by_level"].items()]:
            lines.append(
                f"| {p['a']} | {p['b']} | {name} | {d['n']} | {d['n_groups']} | {fmt(d['accuracy_a'])} | "
                f"{fmt(d['accuracy_b'])} | {fmt(d['difference'])} | {ci_text(d['ci95'])} |"
            )
    lines += ["", "Definitions:", ""] + [f"- **{k}**: {v}" for k, v in rep["definitions"].items()]
    return "\n".join(lines) + "\n"


def plot(rep: dict, path: Path) -> None:
    """Accuracy per family per run (bars with intervals, image-free best as dashes), and every pair's paired
    difference with its interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = rep["runs"]
    fams = sorted({f for r in runs for f in r["by_task"]}, key=lambda s: (len(s), s))
    x = np.arange(len(fams))
    width = 0.8 / max(1, len(runs))
    fig, (ax, bx) = plt.subplots(
        1, 2, figsize=(max(8, len(fams) * 0.9) + 6, 4.6), gridspec_kw={"width_ratios": [3, 1.4]}
    )
    for k, r in enumerate(runs):
        acc = np.array([(r["by_task"].get(f) or {}).get("accuracy") or 0.0 for f in fams])
        ci = [(r["by_task"].get(f) or {}).get("ci95") or [a, a] for f, a in zip(fams, acc)]
        err = [acc - np.array([c[0] for c in ci]), np.array([c[1] for c in ci]) - acc]
        ax.bar(x - 0.4 + width * (k + 0.5), acc, width, yerr=np.clip(err, 0, None), capsize=2, label=r["name"])
    best = [
        next(((r["by_task"].get(f) or {}).get("image_free_best") for r in runs if f in r["by_task"]), 0) for f in fams
    ]
    ax.hlines(best, x - 0.42, x + 0.42, colors="#000000", linestyles="--", linewidth=1.4, label="image-free best")
    ax.set_xticks(x, fams)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("accuracy")
    ax.set_title("accuracy per family (95 % CI)", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0, -0.08), ncol=min(4, len(runs) + 1))
    pairs = rep["pairs"]
    y = np.arange(len(pairs))
    diffs = np.array([p["overall"]["difference"] or 0.0 for p in pairs])
    cis = [p["overall"]["ci95"] or [d, d] for p, d in zip(pairs, diffs)]
    bx.errorbar(
        diffs,
        y,
        xerr=[diffs - np.array([c[0] for c in cis]), np.array([c[1] for c in cis]) - diffs],
        fmt="o",
        capsize=3,
        color="#4c72b0",
    )
    bx.axvline(0, color="#888888", linewidth=1)
    bx.set_yticks(y, [f"{p['a']} − {p['b']}" for p in pairs], fontsize=7)
    bx.set_title("paired difference, items both answered", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)


def write_report(rep: dict, out_dir: Path) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    io.atomic_write_text(out_dir / OUTPUTS[0], io.dumps_json(rep))
    io.atomic_write_text(out_dir / OUTPUTS[1], markdown(rep))
    plot(rep, out_dir / OUTPUTS[2])
    return [out_dir / f for f in OUTPUTS]
