"""One OpenAI-compatible chat-completion request per item (httpx), with retries, a bounded body and a named outcome.

    payload = build_payload(item, image_urls, opts)       # MCQ: images first (release order), then the prompt;
                                                          # steps: the prompt with each image at its <image> tag
    outcome = await ask(client, url, payload, opts, stats)  # Outcome(response, outcome, finish_reason, error, ...)
    models = await list_models(client, base_url, opts, stats, api_key)   # the endpoint's /models entries

Retried, with exponential backoff and jitter (`backoff_s * 2**n`, drawn uniformly from its upper half, capped at
`backoff_max_s`): 429 (waiting at least its `Retry-After`, seconds or an HTTP date, capped at `retry_after_max_s`),
408, 5xx (503 honours `Retry-After` too), a timeout (per request: `timeout_s` for the whole exchange, body included),
a dropped or refused connection, and a 200 whose body is not a chat completion (malformed JSON, no `choices`). Any
other status is final at once (the request itself is wrong: the server's message is the error). After `retries`
retries the item fails for good with the last reason.

Bounded: a body is read as it streams, up to `opts.body_cap()` bytes (room for `max_tokens` tokens of text and the
JSON around them); a body announced larger (Content-Length), or that grows past it (a chunked body without end,
a compressed body that inflates past it), is cut off and the item fails at once with the reason (`TooLarge`, not
retried: the same server answers the same way). Only identity, gzip and deflate encodings are read (the request
asks for identity). So a run's memory does not depend on what a server sends.

Outcomes of a 200 (`outcome_of`): `refused` (finish_reason content_filter, or the message's `refusal`), `truncated`
(finish_reason length), `empty` (no text), else `answered`; a request without a chat completion is `failed`.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import random
import time
import zlib
from dataclasses import dataclass, field

import httpx

from .items import IMAGE_TAG, EvalItem
from .options import ClientOptions

RETRY_STATUS = frozenset({408, 429})
# the statuses no item can pass: credentials refused, no such route or model, a method the route does not take
FATAL_STATUS = frozenset({401, 403, 404, 405})
MESSAGE_CHARS = 300


@dataclass
class Outcome:
    response: str | None
    usage: dict | None
    latency_s: float | None
    attempts: int
    error: str | None = None
    finish_reason: str | None = None
    outcome: str = "failed"
    status: int | None = None  # the last HTTP status (None: no response, or no request)
    kind: str | None = None  # of a failure: "fatal" (no item can pass), "rejected" (a final 4xx), "transient"
    # (retries spent), "oversized" (body over the cap), "image" (not sent), "internal"
    system_fingerprint: str | None = None
    served_model: str | None = None  # the completion's own `model` field


@dataclass
class Stats:
    """Counters the progress bar and the closing summary show (one event loop: no locks needed)."""

    done: int = 0
    failed: int = 0
    retrying: int = 0
    retries: int = 0
    requests: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    latencies: list[float] = field(default_factory=list)


class Retry(Exception):
    def __init__(self, reason: str, wait_s: float | None = None):
        super().__init__(reason)
        self.wait_s = wait_s


class Final(Exception):
    """A failure that a retry cannot mend (a status other than 200, 408, 429 and 5xx)."""

    def __init__(self, reason: str, status: int | None = None):
        super().__init__(reason)
        self.status = status


class TooLarge(Exception):
    """A body past the cap: cut off, not retried."""


def completions_url(base_url: str) -> str:
    return base_url.rstrip("/") + "/chat/completions"


def models_url(base_url: str) -> str:
    return base_url.rstrip("/") + "/models"


def content_parts(item: EvalItem, image_urls: list[str]) -> list[dict]:
    """The user turn's parts. A multiple-choice item: its images in the release's order, then the prompt (as every
    export shows them). A step item: its prompt (the release's own) with each `<image>` tag replaced by the next image,
    so each step's frames stand beside its sentence."""
    images = [{"type": "image_url", "image_url": {"url": url}} for url in image_urls]
    if item.track != "steps":
        return [*images, {"type": "text", "text": item.prompt}]
    pieces = item.prompt.split(IMAGE_TAG)
    if len(pieces) - 1 != len(images):
        raise ValueError(f"item {item.item_id}: {len(pieces) - 1} <image> tags in the prompt, {len(images)} images")
    parts: list[dict] = []
    for k, text in enumerate(pieces):
        if text:
            parts.append({"type": "text", "text": text})
        if k < len(images):
            parts.append(images[k])
    return parts


def build_payload(item: EvalItem, image_urls: list[str], opts: ClientOptions) -> dict:
    """The chat-completion request of an item: one user turn (content_parts), the run's sampling parameters."""
    return request_body(content_parts(item, image_urls), opts)


def request_body(content: list[dict], opts: ClientOptions) -> dict:
    payload = {
        "model": opts.model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": opts.max_tokens,
        "temperature": opts.temperature,
    }
    if opts.seed is not None:
        payload["seed"] = opts.seed
    return payload


def headers(api_key: str | None) -> dict[str, str]:
    # identity: a compressed body could inflate past the cap between two reads
    out = {"Accept-Encoding": "identity"}
    if api_key:
        out["Authorization"] = f"Bearer {api_key}"
    return out


def retry_after_s(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header (delta seconds or an HTTP date); None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    try:
        return max(0.0, when.timestamp() - time.time())
    except (OverflowError, ValueError, OSError):
        return None


def _clean(text: str) -> str:
    """Text as it can be stored: lone surrogates (valid in JSON, not in UTF-8) replaced."""
    return text.encode("utf-8", "replace").decode("utf-8")


def server_message(body: bytes) -> str:
    """The error message of a non-200 body (its `error.message` when JSON), one line, at most MESSAGE_CHARS."""
    try:
        parsed = json.loads(body)
        msg = parsed.get("error", parsed) if isinstance(parsed, dict) else parsed
        msg = msg.get("message", msg) if isinstance(msg, dict) else msg
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError, RecursionError):
        msg = body[: MESSAGE_CHARS * 4].decode("utf-8", "replace")
    return _clean(" ".join(str(msg).split())[:MESSAGE_CHARS])


def _usage(raw) -> dict | None:
    if not isinstance(raw, dict):
        return None
    out = {}
    for k in ("prompt_tokens", "completion_tokens", "total_tokens"):
        v = raw.get(k)
        if type(v) is int and v >= 0:  # a server's garbage (strings, floats, bools) is not a count
            out[k] = v
    return out or None


def _short_str(v) -> str | None:
    return _clean(v[:MESSAGE_CHARS]) if isinstance(v, str) else None


@dataclass
class Completion:
    text: str
    usage: dict | None
    finish_reason: str | None
    refusal: str | None
    system_fingerprint: str | None
    served_model: str | None


def parse_completion(body: bytes) -> Completion:
    """The chat completion of a 200 body; Retry when it is not one."""
    try:
        parsed = json.loads(body)
        choice = parsed["choices"][0]
        message = choice["message"]
        if not isinstance(message, dict):
            raise TypeError("message is not an object")
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError, KeyError, IndexError, TypeError, RecursionError) as e:
        raise Retry(f"malformed response ({type(e).__name__}: {str(e)[:80]})") from None
    text = message.get("content")
    if isinstance(text, list):  # some gateways return content parts
        text = "".join(p["text"] for p in text if isinstance(p, dict) and isinstance(p.get("text"), str))
    text = _clean(text) if isinstance(text, str) else ""
    refusal = message.get("refusal")
    return Completion(
        text,
        _usage(parsed.get("usage")),
        _short_str(choice.get("finish_reason")),
        _clean(refusal) if isinstance(refusal, str) and refusal.strip() else None,
        _short_str(parsed.get("system_fingerprint")),
        _short_str(parsed.get("model")),
    )


def outcome_of(c: Completion) -> str:
    """answered, refused, truncated or empty (docs/evaluation.md "Outcomes")."""
    if c.refusal or c.finish_reason == "content_filter":
        return "refused"
    if c.finish_reason == "length":
        return "truncated"
    if not c.text.strip():
        return "empty"
    return "answered"


async def read_capped(resp: httpx.Response, cap: int, strict: bool = True) -> bytes:
    """The body, read as it streams, at most `cap` bytes (decoded). Past it: TooLarge when `strict`, else the first
    `cap` bytes (an error body: only its message is wanted)."""
    declared = resp.headers.get("content-length", "").strip()
    if strict and declared.isdigit() and int(declared) > cap:
        raise TooLarge(f"response body of {int(declared)} bytes announced, over the cap of {cap} bytes")
    enc = resp.headers.get("content-encoding", "identity").strip().lower()
    if enc in ("gzip", "x-gzip"):
        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    elif enc == "deflate":
        inflate = zlib.decompressobj()
    elif enc in ("", "identity"):
        inflate = None
    else:
        raise Final(f"response in Content-Encoding {enc[:40]!r}, which this client does not read", resp.status_code)
    buf = bytearray()
    async for chunk in resp.aiter_raw():
        if inflate is not None:
            try:
                chunk = inflate.decompress(chunk, cap + 1 - len(buf))  # never more than the room left, plus one
            except zlib.error as exc:
                raise Retry(f"malformed response (compressed body: {exc})") from None
        buf += chunk
        if len(buf) > cap or (inflate is not None and inflate.unconsumed_tail):
            if strict:
                raise TooLarge(f"response body over the cap of {cap} bytes: cut off")
            return bytes(buf[:cap])
    return bytes(buf)


async def _exchange(
    client: httpx.AsyncClient, method: str, url: str, payload: dict | None, opts: ClientOptions, auth: dict, cap: int
) -> tuple[int, bytes, httpx.Headers]:
    """One request and its body (bounded), within `timeout_s` for the whole exchange. Retry on what a retry may mend."""
    try:
        async with asyncio.timeout(opts.timeout_s):  # the whole exchange, body included: a slow drip ends here
            async with client.stream(method, url, json=payload, headers=auth) as resp:
                ok = resp.status_code == 200
                body = await read_capped(resp, cap if ok else opts.error_body_bytes, strict=ok)
                return resp.status_code, body, resp.headers
    except (TimeoutError, httpx.TimeoutException):
        raise Retry(f"no answer within {opts.timeout_s:g}s") from None
    except httpx.TransportError as exc:
        raise Retry(f"connection: {type(exc).__name__}: {str(exc)[:120]}") from None


def _status_error(status: int, body: bytes, hdrs: httpx.Headers) -> Exception:
    msg = f"HTTP {status}: {server_message(body)}"
    if status in RETRY_STATUS or status >= 500:
        return Retry(msg, retry_after_s(hdrs.get("retry-after")))
    return Final(msg, status)


async def _attempt(
    client: httpx.AsyncClient, url: str, payload: dict, opts: ClientOptions, auth: dict[str, str]
) -> Completion:
    status, body, hdrs = await _exchange(client, "POST", url, payload, opts, auth, opts.body_cap())
    if status == 200:
        return parse_completion(body)
    raise _status_error(status, body, hdrs)


def backoff_s(n: int, opts: ClientOptions, wait_hint: float | None, rng: random.Random) -> float:
    """Delay before retry n (0-based): the upper half of backoff * 2**n at random, capped; at least Retry-After."""
    cap = min(opts.backoff_max_s, opts.backoff_s * (2 ** min(n, 60)))
    delay = cap / 2 + rng.uniform(0, cap / 2)
    if wait_hint is not None:
        delay = max(delay, min(wait_hint, opts.retry_after_max_s))
    return delay


def fatal_status(status: int | None) -> bool:
    return status is not None and (status in FATAL_STATUS or 300 <= status < 400)


async def _retrying(fn, opts: ClientOptions, stats: Stats, rng: random.Random):
    """fn() until it returns, raises Final / TooLarge, or the retries are spent: (value, attempts, None) or
    (None, attempts, the failure)."""
    reason = ""
    for n in range(opts.retries + 1):
        if n:
            stats.retries += 1
        stats.requests += 1
        try:
            return await fn(), n + 1, None
        except (Final, TooLarge) as exc:
            return None, n + 1, exc
        except Retry as exc:
            reason = str(exc)
            if n == opts.retries:
                break
            stats.retrying += 1
            try:
                await asyncio.sleep(backoff_s(n, opts, exc.wait_s, rng))
            finally:
                stats.retrying -= 1
    return None, opts.retries + 1, Retry(f"gave up after {opts.retries + 1} attempts: {reason}")


async def ask(
    client: httpx.AsyncClient,
    url: str,
    payload: dict,
    opts: ClientOptions,
    stats: Stats,
    api_key: str | None = None,
    rng: random.Random | None = None,
) -> Outcome:
    """Send one request until it is answered, fails for good, or the retries are spent. Never raises for the item's
    own failure (the Outcome says it); cancellation propagates."""
    rng = rng or random.Random()
    auth = headers(api_key)
    t0 = [0.0]

    async def once() -> Completion:
        t0[0] = time.perf_counter()
        return await _attempt(client, url, payload, opts, auth)

    c, attempts, exc = await _retrying(once, opts, stats, rng)
    if c is None:
        if isinstance(exc, Final):
            kind = "fatal" if fatal_status(exc.status) else "rejected"
            return Outcome(None, None, None, attempts, str(exc), status=exc.status, kind=kind)
        if isinstance(exc, TooLarge):
            return Outcome(None, None, None, attempts, str(exc), status=200, kind="oversized")
        return Outcome(None, None, None, attempts, str(exc), kind="transient")
    latency = round(time.perf_counter() - t0[0], 3)
    stats.latencies.append(latency)
    if c.usage:
        stats.tokens_in += c.usage.get("prompt_tokens", 0)
        stats.tokens_out += c.usage.get("completion_tokens", 0)
    text = c.text if c.text or not c.refusal else c.refusal
    return Outcome(
        text,
        c.usage,
        latency,
        attempts,
        None,
        c.finish_reason,
        outcome_of(c),
        200,
        None,
        c.system_fingerprint,
        c.served_model,
    )


async def list_models(
    client: httpx.AsyncClient, base_url: str, opts: ClientOptions, stats: Stats, api_key: str | None, rng=None
) -> tuple[list[dict] | None, Outcome | None]:
    """The endpoint's `GET /models` entries ({id, root?, ...} dicts), or (None, the failure as an Outcome). A route
    that is not there (404, 405) or a body that is no model list gives ([], None): identity then rests on the name."""
    rng = rng or random.Random()
    auth = headers(api_key)

    async def once():
        status, body, hdrs = await _exchange(
            client, "GET", models_url(base_url), None, opts, auth, opts.models_body_bytes
        )
        if status == 200:
            return body
        raise _status_error(status, body, hdrs)

    body, attempts, exc = await _retrying(once, opts, stats, rng)
    if body is None:
        status = getattr(exc, "status", None)
        unreachable = isinstance(exc, Retry) and ("connection" in str(exc) or "no answer within" in str(exc))
        if status in (401, 403) or unreachable:
            return None, Outcome(None, None, None, attempts, f"GET /models: {exc}", status=status, kind="fatal")
        return [], None  # no list to be had (no such route, a broken one): the chat requests will tell
    try:
        data = json.loads(body).get("data")
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError, AttributeError, RecursionError):
        return [], None
    return [m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)] if isinstance(
        data, list
    ) else [], None


def failure_hint(outcome: Outcome, base_url: str, key_env: str, has_key: bool) -> str:
    """Why a request failed, in the words a user acts on."""
    err = outcome.error or ""
    hints = []
    if outcome.status in (401, 403):
        hints.append(
            f"the endpoint refused the credentials: set {key_env}"
            + (" (it is set: is it the right key?)" if has_key else " (it is not set)")
        )
    elif outcome.status in (404, 405):
        hints.append(
            f"no chat-completions route at {completions_url(base_url)} or an unknown --model "
            f"(does --base-url end in /v1?)"
        )
    elif outcome.status is not None and 300 <= outcome.status < 400:
        hints.append("the endpoint redirects: give the final URL as --base-url")
    elif "connection" in err:
        hints.append(f"cannot reach {base_url}: is the server up and the address right?")
    elif "no answer within" in err:
        hints.append("the endpoint did not answer within --timeout (a model still loading? raise --timeout)")
    return err + ("; " + "; ".join(hints) if hints else "")
