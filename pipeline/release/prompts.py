"""The prompt protocol: one user prompt per item, the SFT target, the task-id vocabulary and the generated
metadata/prompt_templates.md.

Every family uses the standard MCQ template of the public release (docs/release-format.md): the question, a
blank line, one `A: text` line per option, a blank line, "Choose exactly one option label.", and the output
protocol ending in the `<ANSWER>letter</ANSWER>` line (a placeholder, never an option label). T8 and T9 open with
their header lines (from configs/tasks/T8.yaml / T9.yaml `prompt.header`); they answer with an option letter like every other family (the
public docs' `<ANSWER>XYZ</ANSWER>` / `<ANSWER>X</ANSWER>` is replaced by one letter protocol). Task language is
never part of a prompt, nor is the high-level action (the public T11/T12 questions named it; see the templates'
`question_changed_from_public`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import json

import polars as pl

import upstream_adapters

from pipeline.release.schema import CHOICE_LETTERS as LETTERS

if TYPE_CHECKING:
    from pipeline.settings.root import Settings

# The answer line's example: a placeholder that is no option label, so the example steers no model to an option
# (an example `<ANSWER>A</ANSWER>` drew T8's option A in 51-79 % of strong models' replies on the public items).
PROTOCOL_EXAMPLE = "<ANSWER>letter</ANSWER>"
PROTOCOL_LINES: tuple[str, ...] = (
    "Choose exactly one option label.",
    "",
    "Output protocol:",
    "- You may include brief reasoning before the final answer.",
    f"- The final line must be exactly: {PROTOCOL_EXAMPLE}, where letter is the label of your chosen option.",
    "- Do not output anything after </ANSWER>.",
)


def sft_target(letter: str) -> str:
    """The training target for an answer letter."""
    if letter not in LETTERS:
        raise ValueError(f"not an option letter: {letter!r}")
    return f"<ANSWER>{letter}</ANSWER>"


def source_order() -> list[str]:
    """Sources in the adapter registry's order (the one list of sources)."""
    return list(upstream_adapters.ADAPTERS)


def _choices(row: dict) -> list[str]:
    if row.get("choices") is not None:
        return list(row["choices"])
    out = []
    for c in LETTERS:
        v = row.get(f"choice_{c}")
        if v is None:
            break
        out.append(v)
    return out


def question_texts(items: pl.DataFrame, cfg: Settings) -> pl.Series:
    """The `question` of every item, made here from its template: the template's question for the item's source
    (configs/tasks, its variant applied), filled with the fields its family recorded (`question_fields_json`; a
    question without fields is the template's text as it is). The steps before the release carry the fields, not the
    text, so a question edit runs the release step alone (assets/tables.py)."""
    keys = items.select("task_id", "source", "question_fields_json").unique(maintain_order=True)
    texts = []
    for task_id, source, fields in keys.iter_rows():
        q = str(cfg.tasks[task_id].for_source(source).question)
        texts.append(q if "{" not in q else q.format(**json.loads(fields)))
    keys = keys.with_columns(pl.Series("question", texts, dtype=pl.String))
    on = ["task_id", "source", "question_fields_json"]
    return items.select(on).join(keys, on=on, how="left", maintain_order="left", nulls_equal=True)["question"]


def format_prompt(row: dict, cfg: Settings) -> str:
    """The full user prompt of an item (ITEMS row with `choices`, or a release row with choice_A..choice_F)."""
    choices = _choices(row)
    if len(choices) < 2:
        raise ValueError(f"item {row.get('item_key') or row.get('item_id')}: fewer than two options")
    prompt = cfg.tasks[row["task_id"]].prompt
    header = list(prompt.header) if prompt else []
    lines: list[str] = []
    if header:
        lines += header + [""]
    lines += [str(row["question"]), ""]
    lines += [f"{LETTERS[i]}: {c}" for i, c in enumerate(choices)]
    lines += [""] + list(PROTOCOL_LINES)
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------- task vocabulary


def name_aliases(cfg: Settings) -> dict[str, list[str]]:
    """T -> other names the family goes by (citation/search only)."""
    return {t: list(cfg.tasks[t].name_aliases) for t in cfg.task_ids}


def legacy_aliases(cfg: Settings) -> dict[str, list[str]]:
    """T -> legacy engineering ids used by the reference build (T5 T_progress, T8 T_temporal, T9 T_binary / T9),
    only where they differ from the task id. A mapping only: the release uses T1..T12."""
    out = {}
    for t in cfg.task_ids:
        la = cfg.tasks[t].legacy_alias
        vals = sorted(set(la.values()) if isinstance(la, dict) else ({la} if la else set()))
        vals = [v for v in vals if v != t] + ([t] if t in vals and len(vals) > 1 else [])
        if vals:
            out[t] = vals
    return out


def legacy_alias(cfg: Settings, task_id: str, source: str) -> str:
    """The legacy id of a family for one source (task_type_legacy)."""
    return str(cfg.tasks[task_id].for_source(source).legacy_alias or task_id)


def resolve_task_id(name: str, cfg: Settings) -> str:
    """T-id for a task id, a legacy alias, a public name or a name alias (case-insensitive)."""
    key = str(name).strip()
    if key in cfg.tasks:
        return key
    low = key.lower()
    names_of = cfg.task_names()
    for t in cfg.task_ids:
        tc = cfg.tasks[t]
        names = [names_of[t]] + list(tc.name_aliases)
        la = tc.legacy_alias
        names += list(la.values()) if isinstance(la, dict) else [la] if la else []
        if any(str(n).lower() == low for n in names if n):
            return t
    raise KeyError(f"unknown task {name!r}")


# ------------------------------------------------------------------------------------------- prompt_templates.md


def _example_row(cfg: Settings, task_id: str, source: str) -> dict:
    tc = cfg.tasks[task_id]
    k = int(tc.num_choices)
    q = str(tc.for_source(source).question)
    fields = {
        "arm": "left",
        "high_action": "Pick round peg 1",
        "prev": "Approach",
        "next": "Lift",
        "step": "Pick round peg 1",
    }
    q = q.format(**fields)
    if tc.display_labels:
        from pipeline.families.temporal import canonical_choices

        choices = canonical_choices({"display_labels": tc.display_labels, "num_choices": k})
    else:
        choices = list((tc.for_source(source).labels or {}).values())[:k]
    return {"task_id": task_id, "question": q, "choices": choices}


def _frames_text(fr: dict) -> str:
    if "strip" in fr:
        return (
            f"{fr['strip']} frames spanning the named step from its first to its last frame (labelled "
            f"1..{fr['strip']}), then the query frame inside it (labelled NOW)"
        )
    if fr.get("until_decisive"):
        text = f"fractions {fr['relative']} of the attempt, the last one its end (the decisive moment)"
        if fr.get("windows_per_unit"):
            text += f"; {fr['windows_per_unit']} windows from every unit used"
        return text
    if fr.get("state_change") == "contact":
        return (
            _frames_text({k: v for k, v in fr.items() if k != "state_change"})
            + "; consecutive frames in different contact runs (before grasp / held / after release)"
        )
    if fr.get("state_change") == "pixels":
        return (
            _frames_text({k: v for k, v in fr.items() if k != "state_change"})
            + "; frames that look alike dropped (pixel distance)"
        )
    if "offsets" in fr and "centers" in fr:
        return f"offsets {fr['offsets']} around centres at {fr['centers']} of the segment's stable sub-range"
    if "offsets" in fr:
        return f"offsets {fr['offsets']} around the anchor frame"
    if "relative" in fr and "shifts" in fr:
        return f"fractions {fr['relative']} of the episode, shifted by {fr['shifts']}"
    if "relative" in fr:
        return f"fractions {fr['relative']} of the segment's stable sub-range"
    if fr.get("mode") == "grid":
        return (
            f"grid every {fr['step_sec']} s, frames >= {fr['min_sep_sec']} s apart, up to "
            f"{fr['max_gap_steps']} grid steps apart"
        )
    if fr.get("mode") == "segment_midpoints":
        return f"midpoints of successful high-level action segments, {fr['gaps']} segments apart"
    return json.dumps(fr, sort_keys=True)


def prompt_templates_markdown(cfg: Settings) -> str:
    """metadata/prompt_templates.md, generated from configs/tasks/*.yaml (deterministic; no hand-written copy)."""
    version = cfg.release.prompt_version
    names = cfg.task_names()
    out = [
        "# Prompt templates",
        "",
        f"Prompt version `{version}`. Generated from `configs/tasks/T*.yaml` by `pipeline.prompts`.",
        "",
        "## Protocol",
        "",
        "Every item is one multiple-choice question over the item's frames (in `frame_indices_json` order; T8 shows "
        "three frames labelled X, Y, Z in that order, T9 one composite of two panels labelled X (left) and Y "
        "(right)). The answer is always an option letter, for every task including T8 and T9; the training target "
        "is `<ANSWER>{letter}</ANSWER>`. Task language (the upstream task description) is never shown: no source's "
        "licence has been cleared for showing its text, so T8/T9 frames are chosen to be ordered without it (a "
        "change of contact state between them, or a pixel distance).",
        "",
        "Standard template:",
        "",
        "```text",
        "{question}",
        "",
        "A: {choice_A}",
        "B: {choice_B}",
        "...",
        "",
        *PROTOCOL_LINES,
        "```",
        "",
        "T8 and T9 put their header lines (below) and a blank line before `{question}`.",
        "",
        "## Task ids",
        "",
        "| task_id | task name | legacy alias | other names |",
        "|---|---|---|---|",
    ]
    legacy = legacy_aliases(cfg)
    aliases = name_aliases(cfg)
    for t in cfg.task_ids:
        out.append(
            f"| {t} | {names[t]} | {', '.join(legacy.get(t, [])) or '—'} | {', '.join(aliases.get(t, [])) or '—'} |"
        )
    out.append("")
    for t in cfg.task_ids:
        tc = cfg.tasks[t]
        sources = [s for s in source_order() if s in tc.sources]
        out += [
            f"## {t} — {names[t]}",
            "",
            f"- options: {tc.num_choices}; input: `{tc.input_type}`; sources: " + ", ".join(f"`{s}`" for s in sources),
        ]
        if tc.variant != "default":  # e.g. the public release's frames (configs/tasks/T*.yaml `variants`)
            out.append(f"- template variant: `{tc.variant}`")
        out += [""]
        out += ["| source | question | options (closed label set) | frames |", "|---|---|---|---|"]
        for s in sources:
            q = str(tc.for_source(s).question)
            if tc.display_labels:
                from pipeline.families.temporal import canonical_choices

                opts = ", ".join(
                    canonical_choices({"display_labels": tc.display_labels, "num_choices": tc.num_choices})
                )
            else:
                opts = "; ".join(f"{k} = “{v}”" for k, v in (tc.for_source(s).labels or {}).items())
            window = tc.for_source(s).frames
            fr = window.model_dump() if window is not None else {}  # the keys the file sets, as written
            out.append(f"| `{s}` | {q} | {opts} | {_frames_text(fr)} |".replace("\n", " "))
        if tc.question_changed_from_public:  # the task YAML says why the text differs from the public one
            out += ["", f"Changed from the public question: {' '.join(str(tc.question_changed_from_public).split())}"]
        header = tc.prompt.header if tc.prompt else None
        if header:
            out += ["", "Header lines:", "", "```text", *header, "```"]
        ex_src = sources[0] if sources else source_order()[0]
        out += [
            "",
            f"Example prompt (`{ex_src}`):",
            "",
            "```text",
            format_prompt(_example_row(cfg, t, ex_src), cfg),
            "```",
            "",
        ]
    return "\n".join(out).rstrip("\n") + "\n"
