"""validity_report.md: the report's tables for a reader."""

from __future__ import annotations


def _f(x, nd: int = 3) -> str:
    return "–" if x is None else (f"{x:.{nd}f}" if isinstance(x, float) else str(x))


def render_markdown(report: dict) -> str:
    lines = ["# Validity report", "",
             "Accuracies on eval of baselines that never see an image, trained on SFT (per source and family):",
             "random = 1/num_choices; label prior = the option whose label is most frequent among SFT answers;",
             "eval share = share of the most frequent eval answer label; majority letter = the most frequent SFT",
             "answer letter; memoriser = (question, set of option texts) -> most frequent SFT answer; bag of words =",
             "logistic regression on question + option words; blind = max(memoriser, bag of words); option only =",
             "the set of option texts -> most frequent SFT answer.", "",
             "| source | family | eval | random | label prior | eval share | maj. letter | memoriser | bag of words "
             "| blind | option only | exact shared img | near shared img |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in report["cells"]:
        img = c.get("images") or {}
        lines.append(f"| {c['source']} | {c['family']} | {c['eval_n']} | {_f(c['random'])} | {_f(c['label_prior'])} "
                     f"| {_f(c['eval_label_share'])} | {_f(c['majority_letter'])} | {_f(c['memoriser'])} "
                     f"| {_f(c['bag_of_words'])} | {_f(c['blind'])} | {_f(c['option_only'])} "
                     f"| {_f(img.get('exact_shared'))} | {_f(img.get('near_shared_fraction'))} |")
    temporal = [c for c in report["cells"] if c.get("temporal")]
    if temporal:
        lines += ["", "Frame gaps of the temporal families (eval + SFT items; the closest two frames of an item):", "",
                  "| source | family | items | median gap s | p10 gap s | median visual diff | p10 visual diff |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        for c in temporal:
            t = c["temporal"]
            lines.append(f"| {c['source']} | {c['family']} | {t['n']} | {_f(t['median_gap_s'])} | {_f(t['p10_gap_s'])} "
                         f"| {_f(t['median_visual_diff'])} | {_f(t['p10_visual_diff'])} |")
    lines += ["", f"Near duplicates: 64-bit perceptual hash within Hamming distance {report['near_duplicate_hamming']}.",
              "", "## Problems", ""]
    lines += [f"- {p}" for p in report.get("problems", [])] or ["none"]
    if report.get("human"):
        from .human import human_markdown

        lines += human_markdown(report["human"])
    return "\n".join(lines) + "\n"
