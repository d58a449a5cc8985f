"""A local OpenAI-compatible chat-completions server for the eval tests and bench/bench_eval.py.

It binds 127.0.0.1 port 0 (ThreadingHTTPServer, one thread per request) and checks every request against the release:
the images decode (Pillow, not the runner's OpenCV) and hash (the documented pixel sha256, computed here) to the
item's image_hashes_json in order, their count is the item's, the text is the prompt the release's lmms-eval export
carries for that item (a step item: the text parts joined with `<image>` where each image stands are the step row's
own prompt), the model name and the API key are the expected ones. A request that fails a check is answered 400 and
its reason kept in `problems`. It answers a multiple-choice item `<ANSWER>X</ANSWER>` (the right letter for two items
in three, or the letter `table[item_id]` gives), a step item its gold `<STEPS>` answer (`steps="plus"`: `+` for
every step). `GET /v1/models` lists `models` (default: the model, with `root`); every completion carries
`fingerprint` as its system_fingerprint when set. The runner's probes (PROBE_TEXT, alone or after one image) are
answered OK and kept in `probes`; `probe_faults={"text"|"image": fault}` makes them fail.

Faults, per item and attempt: "429" (with Retry-After), "500", "bad_json" (a 200 that is not JSON), "stall" (no answer
until the client gives up and closes the connection), "drop" (connection closed without a response), "400" and "413"
(final refusals with a message), "refusal" (finish_reason content_filter, no text), "refusal_field" (the message's
`refusal`), "empty" (no content), "length" (finish_reason length, text cut short), "endless" (a chunked body that never
ends), "huge" (a Content-Length of 300 MB, then bytes until the client leaves), "drip" (a byte at a time, slowly),
"surrogate" (text with a lone surrogate escape and usage counts that are strings).

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


PROBE_TEXT = (
    "Reply with the single word OK."  # pipeline/evaluate/run.py PROBE_TEXT (kept apart: the server is independent)
)


def step_expectations(release: Path) -> dict[tuple, dict]:
    """image hashes -> {item_id, prompt, answer, n_steps, n_images} of every step eval item (every level)."""
    out = {}
    for path in sorted((release / "splits").glob("processbench_steps_eval*.parquet")):
        for r in pl.read_parquet(path).iter_rows(named=True):
            out[tuple(json.loads(r["image_hashes_json"]))] = {
                "item_id": r["item_id"],
                "prompt": r["prompt"],
                "answer": r["answer"],
                "n_steps": int(r["num_steps"]),
                "n_images": len(r["image"]),
                "steps": True,
            }
    return out


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
        models: list[dict] | None | str = "default",
        fingerprint: str | None = None,
        probe_faults: dict[str, str] | None = None,
        probe_ok_first: int = 0,
        table: dict[str, str] | None = None,
        steps: str = "gold",
        also: list[Path] = (),
    ):
        self.expect, self.step_expect = {}, {}
        for rel in [release, *also]:  # `also`: releases whose items the server answers too (a rebuild's)
            self.expect |= release_expectations(Path(rel))
            self.step_expect |= step_expectations(Path(rel))
        self.by_hashes = {k[1]: v for k, v in self.expect.items()}
        self.models = [{"id": model, "object": "model", "root": f"/models/{model}"}] if models == "default" else models
        self.fingerprint, self.probe_faults = fingerprint, dict(probe_faults or {})
        self.probe_ok_first = probe_ok_first  # the first N probes are answered whatever probe_faults say
        self.table, self.steps_mode = table, steps
        self.probes: list[str] = []  # "text" / "image" per probe request, in arrival order
        self.model_lists = 0
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

    def completion(self, iid: str, text: str | None, finish: str, request_bytes: int = 0) -> dict:
        out = {
            "id": f"cmpl-{iid}",
            "object": "chat.completion",
            "model": self.model,
            "choices": [{"index": 0, "finish_reason": finish, "message": {"role": "assistant", "content": text}}],
            "usage": {
                "prompt_tokens": 100 + request_bytes // 1000,
                "completion_tokens": 12,
                "total_tokens": 112 + request_bytes // 1000,
            },
        }
        if self.fingerprint is not None:
            out["system_fingerprint"] = self.fingerprint
        return out

    def item_requests(self) -> list[str]:
        """`asked` without the probes: the items asked, in arrival order."""
        return list(self.asked)

    # ---------------------------------------------------------------------------------------------- the checks

    def identify(self, body: dict, headers) -> tuple[dict | None, str | None]:
        """(the item, None) or (None, the reason the request is wrong). A probe is the item {"probe": kind}."""
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
        if not texts or content[-1].get("type") != "text":
            return None, "expected the text last"
        if len(texts) == 1 and texts[0]["text"] == PROBE_TEXT and len(imgs) <= 1:
            return {"probe": "image" if imgs else "text"}, None
        if not self.check_pixels:  # the bench: a well-formed request is enough, answered at once
            if len(texts) != 1:
                return {
                    "item_id": f"steps{len(imgs)}_{zlib.crc32(texts[0]['text'].encode())}",
                    "steps": True,
                    "answer": "<STEPS>+</STEPS>",
                    "n_steps": 1,
                }, None
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
        step = self.step_expect.get(tuple(hashes))
        if step is not None:
            joined = "".join(c["text"] if c.get("type") == "text" else "<image>" for c in content)
            if len(imgs) != step["n_images"]:
                return None, f"step item {step['item_id']}: {len(imgs)} images, expected {step['n_images']}"
            if joined != step["prompt"]:
                return (
                    None,
                    f"step item {step['item_id']}: the prompt (images at their <image> tags) is not the release's",
                )
            return step, None
        if len(texts) != 1 or any(c.get("type") != "image_url" for c in content[:-1]):
            return None, "expected the images, then one text part"
        item = self.by_hashes.get(tuple(hashes))
        if item is None:
            return None, f"{len(hashes)} images that match no eval item's images (order, count or pixels)"
        if (texts[0]["text"], tuple(hashes)) not in self.expect:
            return None, f"item {item['item_id']}: the prompt is not the release's"
        return item, None

    def answer_text(self, item: dict) -> str:
        iid = item["item_id"]
        if item.get("steps"):
            if self.steps_mode == "plus":
                return "<STEPS>" + ",".join("+" * item["n_steps"]) + "</STEPS>"
            return f"Checked each step.\n{item['answer']}"
        if self.table is not None:
            letter = self.table.get(iid, "Z")
        else:
            letters = "ABCDEF"[: item["n"]]
            right = zlib.crc32(iid.encode()) % 3 != 0
            letter = item["answer"] if right else letters[(letters.index(item["answer"]) + 1) % len(letters)]
        return f"The frames suggest option {letter}.\n<ANSWER>{letter}</ANSWER>"

    # ---------------------------------------------------------------------------------------------- the handler

    def _handler(self):
        return type("Handler", (_Handler,), {"fake": self})


class _Handler(BaseHTTPRequestHandler):
    fake: FakeOpenAI  # set per server (FakeOpenAI._handler)

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
            if self._client_gone() or self.fake._stopping.is_set():
                return False
        return True

    def do_GET(self):
        if self.path != "/v1/models" or self.fake.models is None:
            return self._send(404, b'{"error":{"message":"no such route"}}')
        if self.fake.api_key is not None and self.headers.get("Authorization") != f"Bearer {self.fake.api_key}":
            return self._send(401, b'{"error":{"message":"invalid api key"}}')
        with self.fake.lock:
            self.fake.model_lists += 1
        self._send(200, json.dumps({"object": "list", "data": self.fake.models}).encode())

    def _stream_forever(self, chunked: bool) -> None:
        """Bytes until the client leaves (or 2 GB, or the self.fake stops): an endless or oversized body."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(300 << 20))
        self.end_headers()
        block = b'{"choices":[{"message":{"content":"' + b"A" * 65536
        sent = 0
        try:
            while sent < (2 << 30) and not self.fake._stopping.is_set():
                self.wfile.write(b"%x\r\n%s\r\n" % (len(block), block) if chunked else block)
                sent += len(block)
                block = b"A" * 65536
        except OSError:
            pass
        self.close_connection = True

    def do_POST(self):
        with self.fake.lock:
            self.fake.in_flight += 1
            self.fake.max_in_flight = max(self.fake.max_in_flight, self.fake.in_flight)
            self.fake.lock.notify_all()
        try:
            self._post()
        finally:
            with self.fake.lock:
                self.fake.in_flight -= 1

    def _fault(self, fault: str, iid: str) -> None:
        """Answer with the planted fault."""
        if fault == "429":
            return self._send(429, b'{"error":{"message":"rate limited"}}', {"Retry-After": self.fake.retry_after})
        if fault == "500":
            return self._send(500, b'{"error":{"message":"internal error"}}')
        if fault == "400":
            return self._send(400, b'{"error":{"message":"this model does not accept images"}}')
        if fault == "413":
            return self._send(413, b'{"error":{"message":"request entity too large: 9000 tokens > 8192"}}')
        if fault in ("endless", "huge"):
            return self._stream_forever(chunked=fault == "endless")
        if fault == "drip":
            self.send_response(200)
            self.send_header("Content-Length", "1000")  # under the cap: only the clock stops it
            self.end_headers()
            try:
                while not self.fake._stopping.is_set():
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.05)
            except OSError:
                pass
            self.close_connection = True
            return
        canned = {
            "refusal": ("", "content_filter", {}),
            "refusal_field": (None, "stop", {"refusal": "I can't help with that."}),
            "empty": ("", "stop", {}),
            "length": ("The frames suggest option", "length", {}),
        }
        if fault in canned:
            text, finish, extra = canned[fault]
            out = self.fake.completion(iid, text, finish)
            out["choices"][0]["message"].update(extra)
            return self._send(200, json.dumps(out).encode())
        if fault == "surrogate":
            out = self.fake.completion(iid, "x", "stop")
            out["usage"] = {"prompt_tokens": "many", "completion_tokens": "12"}
            raw_out = json.dumps(out).replace('"content": "x"', '"content": "bad \\ud800 <ANSWER>A</ANSWER>"')
            return self._send(200, raw_out.encode())
        if fault == "bad_json":
            return self._send(200, b'{"choices": [{"message": {"content": "<ANSW')
        if fault == "drop":
            self.close_connection = True
            return
        if fault == "stall":
            self._wait_until(lambda: False)
            self.close_connection = True
            return
        raise ValueError(f"unknown fault {fault!r}")

    def _post(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path != "/v1/chat/completions":
            return self._send(404, b'{"error":{"message":"no such route"}}')
        try:
            body = json.loads(raw)
        except json.JSONDecodeError:
            return self._send(400, b'{"error":{"message":"request is not JSON"}}')
        item, problem = self.fake.identify(body, self.headers)
        if problem == "401":
            return self._send(401, b'{"error":{"message":"invalid api key"}}')
        if problem:
            with self.fake.lock:
                self.fake.problems.append(problem)
            return self._send(400, json.dumps({"error": {"message": problem}}).encode())
        if "probe" in item:
            with self.fake.lock:
                self.fake.probes.append(item["probe"])
            fault = (
                self.fake.probe_faults.get(item["probe"]) if len(self.fake.probes) > self.fake.probe_ok_first else None
            )
            if fault == "400":
                return self._send(400, b'{"error":{"message":"images are not supported by this model"}}')
            if fault == "500":
                return self._send(500, b'{"error":{"message":"internal error"}}')
            return self._send(200, json.dumps(self.fake.completion("probe", "OK", "stop")).encode())
        iid = item["item_id"]
        with self.fake.lock:
            attempt = self.fake.asked.count(iid)
            self.fake.asked.append(iid)
            self.fake.times.setdefault(iid, []).append(time.monotonic())
        faults = self.fake.faults.get(iid, [])
        fault = faults[attempt] if attempt < len(faults) else "ok"
        if fault != "ok":
            return self._fault(fault, iid)
        if self.fake.wait_for_in_flight and not self.fake.reached and self.fake.answered:  # the preflight goes alone
            deadline = time.monotonic() + self.fake.wait_limit_s
            if not self._wait_until(
                lambda: self.fake.max_in_flight >= self.fake.wait_for_in_flight or time.monotonic() > deadline
            ):
                self.close_connection = True
                return
            self.fake.reached = True
        with self.fake.lock:  # decided under the lock: exactly hold_after requests pass before release()
            hold = self.fake.hold_after is not None and self.fake.admitted >= self.fake.hold_after
            self.fake.admitted += 0 if hold else 1
        if hold:
            if not self._wait_until(self.fake._released.is_set):
                self.close_connection = True
                return
        out = self.fake.completion(iid, self.fake.answer_text(item), "stop", len(raw))
        with self.fake.lock:
            self.fake.answered += 1
        self._send(200, json.dumps(out).encode())
