"""The response store of an eval run: one JSON line per finished request in `<out>/responses.jsonl`, appended with one
`write` on an O_APPEND descriptor and fsync'd before the next record, so a run stopped at any point (Ctrl-C, kill -9,
a lost machine) keeps every answer it was told about, and at worst a torn last line (cut off on reading, with a
warning). Nothing is ever rewritten or removed but that torn tail.

A record is keyed by (item uid, request hash, identity key):
- the item uid is what the item *is* (the release's `item_uid`, pipeline/release/identity.py), so a rebuilt
  release's unchanged items find their answers whatever their position id (a CircularEval copy: `<uid>.c<k>`);
- the request hash covers everything else the model is shown or asked with (the prompt text, the image hashes, max
  tokens, temperature, seed, image size);
- the identity key covers who answers: the `--model` name, the endpoint's own model id and root (`GET /models`) and
  the base URL's host. The server's `system_fingerprint` is recorded with each answer; a run reuses an answer only
  when it equals the fingerprint the server reports now (run.py).
Only answers (outcome answered, refused, truncated, empty) are reused; a failed item is asked again by the next run.
Records of the store's first format (keyed by item id and model name: their server is unknown) and records longer
than the run's bound (an answer past the body cap) are never reused; each kind is counted and named once.

`predictions.jsonl` / `step_predictions.jsonl` are pure functions of the store and the run's item list (sorted by
item id), so the same command run twice writes the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

from pipeline.core import io

log = logging.getLogger(__name__)
STORE_FILE = "responses.jsonl"
PREDICTIONS_FILE = "predictions.jsonl"
STEP_PREDICTIONS_FILE = "step_predictions.jsonl"
KEY_FIELDS = ("item_uid", "request_hash", "identity_key")
ANSWER_OUTCOMES = frozenset({"answered", "refused", "truncated", "empty"})


def request_hash(params: dict) -> str:
    """sha256 of the request's parameters and content (canonical JSON)."""
    return hashlib.sha256(json.dumps(params, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def key_of(record: dict) -> tuple:
    return tuple(record[k] for k in KEY_FIELDS)


def _lines(path: Path, max_bytes: int):
    """(line number, bytes, terminated, offset after it) of a file, each line read with at most `max_bytes` held in
    memory; a longer line is given as None (skipped to its end in bounded reads)."""
    with open(path, "rb") as fh:
        n = 0
        while True:
            line = fh.readline(max_bytes + 1)
            if not line:
                return
            n += 1
            if len(line) > max_bytes and not line.endswith(b"\n"):
                while line and not line.endswith(b"\n"):
                    line = fh.readline(max_bytes + 1)
                yield n, None, True, fh.tell()
                continue
            yield n, line, line.endswith(b"\n"), fh.tell()


class ResponseStore:
    """Append-only jsonl store. `answers[key]`: the newest answer record of a key; `failed[key]`: the newest failure
    of a key not answered since."""

    def __init__(self, out_dir: Path, max_record_bytes: int = 64 << 20):
        self.path = Path(out_dir) / STORE_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.max_record_bytes = int(max_record_bytes)
        self.answers: dict[tuple, dict] = {}
        self.failed: dict[tuple, dict] = {}
        self.identities: dict[str, dict] = {}  # identity key -> identity, of every record read or written
        self.legacy = self.oversized = 0
        self._load()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def _load(self) -> None:
        if not self.path.is_file():
            return
        size = self.path.stat().st_size
        for n, line, terminated, offset in _lines(self.path, self.max_record_bytes):
            if line is None:
                self.oversized += 1
                continue
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                if not isinstance(rec, dict):
                    raise TypeError("not an object")
            except (json.JSONDecodeError, UnicodeDecodeError, TypeError) as exc:
                if not terminated and offset == size:  # the last line, unterminated: a write cut short by a kill
                    log.warning(
                        "%s:%d: torn last record ignored (the run was stopped while writing it)", self.path.name, n
                    )
                    self._truncate_to(size - len(line))
                    continue
                raise ValueError(f"{self.path}:{n}: not a response record ({exc})") from None
            if not all(isinstance(rec.get(k), str) for k in KEY_FIELDS):
                self.legacy += 1
                continue
            self._index(rec)
        if self.legacy:
            log.warning(
                "%s: %d record(s) of the store's first format (keyed by item id and model name, their server "
                "unknown) are not reused: those items are asked again",
                self.path.name,
                self.legacy,
            )
        if self.oversized:
            log.warning(
                "%s: %d record(s) over %d bytes (an answer past the body cap) are not read: asked again",
                self.path.name,
                self.oversized,
                self.max_record_bytes,
            )

    def _index(self, rec: dict) -> None:
        key = key_of(rec)
        if isinstance(rec.get("identity"), dict):
            self.identities.setdefault(rec["identity_key"], rec["identity"])
        if rec.get("outcome") in ANSWER_OUTCOMES:
            self.answers[key] = rec
            self.failed.pop(key, None)
        else:
            self.failed[key] = rec

    def _truncate_to(self, size: int) -> None:
        with open(self.path, "r+b") as fh:
            fh.truncate(size)
            fh.flush()
            os.fsync(fh.fileno())

    def get(self, key: tuple) -> dict | None:
        return self.answers.get(key)

    def append(self, record: dict) -> None:
        """Write one record durably (one write + fsync) and index it."""
        line = (json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        view = memoryview(line)
        while view:  # os.write on a regular file writes it all at once in practice; loop for the contract
            view = view[os.write(self._fd, view) :]
        os.fsync(self._fd)
        self._index(record)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# what a predictions row carries (a step row names its answer `prediction`, as the step scorer reads it)
PREDICTION_FIELDS = (
    "item_id",
    "item_uid",
    "release",
    "response",
    "outcome",
    "finish_reason",
    "model",
    "model_id",
    "host",
    "system_fingerprint",
    "usage",
    "latency_s",
    "attempts",
    "error",
)


def prediction_row(item_id: str, record: dict | None, model: str, item_uid: str | None = None, release=None) -> dict:
    """One predictions row: the stored answer with its outcome, or the failure (response null, error set: scored
    wrong), or `missing` (not asked: error "not run")."""
    ident = (record or {}).get("identity") or {}
    row = {k: (record or {}).get(k) for k in PREDICTION_FIELDS} | {
        "item_id": item_id,
        "item_uid": item_uid,
        "release": release,
        "model": model,
        "model_id": ident.get("model_id"),
        "host": ident.get("host"),
    }
    if record is None:
        row |= {"outcome": "missing", "attempts": 0, "error": "not run"}
    elif row["outcome"] not in ANSWER_OUTCOMES:
        row["outcome"] = "failed"
    # nested mappings in key order: a record read back from the store (sorted keys) and one just received (the
    # server's order) give the same bytes
    return {k: dict(sorted(v.items())) if isinstance(v, dict) else v for k, v in row.items()}


def write_predictions(out_dir: Path, rows: list[dict], name: str = PREDICTIONS_FILE, answer_field="response") -> Path:
    """A predictions file, sorted by item id, written atomically (`answer_field`: the name of the answer)."""
    path = Path(out_dir) / name
    text = "".join(
        json.dumps(
            {(answer_field if k == "response" else k): r[k] for k in PREDICTION_FIELDS},
            ensure_ascii=False,
            separators=(",", ":"),
        )
        + "\n"
        for r in sorted(rows, key=lambda r: r["item_id"])
    )
    io.atomic_write_text(path, text)
    return path
