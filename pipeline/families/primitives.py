"""REASSEMBLE primitive families: T10 current low-level action, T11 next distinct low-level action within the same
high-level action, T12 the masked middle element of a distinct low-level chain.

Frames: the window `offsets` around centres at `centers` fractions of the stable sub-range of the segment (T10, T11:
the current low-level segment; T12: the run of the masked chain element, plus one frame at each `relative` fraction
of the previous and of the next element's run, so the chain's ends are shown as images, never named in the text).
Distractors are plausible given what the question shows, from the source's primitive statistics: T10 every label the
source uses, T11 every label that follows some primitive in the source, T12 every label that is a masked (middle)
element somewhere in the source. With the `uniform` policy they are a seeded uniform draw among those, so with
balanced answers the option set says nothing about the answer (the `context` policy puts the item's own chain first,
which leaks it)."""

from __future__ import annotations

from collections import Counter

from .common import Pool, Rule, Spec, relative_frames, window_at_progress
from .context import Context


def _params(spec: Spec):
    f = spec.frames
    return (
        [int(o) for o in f["offsets"]],
        [float(c) for c in f.get("centers", [0.5])],
        float(f.get("margin_ratio", 0.0)),
        int(f.get("min_margin", 0)),
    )


def _recording_vocab(prims: list[dict]) -> list[str]:
    c = Counter(p["text"] for p in prims)
    return [t for t, _ in sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))]


def _source_stats(ctx: Context) -> tuple[set[str], set[str], set[str]]:
    """Labels used, labels that follow a primitive, and labels at a middle position of some distinct chain."""
    used, nexts, mids = set(), set(), set()
    for uid in ctx.unit_ids:
        for p in ctx.primitives.get(uid, []):
            used.add(p["text"])
            if p["next_text"] is not None:
                nexts.add(p["next_text"])
        for s in ctx.segments.get(uid, []):
            if not s["no_action"]:
                mids |= set(list(s["chain"] or [])[1:-1])
    return used, nexts, mids


def _uniform(spec: Spec) -> bool:
    return spec.t.distractors.policy == "uniform"


def _chains(ctx: Context, uid: str) -> dict[int, list[str]]:
    return {int(s["seg_index"]): list(s["chain"] or []) for s in ctx.segments.get(uid, [])}


def _windows(lo: int, hi: int, n: int, offsets, centers, margin_ratio, min_margin, rule: Rule | None = None):
    """The frame windows at `centers` of a segment: one per distinct centre that fits the segment and the unit
    (`rule` counts the centres that do not)."""
    seen = set()
    for c in centers:
        w = window_at_progress(int(lo), int(hi), c, offsets, margin_ratio, min_margin)
        bad = w is None or w[1][0] < 0 or w[1][-1] >= n
        if rule is not None and (bad or w[0] not in seen):
            rule.count(1, bad)
        if bad or w[0] in seen:
            continue
        seen.add(w[0])
        yield c, w[0], w[1]


def _rules(spec: Spec, what: str) -> tuple[Rule, Rule]:
    """The closed label set (labels) and the frame window (frames) as rules over `what` and its windows."""
    return (
        spec.rule("labels", "labels", what, "had an action outside the family's closed label set"),
        spec.rule("frames", "frames.offsets", "windows", f"did not fit their segment or the {spec.unit_word}"),
    )


def t10_current(spec: Spec, ctx: Context):
    pool = Pool(spec, ctx.units)
    offsets, centers, mr, mm = _params(spec)
    vocab = set(spec.label_texts)
    used = _source_stats(ctx)[0] if _uniform(spec) else None
    outside, unfit = _rules(spec, "low-level segments")
    for uid in ctx.unit_ids:
        prims = ctx.primitives.get(uid, [])
        rec, chains = _recording_vocab(prims), _chains(ctx, uid)
        for p in prims:
            outside.count(1, p["text"] not in vocab)
            if p["text"] not in vocab:
                continue
            context = sorted(used) if used is not None else chains.get(int(p["parent_index"]), []) + rec
            for c, a, f in _windows(p["start_frame"], p["end_frame"], ctx.n(uid), offsets, centers, mr, mm, unfit):
                pool.add(
                    uid,
                    f"p{p['parent_index']}.{p['seg_index']}|c{a}",
                    p["text"],
                    f,
                    a,
                    context=context,
                    meta={"parent_index": p["parent_index"], "seg_index": p["seg_index"], "center": c},
                )
    return pool.frame()


def t11_next(spec: Spec, ctx: Context):
    pool = Pool(spec, ctx.units)
    offsets, centers, mr, mm = _params(spec)
    vocab = set(spec.label_texts)
    excl_cur = bool(spec.t.distractors.exclude_current)
    nexts = _source_stats(ctx)[1] if _uniform(spec) else None
    outside, unfit = _rules(spec, "low-level segments followed by another action")
    for uid in ctx.unit_ids:
        prims = ctx.primitives.get(uid, [])
        rec, chains = _recording_vocab(prims), _chains(ctx, uid)
        for p in prims:
            nxt = p["next_text"]
            if nxt is None:
                continue
            outside.count(1, nxt not in vocab)
            if nxt not in vocab:
                continue
            context = sorted(nexts) if nexts is not None else chains.get(int(p["parent_index"]), []) + rec
            for c, a, f in _windows(p["start_frame"], p["end_frame"], ctx.n(uid), offsets, centers, mr, mm, unfit):
                pool.add(
                    uid,
                    f"p{p['parent_index']}.{p['seg_index']}|c{a}",
                    nxt,
                    f,
                    a,
                    context=context,
                    exclude={p["text"]} if excl_cur else None,
                    qfields={"high_action": p["high_text"]},
                    meta={
                        "parent_index": p["parent_index"],
                        "seg_index": p["seg_index"],
                        "current": p["text"],
                        "center": c,
                    },
                )
    return pool.frame()


def t12_chain(spec: Spec, ctx: Context):
    """One candidate per middle element of a distinct chain (and centre): frames of the previous element, of the
    masked one (the window) and of the next one, in time order; the question text is the same for every item."""
    pool = Pool(spec, ctx.units)
    offsets, centers, mr, mm = _params(spec)
    nb_fracs = [float(x) for x in spec.frames.get("relative") or []]
    vocab = set(spec.label_texts)
    excl_nb = bool(spec.t.distractors.exclude_neighbours)
    mids = sorted(_source_stats(ctx)[2]) if _uniform(spec) else None
    outside, unfit = _rules(spec, "middle chain elements")
    short = spec.rule(
        "frames", "frames.relative", "middle chain elements", "had a neighbour too short to show its frames"
    )
    for uid in ctx.unit_ids:
        rec = _recording_vocab(ctx.primitives.get(uid, []))
        n = ctx.n(uid)
        for s in ctx.segments.get(uid, []):
            chain = list(s["chain"] or [])
            if s["no_action"] or len(chain) < 3:
                continue
            starts, ends = [int(x) for x in s["chain_start"]], [int(x) for x in s["chain_end"]]
            for m in range(1, len(chain) - 1):
                prev, masked, nxt = chain[m - 1], chain[m], chain[m + 1]
                outside.count(1, masked not in vocab)
                if masked not in vocab:
                    continue
                before = relative_frames(starts[m - 1], ends[m - 1], nb_fracs, mr, mm) if nb_fracs else []
                after = relative_frames(starts[m + 1], ends[m + 1], nb_fracs, mr, mm) if nb_fracs else []
                short.count(1, before is None or after is None)
                if before is None or after is None:
                    continue  # a neighbour too short to show
                context = mids if mids is not None else [x for x in chain if x not in (prev, nxt)] + rec
                for c, a, f in _windows(starts[m], ends[m], n, offsets, centers, mr, mm, unfit):
                    frames = [*before, *f, *after]
                    unfit.count(0, frames[0] < 0 or frames[-1] >= n)
                    if frames[0] < 0 or frames[-1] >= n:
                        continue
                    pool.add(
                        uid,
                        f"h{s['seg_index']}.m{m}|c{a}",
                        masked,
                        frames,
                        a,
                        context=context,
                        exclude={prev, nxt} if excl_nb else None,
                        qfields={"high_action": s["text"], "prev": prev, "next": nxt},
                        meta={
                            "seg_index": s["seg_index"],
                            "mask_pos": m,
                            "chain": chain,
                            "center": c,
                            "prev": prev,
                            "next": nxt,
                        },
                    )
    return pool.frame()
