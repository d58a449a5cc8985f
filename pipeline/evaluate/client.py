"""One OpenAI-compatible chat-completion request per item (httpx), with retries.

    payload = build_payload(item, image_urls, opts)       # images first (release order), then the prompt
    outcome = await ask(client, url, payload, opts, stats)  # Outcome(response, usage, latency_s, attempts, error)

Retried, with exponential backoff and jitter (`backoff_s * 2**n`, drawn uniformly from its upper half, capped at
`backoff_max_s`): 429 (waiting at least its `Retry-After`, seconds or an HTTP date, capped at `retry_after_max_s`),
408, 5xx (503 honours `Retry-After` too), a timeout (per request: `timeout_s` for the whole exchange), a dropped or
refused connection, and a 200 whose body is not a chat completion (malformed JSON, no `choices`). Any other 4xx is
final at once (the request itself is wrong: the server's message is the error). After `retries` retries the item
fails for good with the last reason.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import random
import time
from dataclasses import dataclass, field

import httpx

from .items import EvalItem
from .options import ClientOptions

RETRY_STATUS = frozenset({408, 429})


@dataclass
class Outcome:
    response: str | None
    usage: dict | None
    latency_s: float | None
    attempts: int
    error: str | None = None
    finish_reason: str | None = None


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
    """A failure that a retry cannot mend (a 4xx other than 408/429)."""

    def __init__(self, reason: str, status: int | None = None):
        super().__init__(reason)
        self.status = status


def completions_url(base_url: str) -> str:
    return base_url.rstrip("/") + "/chat/completions"


def build_payload(item: EvalItem, image_urls: list[str], opts: ClientOptions) -> dict:
    """The chat-completion request of an item: one user turn, its images in the release's order, then the prompt."""
    content = [{"type": "image_url", "image_url": {"url": url}} for url in image_urls]
    content.append({"type": "text", "text": item.prompt})
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
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


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
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _server_message(resp: httpx.Response) -> str:
    try:
        body = resp.json()
        msg = body.get("error", body) if isinstance(body, dict) else body
        msg = msg.get("message", msg) if isinstance(msg, dict) else msg
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError):
        msg = resp.text
    return " ".join(str(msg).split())[:300]


def parse_completion(resp: httpx.Response) -> tuple[str, dict | None, str | None]:
    """(text, usage, finish_reason) of a 200 response; Retry when it is not a chat completion."""
    try:
        body = resp.json()
        choice = body["choices"][0]
        message = choice["message"]
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise Retry(f"malformed response ({type(exc).__name__}: {str(exc)[:80]})") from None
    text = message.get("content") if isinstance(message, dict) else None
    if isinstance(text, list):  # some gateways return content parts
        text = "".join(p.get("text", "") for p in text if isinstance(p, dict))
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else None
    if usage is not None:
        usage = {k: usage[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens") if k in usage}
    return ("" if text is None else str(text)), usage, choice.get("finish_reason")


async def _attempt(
    client: httpx.AsyncClient, url: str, payload: dict, opts: ClientOptions, auth: dict[str, str]
) -> tuple[str, dict | None, str | None]:
    try:
        async with asyncio.timeout(opts.timeout_s):  # the whole exchange, not only each read
            resp = await client.post(url, json=payload, headers=auth)
    except (TimeoutError, httpx.TimeoutException):
        raise Retry(f"no answer within {opts.timeout_s:g}s") from None
    except httpx.TransportError as exc:
        raise Retry(f"connection: {type(exc).__name__}: {str(exc)[:120]}") from None
    if resp.status_code == 200:
        return parse_completion(resp)
    wait = retry_after_s(resp.headers.get("retry-after"))
    if resp.status_code in RETRY_STATUS or resp.status_code >= 500:
        raise Retry(f"HTTP {resp.status_code}: {_server_message(resp)}", wait)
    raise Final(f"HTTP {resp.status_code}: {_server_message(resp)}", resp.status_code)


def backoff_s(n: int, opts: ClientOptions, wait_hint: float | None, rng: random.Random) -> float:
    """Delay before retry n (0-based): the upper half of backoff * 2**n at random, capped; at least Retry-After."""
    cap = min(opts.backoff_max_s, opts.backoff_s * (2**n))
    delay = cap / 2 + rng.uniform(0, cap / 2)
    if wait_hint is not None:
        delay = max(delay, min(wait_hint, opts.retry_after_max_s))
    return delay


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
    reason = ""
    for n in range(opts.retries + 1):
        if n:
            stats.retries += 1
        stats.requests += 1
        t0 = time.perf_counter()
        try:
            text, usage, finish = await _attempt(client, url, payload, opts, auth)
        except Final as exc:
            return Outcome(None, None, None, n + 1, str(exc))
        except Retry as exc:
            reason = str(exc)
            if n == opts.retries:
                break
            stats.retrying += 1
            try:
                await asyncio.sleep(backoff_s(n, opts, exc.wait_s, rng))
            finally:
                stats.retrying -= 1
            continue
        latency = round(time.perf_counter() - t0, 3)
        stats.latencies.append(latency)
        if usage:
            stats.tokens_in += int(usage.get("prompt_tokens") or 0)
            stats.tokens_out += int(usage.get("completion_tokens") or 0)
        return Outcome(text, usage, latency, n + 1, None, finish)
    return Outcome(None, None, None, opts.retries + 1, f"gave up after {opts.retries + 1} attempts: {reason}")


def preflight_reason(outcome: Outcome, base_url: str, key_env: str, has_key: bool) -> str:
    """Why the preflight request failed, in the words a user acts on."""
    err = outcome.error or ""
    hints = []
    if "HTTP 401" in err or "HTTP 403" in err:
        hints.append(
            f"the endpoint refused the credentials: set {key_env}"
            + (" (it is set: is it the right key?)" if has_key else " (it is not set)")
        )
    elif "HTTP 404" in err:
        hints.append(
            f"no chat-completions route at {completions_url(base_url)} or an unknown --model "
            f"(does --base-url end in /v1?)"
        )
    elif "HTTP 400" in err or "HTTP 422" in err:
        hints.append(
            "the endpoint rejected the request: a text-only model, or a server started without image "
            "support / a lower image limit per prompt than this item has (vLLM: --limit-mm-per-prompt)"
        )
    elif "connection" in err:
        hints.append(f"cannot reach {base_url}: is the server up and the address right?")
    elif "no answer within" in err:
        hints.append("the endpoint did not answer within --timeout (a model still loading? raise --timeout)")
    return err + ("; " + "; ".join(hints) if hints else "")
