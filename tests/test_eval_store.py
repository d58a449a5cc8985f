"""pipeline/evaluate/ pieces without a server: the response store (torn last line, corrupt record, failed vs answered,
keys, records of the first format, over-long records), predictions order, Retry-After parsing, backoff bounds, the
completion parser and the outcomes, the bounded body reader (Content-Length, endless, gzip bomb), the step item's
interleaved user turn."""

from __future__ import annotations

import email.utils
import json
import random
import time

import httpx
import pytest

from pipeline.evaluate.client import (
    Retry,
    TooLarge,
    backoff_s,
    content_parts,
    outcome_of,
    parse_completion,
    read_capped,
    retry_after_s,
)
from pipeline.evaluate.items import EvalItem
from pipeline.evaluate.options import ClientOptions
from pipeline.evaluate.store import STORE_FILE, ResponseStore, prediction_row, request_hash, write_predictions


def _rec(item_id: str, status: str = "ok", **kw) -> dict:
    ok = status == "ok"
    return {
        "item_id": item_id,
        "item_uid": f"uid-{item_id}",
        "identity_key": "i",
        "identity": {"model": "m", "model_id": "m", "model_root": None, "host": "h:1"},
        "model": "m",
        "prompt_version": "v",
        "request_hash": "h",
        "outcome": "answered" if ok else "failed",
        "response": f"<ANSWER>A</ANSWER> {item_id}" if ok else None,
        "usage": None,
        "latency_s": 0.1,
        "attempts": 1,
        "error": None if ok else "HTTP 500",
        **kw,
    }


def test_store_keeps_answers_and_ignores_a_torn_last_line(tmp_path):
    with ResponseStore(tmp_path) as s:
        s.append(_rec("a"))
        s.append(_rec("b", "failed"))
    path = tmp_path / STORE_FILE
    with open(path, "ab") as fh:
        fh.write(b'{"item_id": "c", "model": "m", "prompt_ver')  # kill -9 in the middle of a write
    with ResponseStore(tmp_path) as s:
        assert set(k[0] for k in s.answers) == {"uid-a"} and set(k[0] for k in s.failed) == {"uid-b"}
        s.append(_rec("b"))  # answered on the next run
        assert ("uid-b", "h", "i") in s.answers and not s.failed
    lines = path.read_text().splitlines()
    assert len(lines) == 3 and all(json.loads(x) for x in lines)  # the torn tail was cut, the new record whole


def test_store_refuses_a_corrupt_record_inside(tmp_path):
    (tmp_path / STORE_FILE).write_text(json.dumps(_rec("a")) + "\n{broken\n" + json.dumps(_rec("b")) + "\n")
    with pytest.raises(ValueError, match=r"responses.jsonl:2"):
        ResponseStore(tmp_path)


def test_store_skips_first_format_and_over_long_records(tmp_path, caplog):
    legacy = {"item_id": "x", "model": "m", "prompt_version": "v", "request_hash": "h", "status": "ok", "response": "A"}
    big = _rec("big", response="A" * 5000)
    lines = [json.dumps(legacy), json.dumps(big), json.dumps(_rec("a"))]
    (tmp_path / STORE_FILE).write_text("\n".join(lines) + "\n")
    with ResponseStore(tmp_path, max_record_bytes=2000) as s:
        assert set(k[0] for k in s.answers) == {"uid-a"}  # neither the first-format nor the over-long record
        assert s.legacy == 1 and s.oversized == 1
    assert "first format" in caplog.text and "over 2000 bytes" in caplog.text
    assert (tmp_path / STORE_FILE).read_text().count("\n") == 3  # nothing is removed from the store


def test_key_changes_with_any_request_parameter():
    base = {"prompt_sha256": "p", "images": ["x"], "max_tokens": 10, "temperature": 0.0, "seed": None}
    assert request_hash(base) == request_hash(dict(reversed(list(base.items()))))
    for k, v in (("max_tokens", 11), ("temperature", 0.5), ("seed", 1), ("images", ["y"]), ("prompt_sha256", "q")):
        assert request_hash(base | {k: v}) != request_hash(base)


def test_prediction_bytes_do_not_depend_on_the_servers_key_order(tmp_path):
    fresh = _rec("a", usage={"prompt_tokens": 5, "completion_tokens": 2})
    stored = json.loads(json.dumps(fresh, sort_keys=True))
    assert (
        write_predictions(tmp_path / "1", [prediction_row("a", fresh, "m")]).read_bytes()
        == write_predictions(tmp_path / "2", [prediction_row("a", stored, "m")]).read_bytes()
    )


def test_predictions_sorted_and_failures_scored_as_no_answer(tmp_path):
    rows = [
        prediction_row("z", _rec("z"), "m", "uid-z", "rel"),
        prediction_row("a", None, "m", "uid-a", "rel"),
        prediction_row("k", _rec("k", "failed"), "m", "uid-k", "rel"),
    ]
    text = write_predictions(tmp_path, rows).read_text()
    got = [json.loads(x) for x in text.splitlines()]
    assert [r["item_id"] for r in got] == ["a", "k", "z"]
    assert got[0]["response"] is None and got[0]["error"] == "not run" and got[0]["outcome"] == "missing"
    assert got[1]["response"] is None and got[1]["error"] == "HTTP 500" and got[1]["outcome"] == "failed"
    assert got[2]["outcome"] == "answered" and got[2]["item_uid"] == "uid-z" and got[2]["release"] == "rel"
    assert got[2]["host"] == "h:1" and got[2]["model_id"] == "m"
    steps = write_predictions(tmp_path, rows, "s.jsonl", "prediction").read_text()
    assert all("prediction" in json.loads(x) and "response" not in json.loads(x) for x in steps.splitlines())


def test_retry_after_and_backoff():
    assert retry_after_s("3") == 3.0 and retry_after_s(None) is None and retry_after_s("soon") is None
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= retry_after_s(later) <= 31
    opts = ClientOptions(backoff_s=1.0, backoff_max_s=8.0, retry_after_max_s=20.0)
    rng = random.Random(0)
    for n in range(6):
        d = backoff_s(n, opts, None, rng)
        cap = min(8.0, 2**n)
        assert cap / 2 <= d <= cap
    assert backoff_s(0, opts, 5.0, rng) >= 5.0  # Retry-After wins over a shorter backoff
    assert backoff_s(0, opts, 3600.0, rng) == 20.0  # ... up to its cap


def _body(obj) -> bytes:
    return json.dumps(obj).encode()


def test_parse_completion_and_outcomes():
    ok = _body(
        {
            "choices": [{"message": {"content": "<ANSWER>B</ANSWER>"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7, "x": 1},
            "system_fingerprint": "fp_1",
            "model": "served",
        }
    )
    c = parse_completion(ok)
    assert (c.text, c.usage, c.finish_reason, c.system_fingerprint, c.served_model) == (
        "<ANSWER>B</ANSWER>",
        {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
        "stop",
        "fp_1",
        "served",
    )
    assert outcome_of(c) == "answered"
    for bad in (b"{not json", b'{"choices": []}', b'{"error": "x"}', b"[]", b'{"choices": [{"message": null}]}'):
        with pytest.raises(Retry, match="malformed"):
            parse_completion(bad)

    def outcome(message: dict, finish="stop") -> str:
        return outcome_of(parse_completion(_body({"choices": [{"message": message, "finish_reason": finish}]})))

    assert outcome({"content": "<ANSWER>A</ANSWER>"}, "content_filter") == "refused"
    assert outcome({"content": None, "refusal": "I can't."}) == "refused"
    assert outcome({"content": "The frames"}, "length") == "truncated"
    assert outcome({"content": "  "}) == "empty" and outcome({}) == "empty"
    # a server's garbage: usage counts that are not counts, a lone surrogate in the text
    c = parse_completion(b'{"choices":[{"message":{"content":"a \\ud800 b"}}],"usage":{"prompt_tokens":"x"}}')
    assert c.usage is None and c.text.encode("utf-8")


class _Stream(httpx.AsyncByteStream):
    def __init__(self, chunks):
        self.chunks = chunks

    async def __aiter__(self):
        for c in self.chunks:
            yield c


def _read(chunks, cap, headers=None, strict=True) -> bytes:
    import asyncio

    resp = httpx.Response(200, headers=headers or {}, stream=_Stream(chunks))
    return asyncio.run(read_capped(resp, cap, strict))


def test_body_reader_stops_at_the_cap():
    import gzip
    import itertools

    assert _read([b"ab", b"cd"], 10) == b"abcd"
    with pytest.raises(TooLarge, match="announced"):  # refused before a byte is read
        _read([b"x"], 10, {"content-length": str(300 << 20)})
    endless = (b"A" * 4096 for _ in itertools.count())  # a generator that never ends: read until the cap
    with pytest.raises(TooLarge, match="cut off"):
        _read(endless, 100_000)
    bomb = gzip.compress(b"A" * (50 << 20))  # 50 KB that inflate to 50 MB
    with pytest.raises(TooLarge):
        _read([bomb], 100_000, {"content-encoding": "gzip"})
    assert _read([gzip.compress(b"hello")], 100, {"content-encoding": "gzip"}) == b"hello"
    assert _read([b"x" * 500], 100, strict=False) == b"x" * 100  # an error body: its head is enough


def test_step_item_images_stand_at_their_tags():
    item = EvalItem(
        "s1",
        "L1",
        "T13",
        "gm100",
        "Goal.\nStep 1: <image><image> opens\nStep 2: <image> closes\nAnswer.",
        ("a", "b", "c"),
        None,
        "v",
        "steps",
        None,
        2,
    )
    parts = content_parts(item, ["u0", "u1", "u2"])
    kinds = [p["type"] if p["type"] == "text" else p["image_url"]["url"] for p in parts]
    assert kinds == ["text", "u0", "u1", "text", "u2", "text"]
    joined = "".join(p["text"] if p["type"] == "text" else "<image>" for p in parts)
    assert joined == item.prompt
    with pytest.raises(ValueError, match="tags"):
        content_parts(item, ["u0"])
    mcq = EvalItem("m1", "L1", "T1", "gm100", "Q?", ("a",), None, "v")
    assert [p["type"] for p in content_parts(mcq, ["u0"])] == ["image_url", "text"]
