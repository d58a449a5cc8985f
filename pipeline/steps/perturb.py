"""Injected errors of the step track, living in the frames (or in a claim the frames refute), never in how a sentence
is worded: the sentences come from the same templates as correct steps, and nothing in a row's model-facing text or
in a file name says which step was touched (docs/steps.md).

    swapped_frames      two steps of one kind whose contents differ swap their frames: both become false (two
                        primitives, two phases, a gripper's contact and no-contact runs, the ends of two different
                        high-level actions)
    substituted_chain   REASSEMBLE: the frames of a high-level action's low-level chain are replaced by the chain of
                        the same action in another recording on the same split side and level (positions whose
                        primitive differs become false)
    contact_flipped     a contact sentence states the opposite of the derived contact state: it keeps its sentence
                        and is shown by frames of the same gripper's opposite-state run that no other step shows
    outcome_flipped     an outcome sentence states failure where the record says success
    truncated_complete  the process is cut short and closes with the success claim, shown by the frames right after
                        the last kept step (the task is not complete there; none a kept step shows)

`inject` deals a kind to each item that is not kept clean (`share_clean`): the applicable kind used least so far
(config order breaks ties), placed as near as the item allows to a target step index dealt evenly over positions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.core.seeding import rng as rng_for
from .items import make_step, set_claim, step_frames

if TYPE_CHECKING:
    from pipeline.settings.steps import StepTaskFile

NEAR_FRACTIONS = 10  # target positions are dealt over this many equal fractions of an item's length


def _free(st: dict) -> bool:
    return st["label"] == 1 and st["error"] is None


def _nearest(cands: list, target: int, pos=lambda c: c):
    return min(cands, key=lambda c: (abs(pos(c) - target), pos(c))) if cands else None


def _content(st: dict):
    if st["kind"] in ("contact", "activity"):
        return st["fields"]["arm"], st["truth"]
    if st["kind"] == "action_outcome":  # the ends of two different high-level actions
        return st["fields"]["action"], st["claim"]
    return st.get("value")


def swapped_frames(d: dict, target: int, ctx: dict) -> bool:
    steps = d["steps"]
    pairs = [
        (i, j)
        for i in range(len(steps))
        for j in range(i + 1, len(steps))
        if _free(steps[i])
        and _free(steps[j])
        and steps[i]["kind"] == steps[j]["kind"]
        and steps[i]["kind"] != "outcome"
        and _content(steps[i]) != _content(steps[j])
        and (steps[i]["kind"] not in ("contact", "activity") or steps[i]["fields"]["arm"] == steps[j]["fields"]["arm"])
    ]
    pair = _nearest(pairs, target, lambda p: p[0])
    if pair is None:
        return False
    a, b = steps[pair[0]], steps[pair[1]]
    for k in ("frames", "window", "unit_id"):
        a[k], b[k] = b[k], a[k]
    for st in (a, b):
        st["label"], st["error"] = -1, "swapped_frames"
    return True


def _shown(steps: list[dict], skip: int | None = None) -> set[tuple[str, int]]:
    """(unit, frame) of every frame the item's steps show, but step `skip`'s."""
    return {(st["unit_id"], f) for j, st in enumerate(steps) if j != skip for f in st["frames"]}


def _unshown_frames(run: dict, count: int, taken: set[tuple[str, int]], margin: int) -> list[int] | None:
    """`count` frames inside `run`'s window (at least `margin` frames from its ends, so not neutral) that no frame of
    `taken` is: each the one farthest from the taken frames and from those picked before (ties: the earlier).
    None when there are not that many."""
    uid, (s, e) = run["unit_id"], run["window"]
    lo, hi = s + margin, e - margin
    busy = [f for u, f in taken if u == uid and lo - 1 <= f <= hi + 1] + [lo - 1, hi + 1]
    picked: list[int] = []
    for _ in range(count):
        cands = [f for f in range(lo, hi + 1) if (uid, f) not in taken and f not in picked]
        if not cands:
            return None
        picked.append(max(cands, key=lambda f: (min(abs(f - a) for a in busy + picked), -f)))
    return sorted(picked)


def contact_flipped(d: dict, target: int, ctx: dict) -> bool:
    """A contact step keeps its sentence but is shown by other frames of a run of the same gripper in the opposite
    contact state (another step of the item), frames no other step of the item shows: so its claim states the
    opposite of what its frames show, and no two steps show the same image. The claim chain stays the alternating
    one of the derived runs: the text alone does not tell the step. An item whose opposite runs have no such frames
    does not take the kind."""
    steps = d["steps"]
    margin = int(ctx["tpl"].neutral_margin)
    cands = [
        (i, j)
        for i, st in enumerate(steps)
        if st["kind"] == "contact" and _free(st)
        for j, o in enumerate(steps)
        if j != i
        and o["kind"] == "contact"
        and o["label"] == 1
        and o["fields"]["arm"] == st["fields"]["arm"]
        and o["truth"] != st["truth"]
    ]
    for i, j in sorted(cands, key=lambda c: (abs(c[0] - target), c[0], abs(c[1] - c[0]), c[1])):
        other = steps[j]
        frames = _unshown_frames(other, len(other["frames"]), _shown(steps, skip=i), margin)
        if frames is None:
            continue
        st = steps[i]
        st["frames"], st["window"], st["unit_id"] = frames, other["window"], other["unit_id"]
        st["label"], st["error"] = -1, "contact_flipped"
        return True
    return False


def outcome_flipped(d: dict, target: int, ctx: dict) -> bool:
    """Only the step at the dealt target (an outcome step is then wrong as often as any position), and only while
    the source's failure claims stay wrong at most `failure_claims_wrong_share` of the time (ctx `claims`)."""
    st = d["steps"][target] if 0 <= target < len(d["steps"]) else None
    if st is None or st["kind"] not in ("outcome", "action_outcome") or st["truth"] is not True or not _free(st):
        return False
    claims = ctx.get("claims")
    if claims is not None and not claims.room():
        return False
    set_claim(st, False, "outcome_flipped")
    if claims is not None:
        claims.wrong += 1
    return True


def truncated_complete(d: dict, target: int, ctx: dict) -> bool:
    """Keep the steps before index k, then the success claim shown by the frames right after step k-1."""
    steps, tpl = d["steps"], ctx["tpl"]
    last = steps[-1]
    if last["kind"] not in ("outcome", "action_outcome") or last["truth"] is not True or not _free(last):
        return False
    if target != len(steps) - 1:
        return False  # the closing step takes an error only where the dealt position is the last
    w = int(tpl.two_frames_from)
    body = steps[:-1]
    cands = []
    # a truncated process keeps its length: the closing claim moves to the frames right after the last kept step,
    # before the closing window (so the item's length does not tell a truncated process). A REASSEMBLE action's last
    # primitive ends where the action does, so its chain leaves no such room and it never takes this kind.
    for k in range(len(body), len(body) + 1):
        prev = body[k - 1]
        if last["kind"] == "action_outcome" and (prev["kind"] != "primitive" or prev["action"] != last["action"]):
            continue
        start = prev["window"][1] + 1
        shown = _shown(body[:k])  # the closing frames are none a kept step shows
        if (
            prev["unit_id"] == d["unit_id"]
            and start + w - 1 < last["window"][0]
            and not any((d["unit_id"], f) in shown for f in step_frames((start, start + w - 1), tpl))
        ):
            cands.append((k, start))
    pick = _nearest(cands, target, lambda c: c[0])
    if pick is None:
        return False
    k, start = pick
    end = make_step(
        last["kind"],
        (start, start + w - 1),
        tpl,
        fields=last["fields"],
        truth=True,
        unit_id=d["unit_id"],
        camera=d["camera"],
        **({"action": last["action"]} if "action" in last else {}),
    )
    end["label"], end["error"] = -1, "truncated_complete"
    d["steps"] = body[:k] + [end]
    return True


def substituted_chain(d: dict, target: int, ctx: dict) -> bool:
    """REASSEMBLE: the chain of one of the item's high-level actions, frames from another recording's chain of the
    same action (same number of primitives, at least one differs; same split side and eval level)."""
    steps = d["steps"]
    best = None
    for act in sorted({st["action"] for st in steps if st["kind"] == "primitive"}):
        idx = [i for i, st in enumerate(steps) if st["kind"] == "primitive" and st["action"] == act]
        mine = [steps[i] for i in idx]
        if any(st["error"] not in (None, "natural_primitive_failure") for st in mine):
            continue
        texts = [st["value"] for st in mine]
        for donor in ctx["donors"].get(mine[0]["fields"]["action"], []):
            if (
                donor["unit_id"] == d["unit_id"]
                or (donor["split"], donor["eval_level"]) != (d.get("split"), d.get("eval_level"))
                or len(donor["chain"]) != len(mine)
            ):
                continue
            diff = [
                p
                for p, st in enumerate(donor["chain"])
                if st["value"] != texts[p] and st["label"] != 0 and mine[p]["label"] != 0
            ]
            if diff:
                first = idx[diff[0]]
                if best is None or (abs(first - target), first) < (abs(best[0] - target), best[0]):
                    best = (first, idx, donor)
                break
    if best is None:
        return False
    _, idx, donor = best
    for p, i in enumerate(idx):
        mine, other = steps[i], donor["chain"][p]
        new = {
            **mine,
            "frames": list(other["frames"]),
            "window": other["window"],
            "unit_id": other["unit_id"],
            "camera": other["camera"],
        }
        if mine["label"] == 0 or other["label"] == 0:
            new["label"], new["error"] = 0, None
        elif other["value"] != mine["value"]:
            new["label"], new["error"] = -1, "substituted_chain"
        else:
            new["label"], new["error"] = other["label"], other["error"]
        steps[i] = new
    return True


class FailureClaims:
    """The budget of `outcome_flipped`: a failure claim is a wrong step (flipped) at most `share` of the time, the
    rest being recorded failures stated as failures (`correct`), so the failure wording does not tell a wrong step."""

    def __init__(self, share: float, correct: int):
        self.share, self.correct, self.wrong = float(share), int(correct), 0

    def room(self) -> bool:
        return self.wrong + 1 <= self.share * (self.wrong + 1 + self.correct) + 1e-9


def failure_claims(drafts: list[dict], share: float | None) -> FailureClaims | None:
    """The budget over a source's drafts (None: no limit), counting the failure claims that are true."""
    if share is None:
        return None
    correct = sum(
        1
        for d in drafts
        for st in d["steps"]
        if st["kind"] in ("outcome", "action_outcome")
        and st["claim"] is False
        and st["truth"] is False
        and st["label"] == 1
    )
    return FailureClaims(share, correct)


KINDS = {
    "swapped_frames": swapped_frames,
    "substituted_chain": substituted_chain,
    "contact_flipped": contact_flipped,
    "outcome_flipped": outcome_flipped,
    "truncated_complete": truncated_complete,
}


def donors_of(chains: list[dict]) -> dict[str, list[dict]]:
    """High-level action text -> the chains that may stand in for it: [{unit_id, split, eval_level, chain}], sorted."""
    out: dict[str, list[dict]] = {}
    for c in sorted(chains, key=lambda c: (c["unit_id"], c["chain"][0]["window"][0])):
        out.setdefault(c["action_text"], []).append(c)
    return out


def inject(drafts: list[dict], tpl: StepTaskFile, seed: int, slug: str, donors: dict | None = None) -> dict:
    """Inject errors into `drafts` (in place, in their order); returns the counts per kind and the targets missed."""
    rng = rng_for(seed, "steps_inject", slug)
    kinds = [k for k in tpl.injected if k in KINDS]
    used = {k: 0 for k in kinds}
    ctx = {
        "tpl": tpl,
        "donors": donors or {},
        "claims": failure_claims(drafts, tpl.for_source(slug).failure_claims_wrong_share),
    }
    dealt = 0
    for d in drafts:
        d["injected"] = None
        if rng.random() < float(tpl.share_clean):
            continue
        frac = ((dealt * 7) % NEAR_FRACTIONS + 0.5) / NEAR_FRACTIONS  # 7 is coprime to 10: every fraction in turn
        dealt += 1
        target = int(frac * len(d["steps"]))
        for kind in sorted(kinds, key=lambda k: (used[k], kinds.index(k))):
            snapshot = [dict(st) for st in d["steps"]]
            if KINDS[kind](d, target, ctx):
                used[kind] += 1
                d["injected"] = kind
                break
            d["steps"] = snapshot
    return {"injected": used, "clean_or_natural_only": sum(1 for d in drafts if d["injected"] is None)}


def first_error_index(steps: list[dict]) -> int:
    return next((i for i, st in enumerate(steps) if st["label"] == -1), -1)
