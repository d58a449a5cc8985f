"""Run one eval: items -> (images) -> requests -> response store -> predictions.jsonl -> the scorer's report.

    summary = run_eval(EvalOptions(release=..., images=..., out=..., client=ClientOptions(...)), cfg)

What is already in the store under the same key is never asked again. The first request of a run is the preflight:
sent alone, it must come back answered before any other is sent (else the run stops with the reason). Then
`concurrency` workers each take the next item, build its request (images read, verified and encoded in a thread) and
send it: at most `concurrency` requests are in flight. Every answer is stored as it arrives. At the end (or after a
Ctrl-C, with what was answered) predictions.jsonl is written in item-id order and scored by `processbench score`'s
own entry point (pipeline/scoring/mcq.py `main`), so the report equals what `processbench score` makes of that file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import asyncio
import hashlib
import logging
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np

from pipeline.core import io

from .client import Outcome, Stats, ask, build_payload, completions_url, preflight_reason
from pipeline.frames.reconstruct import images_folder

from .images import ImageError, load_item_images, reconstruct_for
from .items import EvalItem, check_prompt_version, load_items
from .options import ClientOptions
from .store import ResponseStore, prediction_row, request_hash, write_predictions

if TYPE_CHECKING:
    from pipeline.settings.root import Settings

log = logging.getLogger(__name__)
SUMMARY_FILE = "run_summary.json"
RECONSTRUCTED_DIR = "reconstructed"


class PreflightError(Exception):
    pass


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
    limit: int | None = None
    image_max_side: int | None = None
    api_key_env: str = "OPENAI_API_KEY"
    progress: bool = True
    score: bool = True
    circular: bool = False  # ask the CircularEval copies and score them with `score --circular`


def item_key(item: EvalItem, opts: EvalOptions) -> tuple:
    """(item id, model, prompt version, request hash): the response store's key of an item's request."""
    content = {
        "prompt_sha256": hashlib.sha256(item.prompt.encode()).hexdigest(),
        "images": list(item.image_hashes) if item.image_hashes is not None else list(item.images),
        "image_max_side": opts.image_max_side,
        **opts.client.request_params(),
    }
    return item.item_id, opts.client.model, item.prompt_version, request_hash(content)


def _record(key: tuple, item: EvalItem, outcome: Outcome) -> dict:
    return {
        "item_id": key[0],
        "model": key[1],
        "prompt_version": key[2],
        "request_hash": key[3],
        "level": item.level,
        "status": "ok" if outcome.error is None else "failed",
        "response": outcome.response,
        "usage": outcome.usage,
        "latency_s": outcome.latency_s,
        "attempts": outcome.attempts,
        "error": outcome.error,
        "finish_reason": outcome.finish_reason,
    }


class _Runner:
    def __init__(self, opts: EvalOptions, images_dir: Path, store: ResponseStore, stats: Stats, bar):
        self.opts, self.images_dir, self.store, self.stats, self.bar = opts, images_dir, store, stats, bar
        self.api_key = os.environ.get(opts.api_key_env) or None
        self.url = completions_url(opts.client.base_url)
        self.rng = random.Random()

    async def one(self, client: httpx.AsyncClient, item: EvalItem, key: tuple) -> Outcome:
        try:
            urls = await asyncio.to_thread(load_item_images, item, self.images_dir, self.opts.image_max_side)
        except ImageError as exc:
            outcome = Outcome(None, None, None, 0, str(exc))
        else:
            payload = build_payload(item, urls, self.opts.client)
            del urls
            outcome = await ask(client, self.url, payload, self.opts.client, self.stats, self.api_key, self.rng)
        self.store.append(_record(key, item, outcome))
        if outcome.error is None:
            self.stats.done += 1
        else:
            self.stats.failed += 1
            log.error("item %s failed: %s", item.item_id, outcome.error)
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(
                done=self.stats.done, failed=self.stats.failed, retrying=self.stats.retrying, refresh=False
            )
        return outcome

    async def run(self, todo: list[tuple[EvalItem, tuple]]) -> None:
        n = max(1, int(self.opts.client.concurrency))
        limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
        timeout = httpx.Timeout(self.opts.client.timeout_s)
        async with httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=True) as client:
            queue: asyncio.Queue = asyncio.Queue()
            for job in todo:
                queue.put_nowait(job)
            while not queue.empty():  # the preflight: the first request sent, alone, before any other
                outcome = await self.one(client, *queue.get_nowait())
                if outcome.attempts == 0:  # no request was sent (its images failed): the next item is the preflight
                    continue
                if outcome.error is not None:
                    raise PreflightError(
                        preflight_reason(
                            outcome, self.opts.client.base_url, self.opts.api_key_env, self.api_key is not None
                        )
                    )
                break

            async def worker() -> None:
                while True:
                    try:
                        job = queue.get_nowait()
                    except asyncio.QueueEmpty:
                        return
                    await self.one(client, *job)

            await asyncio.gather(*(worker() for _ in range(min(n, queue.qsize()))))


def _percentiles(values: list[float]) -> dict:
    if not values:
        return {"p50": None, "p90": None, "p99": None}
    arr = np.asarray(values)
    return {f"p{q}": round(float(np.percentile(arr, q)), 3) for q in (50, 90, 99)}


def run_eval(opts: EvalOptions, cfg: Settings) -> dict:
    """Run (or resume) the eval; returns the summary (also written to <out>/run_summary.json). `complete` is False
    when an item has no answer (failed for good, or the run was interrupted)."""
    t0 = time.perf_counter()
    out = Path(opts.out)
    items = load_items(opts.release, cfg, opts.levels, opts.families, opts.sources, opts.limit, opts.circular)
    if not items:
        raise ValueError("no eval item matches the chosen levels / families / sources")
    check_prompt_version(items, cfg)
    out.mkdir(parents=True, exist_ok=True)
    keys = [item_key(it, opts) for it in items]
    stats = Stats()
    interrupted = False
    with ResponseStore(out) as store:
        todo = [(it, k) for it, k in zip(items, keys) if store.get(k) is None]
        cached = len(items) - len(todo)
        images_dir = opts.images
        if todo and opts.upstream:
            images_dir, report = reconstruct_for(
                [it for it, _ in todo],
                opts.release,
                opts.upstream,
                cfg,
                out / RECONSTRUCTED_DIR,
                progress=opts.progress or None,
            )
        if todo and images_dir is None:
            raise ValueError("give --images DIR (the folder `processbench reconstruct --out` wrote) or --upstream")
        if todo and not opts.upstream:
            images_dir = images_folder(images_dir, cfg)  # that folder or its images/ folder, else one line
        bar = None
        if todo and opts.progress:
            from tqdm import tqdm

            bar = tqdm(total=len(todo), desc=f"eval {opts.client.model}", unit="item")
        try:
            if todo:
                asyncio.run(_Runner(opts, Path(images_dir), store, stats, bar).run(todo))
        except KeyboardInterrupt:
            interrupted = True
        finally:
            if bar is not None:
                bar.close()
        rows = [
            prediction_row(it.item_id, store.get(k) or store.failed.get(k), opts.client.model)
            for it, k in zip(items, keys)
        ]
    pred_path = write_predictions(out, rows)
    answered = sum(1 for r in rows if r["error"] is None)
    summary = {
        "model": opts.client.model,
        "items": len(items),
        "answered": answered,
        "failed": len(items) - answered,
        "from_store": cached,
        "asked": len(todo) if not interrupted else stats.done + stats.failed,
        "requests": stats.requests,
        "retries": stats.retries,
        "tokens_in": stats.tokens_in,
        "tokens_out": stats.tokens_out,
        "latency_s": _percentiles(stats.latencies),
        "wall_s": round(time.perf_counter() - t0, 3),
        "complete": answered == len(items) and not interrupted,
        "interrupted": interrupted,
        "failures": [{"item_id": r["item_id"], "error": r["error"]} for r in rows if r["error"] is not None][:50],
        "predictions": pred_path.name,
    }
    if opts.score and not interrupted:
        if opts.circular:  # the entry point `processbench score --circular` calls
            from pipeline.scoring.circular import main as score_main
        else:  # the entry point `processbench score` calls
            from pipeline.scoring.mcq import main as score_main

        rc = score_main(["--release", str(opts.release), "--predictions", str(pred_path), "--out", str(out)])
        summary["scored"] = rc == 0
    io.write_json(out / SUMMARY_FILE, summary)
    return summary


def summary_text(s: dict) -> str:
    lat = s["latency_s"]
    lines = [
        f"items {s['items']}: answered {s['answered']}, failed {s['failed']} "
        f"({s['from_store']} from the store, {s['asked']} asked); requests {s['requests']}, "
        f"retries {s['retries']}",
        f"tokens in {s['tokens_in']}, out {s['tokens_out']}; latency p50 {lat['p50']} s, p90 {lat['p90']} s, "
        f"p99 {lat['p99']} s; wall {s['wall_s']} s",
    ]
    for f in s["failures"][:10]:
        lines.append(f"FAILED {f['item_id']}: {f['error']}")
    if s["interrupted"]:
        lines.append("interrupted: every answer so far is kept; run the same command again to resume")
    elif not s["complete"]:
        lines.append(
            f"INCOMPLETE: {s['failed']} item(s) without an answer (scored wrong); run the same command "
            f"again to retry only them"
        )
    return "\n".join(lines)
