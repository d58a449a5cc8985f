"""The step answer format, the one place its parser lives (the prompt states the same format).

A model answers one verdict per step, in order, inside one tag: `<STEPS>+,-,+</STEPS>` (`+` the step is correct,
`-` it is incorrect). Whitespace around the verdicts is ignored, the tag is matched case-insensitively and the LAST
`<STEPS>` tag of the text wins. A prediction may also be given as a list of 1 / -1. Anything else is invalid:
no tag, an empty or unclosed tag, a verdict other than `+` / `-` (or 1 / -1 in a list), or a verdict count that
differs from the item's step count. An invalid prediction counts as wrong on every scored step of its item
(pipeline/scoring/steps.py).

    parse_steps("... <STEPS>+, -, +</STEPS>", 3)  -> [1, -1, 1]
    parse_steps([1, -1, 1], 3)                   -> [1, -1, 1]
    parse_steps("<STEPS>+,-</STEPS>", 3)          -> None (wrong count)
    format_steps([1, 0, -1])                     -> "<STEPS>+,+,-</STEPS>" (gold answers write neutral steps as +)
"""

from __future__ import annotations

import re

TAG = re.compile(r"<STEPS>(.*?)</STEPS>", re.IGNORECASE | re.DOTALL)
VERDICTS = {"+": 1, "-": -1}


def parse_steps(prediction, num_steps: int) -> list[int] | None:
    """The verdicts (1 / -1 per step) of a prediction (model text or a list), or None when it is invalid."""
    if isinstance(prediction, str):
        tags = TAG.findall(prediction)
        if not tags:
            return None
        verdicts = [VERDICTS.get(v.strip()) for v in tags[-1].split(",")]
    elif isinstance(prediction, (list, tuple)):
        # bool is an int in Python: True / False are not verdicts
        verdicts = [v if type(v) is int and v in (1, -1) else None for v in prediction]
    else:
        return None
    if len(verdicts) != int(num_steps) or any(v is None for v in verdicts):
        return None
    return verdicts


def format_steps(correctness) -> str:
    """The answer text of per-step labels (1 / 0 / -1): `+` for 1 and for neutral 0 (never scored), `-` for -1."""
    return "<STEPS>" + ",".join("-" if int(c) == -1 else "+" for c in correctness) + "</STEPS>"
