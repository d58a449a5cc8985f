"""validity_report.md: the report's tables for a reader."""

from __future__ import annotations


def _f(x, nd: int = 3) -> str:
    return "–" if x is None else (f"{x:.{nd}f}" if isinstance(x, float) else str(x))


def render_markdown(report: dict) -> str:
    lines = [
        "# Validity report",
        "",
        *(
            [f"Release fingerprint: `{report['release_fingerprint']}` (metadata/provenance.json).", ""]
            if report.get("release_fingerprint")
            else []
        ),
        "Accuracies on eval of baselines that never see an image, trained on SFT (per source and family):",
        "random = 1/num_choices; label prior = the option whose label is most frequent among SFT answers;",
        "eval share = share of the most frequent eval answer label; majority letter = the most frequent SFT",
        "answer letter; memoriser = (question, set of option texts) -> most frequent SFT answer; bag of words =",
        "logistic regression on question + option words; blind = max(memoriser, bag of words); option only =",
        "the set of option texts -> most frequent SFT answer. One row per (source, family, eval level); every",
        "level is scored against the same SFT rows.",
        "",
        "| source | family | level | eval | random | label prior | eval share | maj. letter | memoriser | bag of words "
        "| blind | option only | exact shared img | near shared img |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in report["cells"]:
        img = c.get("images") or {}
        lines.append(
            f"| {c['source']} | {c['family']} | {_f(c.get('level'))} | {c['eval_n']} | {_f(c['random'])} | {_f(c['label_prior'])} "
            f"| {_f(c['eval_label_share'])} | {_f(c['majority_letter'])} | {_f(c['memoriser'])} "
            f"| {_f(c['bag_of_words'])} | {_f(c['blind'])} | {_f(c['option_only'])} "
            f"| {_f(img.get('exact_shared'))} | {_f(img.get('near_shared_fraction'))} |"
        )
    lines += _metadata_lines(report)
    temporal = [c for c in report["cells"] if c.get("temporal")]
    if temporal:
        lines += [
            "",
            "Frame gaps of the temporal families (eval + SFT items; the closest two frames of an item):",
            "",
            "| source | family | level | items | median gap s | p10 gap s | median visual diff | p10 visual diff |",
            "|---|---|---|---:|---:|---:|---:|---:|",
        ]
        for c in temporal:
            t = c["temporal"]
            lines.append(
                f"| {c['source']} | {c['family']} | {_f(c.get('level'))} | {t['n']} | {_f(t['median_gap_s'])} | {_f(t['p10_gap_s'])} "
                f"| {_f(t['median_visual_diff'])} | {_f(t['p10_visual_diff'])} |"
            )
    lines += [
        "",
        f"Near duplicates: 64-bit perceptual hash within Hamming distance {report['near_duplicate_hamming']}.",
    ]
    if report.get("steps"):
        from ..steps.gates import gate_markdown

        lines += gate_markdown(report["steps"])
    lines += ["", "## Problems", ""]
    lines += [f"- {p}" for p in report.get("problems", [])] or ["none"]
    if report.get("warnings"):
        lines += ["", "## Warnings (reported, not blocking)", ""] + [f"- {w}" for w in report["warnings"]]
    if report.get("human"):
        from .human import human_markdown

        lines += human_markdown(report["human"])
    return "\n".join(lines) + "\n"


def _metadata_lines(report: dict) -> list[str]:
    """Per cell: the best model-facing metadata baseline, the best reconstruction-only one, and the row count."""
    from .metadata import ROW_COUNT, model_facing

    cells = [c for c in report["cells"] if c.get("metadata")]
    if not cells:
        return []
    lines = [
        "",
        "Metadata baselines (pipeline/validity/metadata.py): one public column alone (its value, or the rank",
        "order of the numbers in it) or a unit's row count in its file, trained on SFT. Model-facing columns",
        "(pipeline.schema.MODEL_FACING_COLUMNS) and the row count are checked; the rest live only in the",
        "reconstruction files and are reported.",
        "",
        "| source | family | level | label prior | best model-facing column | acc | row count "
        "| best reconstruction-only column | acc |",
        "|---|---|---|---:|---|---:|---:|---|---:|",
    ]

    def best(items):
        items = [(a, col) for col, a in items if a is not None]
        return max(items, key=lambda x: (x[0], x[1])) if items else (None, None)

    for c in cells:
        m = c["metadata"]
        mf = best((k, v) for k, v in m.items() if model_facing(k) and k != ROW_COUNT)
        rc = best((k, v) for k, v in m.items() if not model_facing(k))
        lines.append(
            f"| {c['source']} | {c['family']} | {_f(c.get('level'))} | {_f(c['label_prior'])} | "
            f"{_f(mf[1])} | {_f(mf[0])} | {_f(m.get(ROW_COUNT))} | {_f(rc[1])} | {_f(rc[0])} |"
        )
    return lines
