"""pipeline/evaluate/ pieces without a server: the response store (torn last line, corrupt record, failed vs ok,
keys), predictions order, Retry-After parsing, backoff bounds, the completion parser."""

from __future__ import annotations

import email.utils
import json
import random
import time

import httpx
import pytest

from pipeline.evaluate.client import Retry, backoff_s, parse_completion, retry_after_s
from pipeline.evaluate.options import ClientOptions
from pipeline.evaluate.store import STORE_FILE, ResponseStore, prediction_row, request_hash, write_predictions


def _rec(item_id: str, status: str = "ok", **kw) -> dict:
    return {
        "item_id": item_id,
        "model": "m",
        "prompt_version": "v",
        "request_hash": "h",
        "status": status,
        "response": f"<ANSWER>A</ANSWER> {item_id}" if status == "ok" else None,
        "usage": None,
        "latency_s": 0.1,
        "attempts": 1,
        "error": None if status == "ok" else "HTTP 500",
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
        assert set(k[0] for k in s.answered) == {"a"} and set(k[0] for k in s.failed) == {"b"}
        s.append(_rec("b"))  # answered on the next run: ok now
        assert ("b", "m", "v", "h") in s.answered and not s.failed
    lines = path.read_text().splitlines()
    assert len(lines) == 3 and all(json.loads(x) for x in lines)  # the torn tail was cut, the new record whole


def test_store_refuses_a_corrupt_record_inside(tmp_path):
    (tmp_path / STORE_FILE).write_text(json.dumps(_rec("a")) + "\n{broken\n" + json.dumps(_rec("b")) + "\n")
    with pytest.raises(ValueError, match=r"responses.jsonl:2"):
        ResponseStore(tmp_path)


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
        prediction_row("z", _rec("z"), "m"),
        prediction_row("a", None, "m"),
        prediction_row("k", _rec("k", "failed"), "m"),
    ]
    text = write_predictions(tmp_path, rows).read_text()
    got = [json.loads(x) for x in text.splitlines()]
    assert [r["item_id"] for r in got] == ["a", "k", "z"]
    assert got[0]["response"] is None and got[0]["error"] == "not run"
    assert got[1]["response"] is None and got[1]["error"] == "HTTP 500"
    assert list(got[2]) == ["item_id", "response", "model", "usage", "latency_s", "attempts", "error"]


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


def test_parse_completion():
    ok = httpx.Response(
        200,
        json={
            "choices": [{"message": {"content": "<ANSWER>B</ANSWER>"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7, "x": 1},
        },
    )
    assert parse_completion(ok) == (
        "<ANSWER>B</ANSWER>",
        {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
        "stop",
    )
    for bad in (b"{not json", b'{"choices": []}', b'{"error": "x"}', b"[]"):
        with pytest.raises(Retry, match="malformed"):
            parse_completion(httpx.Response(200, content=bad))
