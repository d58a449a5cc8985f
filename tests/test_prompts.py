"""The prompt protocol: exact prompt text (standard, T8, T9, release rows), SFT target, task vocabulary and the
generated prompt_templates.md."""

from __future__ import annotations

import pytest

import public_release_pins as pins
from pipeline.release import prompts as P
from pipeline.settings.config import load_settings

CFG = load_settings()

TAIL = (
    "Choose exactly one option label.\n\nOutput protocol:\n"
    "- You may include brief reasoning before the final answer.\n"
    "- The final line must be exactly: <ANSWER>letter</ANSWER>, where letter is the label of your chosen "
    "option.\n"
    "- Do not output anything after </ANSWER>."
)


def test_standard_prompt_exact():
    row = {
        "task_id": "T2",
        "question": "Is the end effector currently in contact with anything?",
        "choices": ["No — no contact", "Yes — contact established"],
    }
    assert P.format_prompt(row, CFG) == (
        "Is the end effector currently in contact with anything?\n\n"
        "A: No — no contact\nB: Yes — contact established\n\n" + TAIL
    )


def test_release_row_form_matches_items_form():
    item = {
        "task_id": "T1",
        "question": "Which phase best describes the current robot manipulation state?",
        "choices": ["approach", "contact", "release", "transfer"],
    }
    row = {
        "task_id": "T1",
        "question": item["question"],
        "choice_A": "approach",
        "choice_B": "contact",
        "choice_C": "release",
        "choice_D": "transfer",
        "choice_E": None,
        "choice_F": None,
    }
    assert P.format_prompt(row, CFG) == P.format_prompt(item, CFG)
    assert "D: transfer\n\nChoose exactly one option label." in P.format_prompt(row, CFG)


def test_t8_and_t9_headers():
    t8 = P.format_prompt(
        {
            "task_id": "T8",
            "question": "Order these three frames from earliest to latest in the manipulation sequence.",
            "choices": ["XYZ", "XZY", "YXZ", "YZX", "ZXY", "ZYX"],
        },
        CFG,
    )
    assert t8.startswith(
        "You are shown 3 frames from a robot manipulation task.\n"
        "The frames are labeled X, Y, Z (these labels are arbitrary identifiers, not positional, "
        "and not time-ordered).\n"
    )
    assert "\n\nOrder these three frames from earliest to latest in the manipulation sequence.\n\nA: XYZ\n" in t8
    assert "F: ZYX\n\n" + TAIL in t8
    t9 = P.format_prompt(
        {
            "task_id": "T9",
            "question": "Which labeled panel happened earlier in the real manipulation sequence, X or Y?",
            "choices": ["X", "Y"],
        },
        CFG,
    )
    assert t9 == (
        "A single comparison image shows two labeled robot-manipulation panels from the same episode.\n"
        "The left-right placement of the panels and the labels are arbitrary identifiers and do not "
        "indicate temporal order.\n\n"
        "Which labeled panel happened earlier in the real manipulation sequence, X or Y?\n\n"
        "A: X\nB: Y\n\n" + TAIL
    )


def test_sft_target():
    assert P.sft_target("C") == "<ANSWER>C</ANSWER>"
    with pytest.raises(ValueError):
        P.sft_target("XYZ")


def test_too_few_options_rejected():
    with pytest.raises(ValueError):
        P.format_prompt({"task_id": "T1", "question": "q", "choices": ["a"]}, CFG)


def test_task_vocabulary():
    names = CFG.task_names()
    assert list(names) == CFG.task_ids and all(names.values())  # every family of the configs, in task order
    assert {t: names[t] for t in pins.TASK_NAMES} == pins.TASK_NAMES
    assert P.legacy_aliases(CFG) == {"T5": ["T_progress"], "T8": ["T_temporal"], "T9": ["T_binary", "T9"]}
    assert P.legacy_alias(CFG, "T9", "aist") == "T9" and P.legacy_alias(CFG, "T9", "gm100") == "T_binary"
    assert P.legacy_alias(CFG, "T1", "gm100") == "T1"
    assert P.name_aliases(CFG)["T10"] == ["Current Primitive Action Recognition"]
    for alias, t in (
        ("T_progress", "T5"),
        ("T_temporal", "T8"),
        ("T_binary", "T9"),
        ("temporal precedence", "T9"),
        ("Phase Recognition", "T1"),
        ("T11", "T11"),
    ):
        assert P.resolve_task_id(alias, CFG) == t
    with pytest.raises(KeyError):
        P.resolve_task_id(f"T{len(CFG.task_ids) + 1}", CFG)  # a family the configs do not have


def test_prompt_templates_markdown():
    md = P.prompt_templates_markdown(CFG)
    assert md == P.prompt_templates_markdown(load_settings())  # deterministic
    assert md.endswith("\n") and not md.endswith("\n\n")
    for t, tc in CFG.tasks.items():
        assert f"## {t} — {tc.task_name}" in md
        for q in tc.question.values() if isinstance(tc.question, dict) else [tc.question]:
            assert q in md, (t, q)
    assert "toward the left side of the scene" in md and "Yes — contact established" in md
    assert "XYZ, XZY, YXZ, YZX, ZXY, ZYX" in md
    assert "<ANSWER>letter</ANSWER>" in md and "<ANSWER>A</ANSWER>" not in md
    from pipeline.publish.validate import find_path_leaks

    assert find_path_leaks(md) == []


def test_no_prompt_shows_a_valid_option_as_the_protocol_example():
    """The answer line's example is a placeholder: not an option label of any item, nor an option text, and the
    one answer parser (pipeline/scoring/mcq.py) reads it as no answer at all."""
    import re

    from pipeline.release.schema import CHOICE_LETTERS
    from pipeline.scoring.mcq import parse_answer

    example = re.fullmatch(r"<ANSWER>(.*)</ANSWER>", P.PROTOCOL_EXAMPLE).group(1)
    assert example not in CHOICE_LETTERS and example.upper() not in CHOICE_LETTERS
    assert parse_answer(P.PROTOCOL_EXAMPLE, len(CHOICE_LETTERS)) is None
    seen = 0
    for t, tc in CFG.tasks.items():
        for s in tc.sources:
            row = P._example_row(CFG, t, s)
            text = P.format_prompt(row, CFG)
            tags = re.findall(r"<ANSWER>(.*?)</ANSWER>", text)
            assert tags == [example], (t, s, tags)  # the protocol's one example, nothing else
            assert example not in row["choices"] and example not in CHOICE_LETTERS[: len(row["choices"])]
            seen += 1
    assert seen >= len(CFG.tasks)
