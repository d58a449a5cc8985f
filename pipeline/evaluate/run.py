"""Run one eval: items -> (images) -> requests -> response store -> predictions -> the scorer's report.

    summary = run_eval(EvalOptions(release=..., images=..., out=..., client=ClientOptions(...)), cfg)

1. Who answers: `GET /models` gives the endpoint's own id (and root) of `--model`; with the base URL's host it is the
   identity under which answers are stored and found (store.py). An endpoint that cannot be reached, or refuses the
   credentials, stops the run here (unless nothing needs asking: then the stored answers are scored as they are).
2. What is already answered under that identity, for the same item (uid) and request, is reused; when any stored
   answer carries a `system_fingerprint`, or something is to be asked, a plain text probe learns the server's current
   fingerprint first (an answer of another fingerprint is asked again) and shows that the server takes a request.
3. The first item is sent alone. Answered (any 200): the others follow, `concurrency` at a time. Not answered: unless
   the failure is one no item can pass (401/403, no such route or model, a redirect: the run stops and says which),
   a probe with one small image tells whether the server takes images at all; if it does, that item is recorded as
   failed with the server's message and the run goes on.
4. Every outcome is stored as it arrives. A failure no item can pass later on stops the run at once; after
   `fail_streak` failures in a row the probes are sent again, and the run stops if the server no longer takes them
   (rather than spending every remaining item's retries). An unexpected error while handling one item fails that item.
5. At the end (after a Ctrl-C or a stop too, with what was answered) the predictions files are written in item-id
   order and scored by `processbench score`'s own entry point (pipeline/scoring/mcq.py `main`), so the report equals
   what `processbench score` makes of those files.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import asyncio
import base64
import hashlib
import logging
import os
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import numpy as np

from pipeline.core import io
from pipeline.reconstruct import images_folder
from pipeline.release.identity import read_identity

from .client import (
    Outcome,
    Stats,
    ask,
    build_payload,
    completions_url,
    failure_hint,
    list_models,
    request_body,
)
from .images import ImageError, load_item_images, reconstruct_for
from .items import EvalItem, check_prompt_version, load_items
from .options import ClientOptions
from .store import (
    ANSWER_OUTCOMES,
    PREDICTIONS_FILE,
    STEP_PREDICTIONS_FILE,
    ResponseStore,
    prediction_row,
    request_hash,
    write_predictions,
)

if TYPE_CHECKING:
    from pipeline.settings.root import Settings

log = logging.getLogger(__name__)
SUMMARY_FILE = "run_summary.json"
RECONSTRUCTED_DIR = "reconstructed"
PROBE_TEXT = "Reply with the single word OK."
RETRY_AGAIN = frozenset({"refused", "truncated", "empty"})  # asked again only with --retry-refused


def _probe_image() -> str:
    from pipeline.frames.pixels import encode_png

    img = np.zeros((32, 32, 3), dtype=np.uint8)
    img[:, 16:] = 255
    return "data:image/png;base64," + base64.b64encode(encode_png(img, 1)).decode("ascii")


@dataclass
class EvalOptions:
    release: Path
    out: Path
    client: ClientOptions
    images: Path | None = None
    upstream: dict[str, Path] = field(default_factory=dict)
    levels: str | None = None
    families: str | None = None
    sources: str | None = None
    tracks: str | None = None  # "mcq", "steps" or both (default)
    limit: int | None = None
    image_max_side: int | None = None
    api_key_env: str = "OPENAI_API_KEY"
    progress: bool = True
    score: bool = True
    circular: bool = False  # ask the CircularEval copies and score them with `score --circular`
    retry_refused: bool = False  # ask refused, truncated and empty answers again


def request_key(item: EvalItem, opts: EvalOptions) -> str:
    """The request hash of an item: everything the model is shown or asked with."""
    content = {
        "prompt_sha256": hashlib.sha256(item.prompt.encode()).hexdigest(),
        "images": list(item.image_hashes) if item.image_hashes is not None else list(item.images),
        "image_max_side": opts.image_max_side,
        **opts.client.request_params(),
    }
    return request_hash(content)


def item_uid(item: EvalItem, release_fp: str | None) -> str:
    """The store's item key: the release's item_uid (a row without one, which a release read through
    pipeline/release/identity.py never has, keys by release and item id)."""
    return item.item_uid or f"{release_fp}:{item.item_id}"


def endpoint_host(base_url: str) -> str:
    parts = urlsplit(base_url)
    host = (parts.hostname or "").lower()
    return f"{host}:{parts.port}" if parts.port else host


def identity_of(model: str, base_url: str, models: list[dict] | None) -> dict:
    """Who answers: the --model name, the endpoint's own id and root of it (the listed entry of that name, or the one
    model an endpoint lists that serves whatever name it is sent), the base URL's host."""
    entry = next((m for m in models or [] if m["id"] == model), None)
    if entry is None and models is not None and len(models) == 1:
        entry = models[0]
    root = entry.get("root") if entry else None
    return {
        "model": model,
        "model_id": entry["id"] if entry else None,
        "model_root": str(root)[:300] if root else None,
        "host": endpoint_host(base_url),
    }


def identity_key(identity: dict) -> str:
    return request_hash(identity)[:16]


class Stop(Exception):
    """A failure no item can pass: the run stops and says which."""


class _Runner:
    def __init__(self, opts: EvalOptions, store: ResponseStore, stats: Stats, release_fp: str | None):
        self.opts, self.store, self.stats, self.release_fp = opts, store, stats, release_fp
        self.api_key = os.environ.get(opts.api_key_env) or None
        self.url = completions_url(opts.client.base_url)
        self.rng = random.Random()
        self.identity: dict | None = None
        self.ident_key: str | None = None
        self.fingerprint: str | None = None
        self.checked = False  # the endpoint was reached this run
        self.stopped: str | None = None
        self.chosen: dict[str, dict] = {}  # item id -> the record its prediction is made of
        self.reused = self.reused_other_release = 0
        self.asked = 0
        self.streak = 0
        self.probe_lock = asyncio.Lock()
        self.bar = None
        self.images_dir: Path | None = None
        self.requests: dict[str, str] = {}
        self.not_listed: list[str] | None = None
        self.checked_fingerprint = False  # the server's current fingerprint is known (a probe was answered)

    def hint(self, outcome: Outcome) -> str:
        return failure_hint(outcome, self.opts.client.base_url, self.opts.api_key_env, self.api_key is not None)

    # ------------------------------------------------------------------------------------------------- identity

    async def identify(self, client: httpx.AsyncClient) -> Outcome | None:
        c = self.opts.client
        models, failure = await list_models(client, c.base_url, c, self.stats, self.api_key, self.rng)
        if failure is not None:
            return failure
        self.checked = True
        self.identity = identity_of(c.model, c.base_url, models)
        self.ident_key = identity_key(self.identity)
        if models and self.identity["model_id"] is None:
            self.not_listed = sorted(m["id"] for m in models)[:20]
            log.warning("--model %r is not among the endpoint's models %s", c.model, self.not_listed)
        return None

    def identity_from_store(self) -> bool:
        """The endpoint cannot be reached: the identity the store holds for this model and host, if exactly one."""
        c = self.opts.client
        found = {
            k: v
            for k, v in self.store.identities.items()
            if v.get("model") == c.model and v.get("host") == endpoint_host(c.base_url)
        }
        if len(found) != 1:
            return False
        self.ident_key, self.identity = next(iter(found.items()))
        return True

    # ------------------------------------------------------------------------------------------------- probes

    async def probe(self, client: httpx.AsyncClient, image: bool) -> Outcome:
        content = ([{"type": "image_url", "image_url": {"url": _probe_image()}}] if image else []) + [
            {"type": "text", "text": PROBE_TEXT}
        ]
        return await ask(
            client,
            self.url,
            request_body(content, self.opts.client),
            self.opts.client,
            self.stats,
            self.api_key,
            self.rng,
        )

    async def server_takes_requests(self, client: httpx.AsyncClient, why: str) -> None:
        """Probe with a plain request, then one small image; Stop with the reason when either is not answered."""
        text = await self.probe(client, image=False)
        if text.outcome not in ANSWER_OUTCOMES:
            raise Stop(f"{why}; a plain text request fails too: {self.hint(text)}")
        if text.system_fingerprint:
            self.fingerprint = text.system_fingerprint
        img = await self.probe(client, image=True)
        if img.outcome not in ANSWER_OUTCOMES:
            raise Stop(
                f"{why}; the server takes a plain request but not one with a single small image: it rejects images "
                f"at all (a text-only model, or a server started without image support): {self.hint(img)}"
            )

    # ------------------------------------------------------------------------------------------------- items

    def record(self, item: EvalItem, outcome: Outcome) -> dict:
        return {
            "item_id": item.item_id,
            "item_uid": item_uid(item, self.release_fp),
            "release": self.release_fp,
            "track": item.track,
            "level": item.level,
            "model": self.opts.client.model,
            "identity": self.identity,
            "identity_key": self.ident_key,
            "system_fingerprint": outcome.system_fingerprint,
            "served_model": outcome.served_model,
            "prompt_version": item.prompt_version,
            "request_hash": self.requests[item.item_id],
            "outcome": outcome.outcome,
            "finish_reason": outcome.finish_reason,
            "http_status": outcome.status,
            "response": outcome.response,
            "usage": outcome.usage,
            "latency_s": outcome.latency_s,
            "attempts": outcome.attempts,
            "error": outcome.error,
        }

    async def one(self, client: httpx.AsyncClient, item: EvalItem) -> Outcome:
        try:
            try:
                urls = await asyncio.to_thread(load_item_images, item, self.images_dir, self.opts.image_max_side)
            except ImageError as exc:
                outcome = Outcome(None, None, None, 0, str(exc), kind="image")
            else:
                payload = build_payload(item, urls, self.opts.client)
                del urls
                outcome = await ask(client, self.url, payload, self.opts.client, self.stats, self.api_key, self.rng)
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - whatever a server or a file does to one item fails that item only
            outcome = Outcome(
                None, None, None, 0, f"internal error: {type(exc).__name__}: {str(exc)[:200]}", kind="internal"
            )
        rec = self.record(item, outcome)
        self.store.append(rec)
        self.chosen[item.item_id] = rec
        self.asked += 1
        if outcome.outcome in ANSWER_OUTCOMES:
            self.stats.done += 1
            self.streak = 0
        else:
            self.stats.failed += 1
            if outcome.kind != "image":
                self.streak += 1
            log.error("item %s failed: %s", item.item_id, outcome.error)
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(
                done=self.stats.done, failed=self.stats.failed, retrying=self.stats.retrying, refresh=False
            )
        return outcome

    async def after_failure(self, client: httpx.AsyncClient, outcome: Outcome) -> None:
        """Stop when no item can pass: at once for a fatal status; after fail_streak failures in a row, when the
        probes fail."""
        if outcome.kind == "fatal":
            raise Stop(self.hint(outcome))
        if self.streak >= max(1, self.opts.client.fail_streak):
            async with self.probe_lock:
                if self.streak >= max(1, self.opts.client.fail_streak):
                    await self.server_takes_requests(client, f"{self.streak} items failed in a row ({outcome.error})")
                    self.streak = 0

    async def ask_all(self, client: httpx.AsyncClient, todo: list[EvalItem]) -> None:
        queue = list(reversed(todo))
        while queue:  # the preflight: the first request sent alone, before any other
            outcome = await self.one(client, queue.pop())
            if outcome.outcome in ANSWER_OUTCOMES:
                break
            if outcome.kind == "image":  # no request was sent (its images failed): the next item is the preflight
                continue
            if outcome.kind == "fatal":
                raise Stop(self.hint(outcome))
            await self.server_takes_requests(client, f"the first item failed ({outcome.error})")
            self.streak = 0
            break

        async def worker() -> None:
            while queue and self.stopped is None:
                outcome = await self.one(client, queue.pop())
                if outcome.outcome not in ANSWER_OUTCOMES and self.stopped is None:
                    try:
                        await self.after_failure(client, outcome)
                    except Stop as exc:
                        self.stopped = str(exc)

        n = max(1, int(self.opts.client.concurrency))
        await asyncio.gather(*(worker() for _ in range(min(n, len(queue)))))
        if self.stopped is not None:
            raise Stop(self.stopped)

    # ------------------------------------------------------------------------------------------------- the run

    def reusable(self, items: list[EvalItem]) -> tuple[dict[str, dict], list[EvalItem]]:
        """(item id -> stored answer to reuse, items to ask) under the current identity and fingerprint."""
        found, todo = {}, []
        for it in items:
            rec = None
            if self.ident_key is not None:
                rec = self.store.get((item_uid(it, self.release_fp), self.requests[it.item_id], self.ident_key))
            if rec is not None and self.opts.retry_refused and rec.get("outcome") in RETRY_AGAIN:
                rec = None
            if rec is not None and self.checked_fingerprint and rec.get("system_fingerprint") != self.fingerprint:
                rec = None
            if rec is None:
                todo.append(it)
            else:
                found[it.item_id] = rec
        return found, todo

    async def main(self, items: list[EvalItem], prepare_images) -> None:
        c = self.opts.client
        n = max(1, int(c.concurrency))
        limits = httpx.Limits(max_connections=n + 1, max_keepalive_connections=n + 1)
        timeout = httpx.Timeout(c.timeout_s)
        async with httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=True) as client:
            failure = await self.identify(client)
            if failure is not None:
                if failure.status in (401, 403) or not self.identity_from_store():
                    raise Stop(self.hint(failure))
                found, todo = self.reusable(items)
                if todo:
                    raise Stop(self.hint(failure))
                log.warning("%s: scoring the answers stored for this model and host", self.hint(failure))
                self.chosen.update(found)
                self.reused = len(found)
                return
            found, todo = self.reusable(items)
            if todo or any(r.get("system_fingerprint") for r in found.values()):
                text = await self.probe(client, image=False)
                if text.outcome not in ANSWER_OUTCOMES:
                    if text.kind == "fatal":
                        raise Stop(self.hint(text))
                    raise Stop(f"the server does not answer a plain text request: {self.hint(text)}")
                self.fingerprint = text.system_fingerprint
                self.checked_fingerprint = True
                found, todo = self.reusable(items)
            self.chosen.update(found)
            self.reused = len(found)
            self.reused_other_release = sum(1 for r in found.values() if r.get("release") != self.release_fp)
            if not todo:
                return
            self.images_dir = prepare_images(todo)
            if self.opts.progress:
                from tqdm import tqdm

                self.bar = tqdm(total=len(todo), desc=f"eval {c.model}", unit="item")
            try:
                await self.ask_all(client, todo)
            finally:
                if self.bar is not None:
                    self.bar.close()


def _percentiles(values: list[float]) -> dict:
    if not values:
        return {"p50": None, "p90": None, "p99": None}
    arr = np.asarray(values)
    return {f"p{q}": round(float(np.percentile(arr, q)), 3) for q in (50, 90, 99)}


def run_eval(opts: EvalOptions, cfg: Settings) -> dict:
    """Run (or resume) the eval; returns the summary (also written to <out>/run_summary.json). `complete` is False
    when an item has no answer (failed, not asked, or the run was interrupted or stopped); `stopped` names a failure
    no item can pass."""
    t0 = time.perf_counter()
    out = Path(opts.out)
    items = load_items(
        opts.release, cfg, opts.levels, opts.families, opts.sources, opts.limit, opts.circular, opts.tracks
    )
    if not items:
        raise ValueError("no eval item matches the chosen levels / families / sources / tracks")
    check_prompt_version(items, cfg)
    # the fingerprint, every item file checked against the release's checksums first (another release's file, a
    # truncated one, or a release of a format without identities: one line, exit 2)
    release_fp = read_identity(opts.release, cfg).fingerprint
    # `reconstruct --out`'s folder or its images/ folder, else one line, before the server is asked anything
    images = None if opts.upstream or opts.images is None else images_folder(Path(opts.images), cfg)
    out.mkdir(parents=True, exist_ok=True)
    stats = Stats()
    interrupted = False
    # a stored record holds at most one capped body, JSON-escaped (at most 6 bytes per byte), and its bookkeeping
    with ResponseStore(out, max_record_bytes=6 * opts.client.body_cap() + (1 << 20)) as store:
        runner = _Runner(opts, store, stats, release_fp)
        runner.requests = {it.item_id: request_key(it, opts) for it in items}

        def prepare_images(todo: list[EvalItem]) -> Path:
            if opts.upstream:
                images_dir, _ = reconstruct_for(
                    todo,
                    opts.release,
                    opts.upstream,
                    cfg,
                    out / RECONSTRUCTED_DIR,
                    progress=opts.progress or None,
                    fingerprint=release_fp,
                )
                return Path(images_dir)
            if images is None:
                raise ValueError("give --images DIR (the folder `processbench reconstruct --out` wrote) or --upstream")
            return images

        try:
            asyncio.run(runner.main(items, prepare_images))
        except KeyboardInterrupt:
            interrupted = True
        except Stop as exc:
            runner.stopped = str(exc)
        rows = {
            it.item_id: prediction_row(
                it.item_id, runner.chosen.get(it.item_id), opts.client.model, item_uid(it, release_fp), release_fp
            )
            for it in items
        }
    paths = {}
    for track, name, answer in (("mcq", PREDICTIONS_FILE, "response"), ("steps", STEP_PREDICTIONS_FILE, "prediction")):
        track_rows = [rows[it.item_id] for it in items if it.track == track]
        if track_rows:
            paths[track] = write_predictions(out, track_rows, name, answer)
    outcomes = Counter(r["outcome"] for r in rows.values())
    answers = sum(outcomes[o] for o in ANSWER_OUTCOMES)
    reasons = Counter(r["error"] for r in rows.values() if r["outcome"] == "failed")
    summary = {
        "model": opts.client.model,
        "identity": runner.identity,
        "endpoint_checked": runner.checked,
        "system_fingerprints": sorted({r["system_fingerprint"] for r in rows.values() if r["system_fingerprint"]}),
        "release": release_fp,
        "items": len(items),
        "tracks": dict(sorted(Counter(it.track for it in items).items())),
        "outcomes": {o: outcomes[o] for o in ("answered", "refused", "truncated", "empty", "failed", "missing")},
        "answered": outcomes["answered"],
        "failed": len(items) - answers,
        "from_store": runner.reused,
        "reused_from_other_release": runner.reused_other_release,
        "asked": runner.asked,
        "requests": stats.requests,
        "retries": stats.retries,
        "tokens_in": stats.tokens_in,
        "tokens_out": stats.tokens_out,
        "latency_s": _percentiles(stats.latencies),
        "wall_s": round(time.perf_counter() - t0, 3),
        "complete": answers == len(items) and not interrupted and runner.stopped is None,
        "interrupted": interrupted,
        "stopped": runner.stopped,
        "failures": [
            {"item_id": r["item_id"], "outcome": r["outcome"], "error": r["error"]}
            for r in sorted(rows.values(), key=lambda r: r["item_id"])
            if r["outcome"] in ("failed", "missing")
        ][:50],
        "failure_reasons": [{"error": e, "items": n} for e, n in reasons.most_common(10)],
        "predictions": {t: p.name for t, p in paths.items()},
    }
    if runner.not_listed is not None:
        summary["model_not_listed"] = runner.not_listed
    if opts.score and not interrupted:
        summary["scored"] = _score(opts, paths, out) == 0
    io.write_json(out / SUMMARY_FILE, summary)
    return summary


def _score(opts: EvalOptions, paths: dict[str, Path], out: Path) -> int:
    """The report, by `processbench score`'s own entry points."""
    from pipeline.scoring.mcq import main as score_main

    rc = 0
    args = ["--release", str(opts.release), "--out", str(out)]
    if opts.circular and "mcq" in paths:  # the entry point `processbench score --circular` calls
        from pipeline.scoring.circular import main as circular_main

        rc = circular_main([*args, "--predictions", str(paths["mcq"])])
        if "steps" in paths:
            rc = rc or score_main([*args, "--step-predictions", str(paths["steps"])])
        return rc
    extra = [*(["--predictions", str(paths["mcq"])] if "mcq" in paths else [])]
    extra += ["--step-predictions", str(paths["steps"])] if "steps" in paths else []
    return score_main([*args, *extra]) if extra else 0


def summary_text(s: dict) -> str:
    lat = s["latency_s"]
    o = s["outcomes"]
    lines = [
        f"items {s['items']} ({', '.join(f'{t} {n}' for t, n in s['tracks'].items())}): answered {o['answered']}, "
        f"refused {o['refused']}, truncated {o['truncated']}, empty {o['empty']}, failed {o['failed']}, "
        f"not asked {o['missing']}",
        f"{s['from_store']} from the store ({s['reused_from_other_release']} of them answered for another release), "
        f"{s['asked']} asked; requests {s['requests']}, retries {s['retries']}",
        f"tokens in {s['tokens_in']}, out {s['tokens_out']}; latency p50 {lat['p50']} s, p90 {lat['p90']} s, "
        f"p99 {lat['p99']} s; wall {s['wall_s']} s",
    ]
    if s.get("identity"):
        i = s["identity"]
        lines.append(
            f"model {i['model']} (endpoint id {i['model_id']}, root {i['model_root']}) at {i['host']}"
            + (f"; system_fingerprint {', '.join(s['system_fingerprints'])}" if s["system_fingerprints"] else "")
            + ("" if s["endpoint_checked"] else "; endpoint not reached: identity from the store")
        )
    for f in s["failures"][:10]:
        lines.append(f"FAILED {f['item_id']}: {f['error']}")
    if s["stopped"]:
        lines.append(
            f"STOPPED: {s['stopped']}. Every answer so far is kept; fix the cause and run the same command again"
        )
    elif s["interrupted"]:
        lines.append("interrupted: every answer so far is kept; run the same command again to resume")
    elif not s["complete"]:
        lines.append(
            f"INCOMPLETE: {s['failed']} item(s) without an answer (scored wrong); run the same command "
            f"again to retry only them"
        )
    return "\n".join(lines)
