"""The T13 step answer parser (pipeline/steps/parse.py): tag, list, whitespace, count and symbol edge cases."""

from __future__ import annotations

import pytest

from pipeline.steps.parse import format_steps, parse_steps


@pytest.mark.parametrize(
    "prediction,n,want",
    [
        ("<STEPS>+,-,+</STEPS>", 3, [1, -1, 1]),
        ("I think so. <STEPS> + , - ,+ </STEPS> done", 3, [1, -1, 1]),  # whitespace around verdicts
        ("<steps>\n+,\n-\n</steps>", 2, [1, -1]),  # case, newlines
        ("<STEPS>-,-</STEPS> no wait <STEPS>+,+</STEPS>", 2, [1, 1]),  # the last tag wins
        ("<STEPS>+,+,+</STEPS> then <STEPS>+,-</STEPS>", 3, None),  # the last tag has the wrong count
        ("<STEPS>+,-</STEPS>", 3, None),  # too few
        ("<STEPS>+,-,+,+</STEPS>", 3, None),  # too many
        ("+,-,+", 3, None),  # no tag
        ("<STEPS>+,-,+", 3, None),  # unclosed
        ("<STEPS></STEPS>", 1, None),  # empty
        ("<STEPS>+,0,+</STEPS>", 3, None),  # other symbols
        ("<STEPS>+,x,+</STEPS>", 3, None),
        ("<STEPS>1,-1,1</STEPS>", 3, None),
        ("<STEPS>++,-</STEPS>", 2, None),
        ("<STEPS>+;-</STEPS>", 2, None),
        ("<STEPS>+,,-</STEPS>", 2, None),
        ([1, -1, 1], 3, [1, -1, 1]),  # a list
        ((1, 1), 2, [1, 1]),
        ([1, -1], 3, None),  # wrong count
        ([1, 0, 1], 3, None),
        ([1, 2, 1], 3, None),
        ([True, False], 2, None),  # not 1 / -1
        (["+", "-"], 2, None),
        ([1.0, -1.0], 2, None),
        (None, 2, None),
        (5, 1, None),
        ({"steps": [1]}, 1, None),
    ],
)
def test_parse_steps(prediction, n, want):
    assert parse_steps(prediction, n) == want


def test_format_round_trips_and_writes_neutral_as_plus():
    assert format_steps([1, 0, -1]) == "<STEPS>+,+,-</STEPS>"
    assert parse_steps(format_steps([1, -1, -1, 1]), 4) == [1, -1, -1, 1]
