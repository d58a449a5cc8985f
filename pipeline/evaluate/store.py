"""The response store of an eval run: one JSON line per finished request in `<out>/responses.jsonl`, appended with one
`write` on an O_APPEND descriptor and fsync'd before the next record, so a run stopped at any point (Ctrl-C, kill -9,
a lost machine) keeps every answer it was told about, and at worst a torn last line (ignored on reading, with a
warning).

A record is keyed by (item id, model, prompt version, request hash); the request hash covers everything else the
model is shown or asked with (the prompt text, the image hashes, max tokens, temperature, seed, image size), so a
changed request is asked again and an unchanged one never is. Only `status: ok` records count as answered: an item
that failed for good is asked again by the next run.

`predictions.jsonl` is a pure function of the store and the run's item list (sorted by item id), so the same command
run twice writes the same bytes.
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
KEY_FIELDS = ("item_id", "model", "prompt_version", "request_hash")


def request_hash(params: dict) -> str:
    """sha256 of the request's parameters and content (canonical JSON)."""
    return hashlib.sha256(json.dumps(params, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def key_of(record: dict) -> tuple:
    return tuple(record[k] for k in KEY_FIELDS)


class ResponseStore:
    """Append-only jsonl store; `answered` maps a key to its `ok` record (the last one when a key was written twice)."""

    def __init__(self, out_dir: Path):
        self.path = Path(out_dir) / STORE_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.answered: dict[tuple, dict] = {}
        self.failed: dict[tuple, dict] = {}
        self._load()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def _load(self) -> None:
        if not self.path.is_file():
            return
        data = self.path.read_bytes()
        lines = data.split(b"\n")
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                key = key_of(rec)
            except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as exc:
                if n == len(lines):  # the last line, unterminated: a write cut short by a kill
                    log.warning(
                        "%s:%d: torn last record ignored (the run was stopped while writing it)", self.path.name, n
                    )
                    self._truncate_to(len(data) - len(line))
                    continue
                raise ValueError(f"{self.path}:{n}: not a response record ({exc})") from None
            if rec.get("status") == "ok":
                self.answered[key] = rec
                self.failed.pop(key, None)
            else:
                self.failed[key] = rec

    def _truncate_to(self, size: int) -> None:
        with open(self.path, "r+b") as fh:
            fh.truncate(size)
            fh.flush()
            os.fsync(fh.fileno())

    def get(self, key: tuple) -> dict | None:
        return self.answered.get(key)

    def append(self, record: dict) -> None:
        """Write one record durably (one write + fsync) and index it."""
        line = (json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        view = memoryview(line)
        while view:  # os.write on a regular file writes it all at once in practice; loop for the contract
            view = view[os.write(self._fd, view) :]
        os.fsync(self._fd)
        key = key_of(record)
        if record.get("status") == "ok":
            self.answered[key] = record
            self.failed.pop(key, None)
        else:
            self.failed[key] = record

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


PREDICTION_FIELDS = ("item_id", "response", "model", "usage", "latency_s", "attempts", "error")


def prediction_row(item_id: str, record: dict | None, model: str) -> dict:
    """One predictions.jsonl row: the stored answer, or the failure (response null, error set: scored wrong)."""
    if record is None:
        return {
            "item_id": item_id,
            "response": None,
            "model": model,
            "usage": None,
            "latency_s": None,
            "attempts": 0,
            "error": "not run",
        }
    row = {k: record.get(k) for k in PREDICTION_FIELDS} | {"item_id": item_id, "model": model}
    # nested mappings in key order: a record read back from the store (sorted keys) and one just received (the
    # server's order) give the same bytes
    return {k: dict(sorted(v.items())) if isinstance(v, dict) else v for k, v in row.items()}


def write_predictions(out_dir: Path, rows: list[dict]) -> Path:
    """predictions.jsonl, sorted by item id, written atomically."""
    path = Path(out_dir) / PREDICTIONS_FILE
    text = "".join(
        json.dumps({k: r[k] for k in PREDICTION_FIELDS}, ensure_ascii=False, separators=(",", ":")) + "\n"
        for r in sorted(rows, key=lambda r: r["item_id"])
    )
    io.atomic_write_text(path, text)
    return path
