"""JSON text computed by polars (pipeline/core/io.py `compact_json_column`, `jsonl_bytes`) is the text json.dumps gives: the
release's JSON cells and jsonl mirrors are built that way and must not change by a byte."""

from __future__ import annotations

import json

import polars as pl

from pipeline.core import io

# every code point but the surrogates, cut into strings of 300 (the control characters, quotes, backslashes, DEL,
# U+2028/2029 and the astral planes among them)
_CHARS = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
STRINGS = ["".join(_CHARS[i : i + 300]) for i in range(0, len(_CHARS), 300)] + ["", 'a"b\\c', "\x00\x1f\x7f\u2028"]


def _python_jsonl(df: pl.DataFrame) -> bytes:
    rows = df.iter_rows(named=True)
    return "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in rows).encode("utf-8")


def test_compact_json_column_is_compact_json():
    n = len(STRINGS)
    df = pl.DataFrame(
        {
            "s": STRINGS,
            "ints": [[i, -i, 2**63 - 1, -(2**63), 0] if i % 4 else [] for i in range(n)],
            "labels": [
                None if i % 5 == 0 else ([] if i % 7 == 0 else [STRINGS[i], None, STRINGS[(i + 1) % n]])
                for i in range(n)
            ],
            "flag": [None if i % 3 == 0 else i % 2 == 0 for i in range(n)],
        },
        schema={"s": pl.String, "ints": pl.List(pl.Int64), "labels": pl.List(pl.String), "flag": pl.Boolean},
    )
    got = df.select(
        *(io.compact_json_column(pl.col(c)).alias(c) for c in df.columns),
        io.compact_json_column(pl.struct("flag", "ints", "labels", "s")).alias("struct"),  # fields in sorted order
    )
    for c in df.columns:
        assert got[c].to_list() == [None if v is None else io.compact_json(v) for v in df[c].to_list()], c
    assert got["struct"].to_list() == [io.compact_json(r) for r in df.iter_rows(named=True)]


def test_jsonl_bytes_are_json_dumps_per_row():
    n = len(STRINGS)
    plain = pl.DataFrame(
        {
            "s": STRINGS,
            "i": [(-1) ** i * (2**63 - 1 - i) for i in range(n)],
            "u": list(range(n)),
            "b": [i % 3 == 0 for i in range(n)],
            "null_s": [None if i % 2 else "x" for i in range(n)],
        },
        schema={"s": pl.String, "i": pl.Int64, "u": pl.UInt32, "b": pl.Boolean, "null_s": pl.String},
    )
    assert io.jsonl_bytes(plain) == _python_jsonl(plain)
    # floats are spelled differently by polars (1e-07 vs 1e-7): such a table goes row by row
    floats = pl.DataFrame({"x": [1e-07, 0.1, 240.0, None], "s": ["a", None, "\u2028", "é"]})
    assert io.jsonl_bytes(floats) == _python_jsonl(floats)
    assert b'"x":1e-07' in io.jsonl_bytes(floats)
    assert io.jsonl_bytes(plain.clear()) == b""
