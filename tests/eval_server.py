"""A local OpenAI-compatible chat-completions server for the eval tests and bench/bench_eval.py.

It binds 127.0.0.1 port 0 (ThreadingHTTPServer, one thread per request) and checks every request against the release:
the images decode (Pillow, not the runner's OpenCV) and hash (the documented pixel sha256, computed here) to the
item's image_hashes_json in order, their count is the item's, the text is the prompt the release's lmms-eval export
carries for that item, the model name and the API key are the expected ones. A request that fails a check is answered
400 and its reason kept in `problems`. It answers `<ANSWER>X</ANSWER>` (the right letter for two items in three),
and injects faults on purpose, per item and attempt: "429" (with Retry-After), "500", "bad_json" (a 200 that is not
JSON), "stall" (no answer until the client gives up and closes the connection), "drop" (connection closed without a
response), "400" (a final refusal).

It counts requests in flight (a stalled request counts until its client closes the connection) and their maximum.
`hold_after=N`: once N requests were answered, later ones wait until `release()`. `wait_for_in_flight=N`: requests after
the first answered one (the runner's preflight goes alone) wait (up to `wait_limit_s`) until N are in flight at once,
the first time only: a client that never reaches N is slowed down, never failed by the clock.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import select
import socket
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import polars as pl
from PIL import Image


def pixel_sha256(rgb: np.ndarray) -> str:
    """docs: sha256("<height>x<width>x3|uint8|" + RGB pixel bytes)."""
    h = hashlib.sha256(f"{rgb.shape[0]}x{rgb.shape[1]}x3|uint8|".encode())
    h.update(np.ascontiguousarray(rgb, dtype=np.uint8).tobytes())
    return h.hexdigest()


def release_expectations(release: Path) -> dict[tuple, dict]:
    """(prompt, image hashes) -> {item_id, answer, n} for every eval item of every level, from the release's files:
    the hashes and answers of the eval tables, the prompts of the lmms-eval export. That export holds the main (L1)
    eval file only; the L2/L3 items' prompts are made by the function the exports made it with
    (pipeline/exports/common.py `prompt`), which must give the export's text for every L1 item."""
    from pipeline.settings.config import load_settings
    from pipeline.exports.common import prompt as release_prompt

    cfg = load_settings()
    prompts = {}
    for path in sorted((release / "exports" / "lmms-eval").rglob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if "prompt" in row and "item_id" in row:
                prompts[row["item_id"]] = row["prompt"]
    out = {}
    for path in sorted((release / "splits").glob("processbench_eval*.parquet")):
        for r in pl.read_parquet(path).iter_rows(named=True):
            made = release_prompt(r, cfg)
            if prompts.setdefault(r["item_id"], made) != made:
                raise AssertionError(f"{r['item_id']}: the export's prompt is not what exports.common.prompt makes")
            hashes = tuple(json.loads(r["image_hashes_json"]))
            out[(prompts.get(r["item_id"]), hashes)] = {
                "item_id": r["item_id"],
                "answer": r["answer"],
                "n": int(r["num_choices"]),
            }
    return out


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # listen backlog (socketserver's default 5 resets connections at --concurrency 64)

    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return  # a client that gave up on a request (timeout, kill): expected here
        super().handle_error(request, client_address)


class FakeOpenAI:
    def __init__(
        self,
        release: Path,
        model: str = "test-model",
        api_key: str | None = None,
        faults: dict[str, list[str]] | None = None,
        retry_after: str = "1",
        hold_after: int | None = None,
        wait_for_in_flight: int | None = None,
        wait_limit_s: float = 20.0,
        check_pixels: bool = True,
    ):
        self.expect = release_expectations(Path(release))
        self.by_hashes = {k[1]: v for k, v in self.expect.items()}
        self.model, self.api_key, self.faults = model, api_key, dict(faults or {})
        self.retry_after, self.hold_after = retry_after, hold_after
        self.wait_for_in_flight, self.wait_limit_s, self.check_pixels = wait_for_in_flight, wait_limit_s, check_pixels
        self.lock = threading.Condition()
        self.in_flight = self.max_in_flight = self.answered = self.admitted = 0
        self.reached = False
        self.asked: list[str] = []  # item id per request, in arrival order
        self.times: dict[str, list[float]] = {}  # arrival times per item
        self.problems: list[str] = []
        self._released = threading.Event()
        self._stopping = threading.Event()
        self.httpd = _Server(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self._stopping.set()
        self._released.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def release(self) -> None:
        self._released.set()

    # ---------------------------------------------------------------------------------------------- the checks

    def identify(self, body: dict, headers) -> tuple[dict | None, str | None]:
        """(the item, None) or (None, the reason the request is wrong)."""
        if self.api_key is not None and headers.get("Authorization") != f"Bearer {self.api_key}":
            return None, "401"
        if body.get("model") != self.model:
            return None, f"model {body.get('model')!r}, expected {self.model!r}"
        msgs = body.get("messages")
        if not isinstance(msgs, list) or len(msgs) != 1 or msgs[0].get("role") != "user":
            return None, "expected one user message"
        content = msgs[0].get("content")
        imgs = [c for c in content if c.get("type") == "image_url"]
        texts = [c for c in content if c.get("type") == "text"]
        if len(texts) != 1 or content[-1].get("type") != "text":
            return None, "expected the images, then one text part"
        if not self.check_pixels:  # the bench: a well-formed request is enough, answered at once
            return {"item_id": f"anon{len(imgs)}_{zlib.crc32(texts[0]['text'].encode())}", "answer": "A", "n": 4}, None
        hashes = []
        for k, part in enumerate(imgs):
            url = part["image_url"]["url"]
            head, _, b64 = url.partition(",")
            if head != "data:image/png;base64":
                return None, f"image {k}: not a PNG data URL"
            try:
                rgb = np.asarray(Image.open(io.BytesIO(base64.b64decode(b64, validate=True))).convert("RGB"))
            except Exception as exc:  # noqa: BLE001 - any decoder failure is the client's bad image, answered as such
                return None, f"image {k}: cannot be decoded ({exc})"
            hashes.append(pixel_sha256(rgb))
        item = self.by_hashes.get(tuple(hashes))
        if item is None:
            return None, f"{len(hashes)} images that match no eval item's images (order, count or pixels)"
        if (texts[0]["text"], tuple(hashes)) not in self.expect:
            return None, f"item {item['item_id']}: the prompt is not the release's"
        return item, None

    # ---------------------------------------------------------------------------------------------- the handler

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms delayed-ACK stall

            def log_message(self, *args):
                pass

            def _send(self, status: int, body: bytes, extra: dict | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in (extra or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def _client_gone(self) -> bool:
                r, _, _ = select.select([self.connection], [], [], 0.05)
                if not r:
                    return False
                try:
                    return self.connection.recv(1, socket.MSG_PEEK) == b""
                except OSError:
                    return True

            def _wait_until(self, done) -> bool:
                """Wait for done() while the client is connected; False when the client left."""
                while not done():
                    if self._client_gone() or server._stopping.is_set():
                        return False
                return True

            def do_POST(self):
                with server.lock:
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    server.lock.notify_all()
                try:
                    self._post()
                finally:
                    with server.lock:
                        server.in_flight -= 1

            def _post(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path != "/v1/chat/completions":
                    return self._send(404, b'{"error":{"message":"no such route"}}')
                try:
                    body = json.loads(raw)
                except json.JSONDecodeError:
                    return self._send(400, b'{"error":{"message":"request is not JSON"}}')
                item, problem = server.identify(body, self.headers)
                if problem == "401":
                    return self._send(401, b'{"error":{"message":"invalid api key"}}')
                if problem:
                    with server.lock:
                        server.problems.append(problem)
                    return self._send(400, json.dumps({"error": {"message": problem}}).encode())
                iid = item["item_id"]
                with server.lock:
                    attempt = server.asked.count(iid)
                    server.asked.append(iid)
                    server.times.setdefault(iid, []).append(time.monotonic())
                faults = server.faults.get(iid, [])
                fault = faults[attempt] if attempt < len(faults) else "ok"
                if fault == "429":
                    return self._send(429, b'{"error":{"message":"rate limited"}}', {"Retry-After": server.retry_after})
                if fault == "500":
                    return self._send(500, b'{"error":{"message":"internal error"}}')
                if fault == "400":
                    return self._send(400, b'{"error":{"message":"this model does not accept images"}}')
                if fault == "bad_json":
                    return self._send(200, b'{"choices": [{"message": {"content": "<ANSW')
                if fault == "drop":
                    self.close_connection = True
                    return
                if fault == "stall":
                    self._wait_until(lambda: False)
                    self.close_connection = True
                    return
                if server.wait_for_in_flight and not server.reached and server.answered:  # the preflight goes alone
                    deadline = time.monotonic() + server.wait_limit_s
                    if not self._wait_until(
                        lambda: server.max_in_flight >= server.wait_for_in_flight or time.monotonic() > deadline
                    ):
                        self.close_connection = True
                        return
                    server.reached = True
                with server.lock:  # decided under the lock: exactly hold_after requests pass before release()
                    hold = server.hold_after is not None and server.admitted >= server.hold_after
                    server.admitted += 0 if hold else 1
                if hold:
                    if not self._wait_until(server._released.is_set):
                        self.close_connection = True
                        return
                letters = "ABCDEF"[: item["n"]]
                right = zlib.crc32(iid.encode()) % 3 != 0
                letter = item["answer"] if right else letters[(letters.index(item["answer"]) + 1) % len(letters)]
                text = f"The frames suggest option {letter}.\n<ANSWER>{letter}</ANSWER>"
                out = {
                    "id": f"cmpl-{iid}",
                    "object": "chat.completion",
                    "model": server.model,
                    "choices": [
                        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
                    ],
                    "usage": {
                        "prompt_tokens": 100 + len(raw) // 1000,
                        "completion_tokens": 12,
                        "total_tokens": 112 + len(raw) // 1000,
                    },
                }
                with server.lock:
                    server.answered += 1
                self._send(200, json.dumps(out).encode())

        return Handler
