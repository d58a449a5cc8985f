"""Injected errors of the step track, living in the frames (or in a claim the frames refute), never in how a sentence
is worded: the sentences come from the same templates as correct steps, and nothing in a row's model-facing text or
in a file name says which step was touched (docs/steps.md).

    swapped_frames      the step and another step of its kind whose content differs swap their frames: both become
                        false (two primitives, two phases, a gripper's contact and no-contact runs, the ends of two
                        different high-level actions)
    substituted_chain   REASSEMBLE: a primitive step is shown by the frames of another recording's chain of the same
                        high-level action (same split side and level), of a primitive that differs from the step's
    contact_flipped     a contact step keeps its sentence and is shown by frames of a run of the same gripper in the
                        opposite state: its claim states the opposite of what its frames show
    outcome_flipped     an outcome sentence states failure where the record says success
    truncated_complete  the process is cut short and closes with the success claim, shown by the frames right after
                        the last kept step (the task is not complete there; none a kept step shows, nor one within
                        `min_frame_gap` of them)

Where (`inject`): every correct scored step is the site of an injected error with the same probability
(`error_rate`, drawn per step), so neither a step's position nor its item tells it; the kind is drawn among those the
site's step kind admits (SITES). A kind the site cannot take (no partner to swap with, no opposite contact run, a
claim budget spent) leaves the site correct rather than passing it to another kind: a fallback would give the kinds
an item can take alone (a contact flip where no swap fits) to the items and steps where they are the only choice,
and their context would tell them. One kind makes at most `max_wrong_share` of the scored steps of a step kind and
claim wrong. An item may take several errors.

Each kind is `KINDS[kind](draft, site, ctx) -> bool` (False: not applicable, the draft unchanged); ctx holds the
template (`tpl`), a draw `u` in [0, 1) for the kind's own choices (the partner, the run, the donor), the donors of
substituted_chain and the failure-claim budget (`claims`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.core.seeding import rng as rng_for
from .items import make_step, set_claim, step_frames, too_close

if TYPE_CHECKING:
    from pipeline.settings.steps import StepTaskFile

OUTCOME_KINDS = ("outcome", "action_outcome")


def _free(st: dict) -> bool:
    return st["label"] == 1 and st["error"] is None


def _from_draw(cands: list, ctx: dict) -> list:
    """`cands` (in a fixed order) rotated to start at the one the draw `ctx["u"]` falls on (0 without one): each is as
    likely to be tried first."""
    if not cands:
        return []
    k = min(len(cands) - 1, int(float(ctx.get("u") or 0.0) * len(cands)))
    return cands[k:] + cands[:k]


def _content(st: dict):
    if st["kind"] in ("contact", "activity"):
        return st["fields"]["arm"], st["truth"]
    if st["kind"] == "action_outcome":  # the ends of two different high-level actions
        return st["fields"]["action"], st["claim"]
    return st.get("value")


def swapped_frames(d: dict, site: int, ctx: dict) -> bool:
    """The site and a partner (drawn among the steps of its kind, free, whose content differs; a contact or activity
    step: of the same arm) swap their frames."""
    steps = d["steps"]
    a = steps[site]
    if not _free(a) or a["kind"] == "outcome":
        return False
    partners = [
        j
        for j, b in enumerate(steps)
        if j != site
        and _free(b)
        and b["kind"] == a["kind"]
        and _content(b) != _content(a)
        and (a["kind"] not in ("contact", "activity") or a["fields"]["arm"] == b["fields"]["arm"])
    ]
    if not partners:
        return False
    b = steps[_from_draw(partners, ctx)[0]]
    for k in ("frames", "window", "unit_id"):
        a[k], b[k] = b[k], a[k]
    for st in (a, b):
        st["label"], st["error"] = -1, "swapped_frames"
    return True


def _shown(steps: list[dict], skip: int | None = None) -> set[tuple[str, int]]:
    """(unit, frame) of every frame the item's steps show, but step `skip`'s."""
    return {(st["unit_id"], f) for j, st in enumerate(steps) if j != skip for f in st["frames"]}


def _unshown_frames(run: dict, count: int, taken: set[tuple[str, int]], margin: int, gap: int) -> list[int] | None:
    """`count` frames inside `run`'s window (at least `margin` frames from its ends, so not neutral) at least `gap`
    frames from every frame of `taken` and from each other: each the one farthest from the taken frames and from
    those picked before (ties: the earlier). None when there are not that many."""
    uid, (s, e) = run["unit_id"], run["window"]
    lo, hi = s + margin, e - margin
    busy = [f for u, f in taken if u == uid and lo - gap <= f <= hi + gap] + [lo - 1, hi + 1]
    picked: list[int] = []
    for _ in range(count):
        cands = [f for f in range(lo, hi + 1) if not too_close([f], uid, taken | {(uid, p) for p in picked}, gap)]
        if not cands:
            return None
        picked.append(max(cands, key=lambda f: (min(abs(f - a) for a in busy + picked), -f)))
    return sorted(picked)


def contact_flipped(d: dict, site: int, ctx: dict) -> bool:
    """The site (a contact step) keeps its sentence but is shown by frames of a run of the same gripper in the
    opposite state - any such run of the unit (`d["runs"]`: the unit's contact runs; without it, the item's own
    contact steps), drawn, at least `neutral_margin` from the run's ends and `min_frame_gap` from every frame another
    step of the item shows. The claim chain stays the alternating one of the derived runs, so the text alone does not
    tell the step; any contact step of a unit with both states can take it (with the item's own runs only, steps next
    to the item's other state - the last no-contact run after a release - were flipped three times as often)."""
    steps = d["steps"]
    st = steps[site]
    if st["kind"] != "contact" or not _free(st):
        return False
    margin, gap = int(ctx["tpl"].neutral_margin), int(ctx["tpl"].min_frame_gap)
    runs = [
        o
        for o in d.get("runs") or [o for o in steps if o["kind"] == "contact"]
        if o["kind"] == "contact"
        and o["label"] == 1
        and o["unit_id"] == st["unit_id"]
        and o["fields"]["arm"] == st["fields"]["arm"]
        and o["truth"] != st["truth"]
    ]
    for other in _from_draw(sorted(runs, key=lambda o: o["window"]), ctx):
        frames = _unshown_frames(other, len(st["frames"]), _shown(steps, skip=site), margin, gap)
        if frames is None:
            continue
        st["frames"], st["window"], st["unit_id"] = frames, other["window"], other["unit_id"]
        st["label"], st["error"] = -1, "contact_flipped"
        return True
    return False


def outcome_flipped(d: dict, site: int, ctx: dict) -> bool:
    """The site (an outcome step whose record is success) states failure, only while the source's failure claims
    stay wrong at most `failure_claims_wrong_share` of the time (ctx `claims`)."""
    st = d["steps"][site]
    if st["kind"] not in OUTCOME_KINDS or st["truth"] is not True or not _free(st):
        return False
    claims = ctx.get("claims")
    if claims is not None and not claims.room():
        return False
    set_claim(st, False, "outcome_flipped")
    if claims is not None:
        claims.wrong += 1
    return True


def truncated_complete(d: dict, site: int, ctx: dict) -> bool:
    """The site (the closing outcome step, the item's last) claims success shown by the frames right after the step
    before it, before the closing window: the process is cut there, and keeps its length (a shorter item would tell
    it). A REASSEMBLE action whose whole chain is shown ends where its last primitive does: no room, never taken."""
    steps, tpl = d["steps"], ctx["tpl"]
    last = steps[-1]
    if site != len(steps) - 1 or last["kind"] not in OUTCOME_KINDS or last["truth"] is not True or not _free(last):
        return False
    w = int(tpl.two_frames_from)
    body = steps[:-1]
    prev = body[-1]
    if last["kind"] == "action_outcome" and (prev["kind"] != "primitive" or prev["action"] != last["action"]):
        return False
    start = prev["window"][1] + 1
    shown = _shown(body)  # the closing frames are none a kept step shows, nor near one
    if (
        prev["unit_id"] != d["unit_id"]
        or start + w - 1 >= last["window"][0]
        or too_close(step_frames((start, start + w - 1), tpl), d["unit_id"], shown, int(tpl.min_frame_gap))
    ):
        return False
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
    d["steps"] = body + [end]
    return True


def substituted_chain(d: dict, site: int, ctx: dict) -> bool:
    """REASSEMBLE: the site (a primitive step) is shown by the frames of a primitive of another recording's chain of
    the same high-level action (same split side and eval level) whose primitive differs from the step's: of those,
    the one nearest the step's place in its own chain, none within `min_frame_gap` of a frame another step of the
    item shows (two sites of an item may draw the same donor); donors are tried from a drawn one on. Any primitive can take
    it (substituting a whole chain made only the positions where two recordings' chains of an action differ wrong:
    an Align in a Pick, a Nudge in an Insert, and the text told them)."""
    steps = d["steps"]
    st = steps[site]
    if st["kind"] != "primitive" or not _free(st):
        return False
    place = sum(1 for o in steps[:site] if o["kind"] == "primitive" and o["action"] == st["action"])
    donors = [
        c
        for c in ctx["donors"].get(st["fields"]["action"], [])
        if c["unit_id"] != d["unit_id"] and (c["split"], c["eval_level"]) == (d.get("split"), d.get("eval_level"))
    ]
    shown, gap = _shown(steps, skip=site), int(ctx["tpl"].min_frame_gap)
    for donor in _from_draw(donors, ctx):
        far = [
            (abs(q - place), q)
            for q, o in enumerate(donor["chain"])
            if o["value"] != st["value"] and o["label"] == 1 and not too_close(o["frames"], o["unit_id"], shown, gap)
        ]
        if not far:
            continue
        other = donor["chain"][min(far)[1]]
        steps[site] = {
            **st,
            "frames": list(other["frames"]),
            "window": other["window"],
            "unit_id": other["unit_id"],
            "camera": other["camera"],
            "label": -1,
            "error": "substituted_chain",
        }
        return True
    return False


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
        if st["kind"] in OUTCOME_KINDS and st["claim"] is False and st["truth"] is False and st["label"] == 1
    )
    return FailureClaims(share, correct)


KINDS = {
    "swapped_frames": swapped_frames,
    "substituted_chain": substituted_chain,
    "contact_flipped": contact_flipped,
    "outcome_flipped": outcome_flipped,
    "truncated_complete": truncated_complete,
}
# the step kinds each injected kind can take as its site (None: every kind but the outcome step)
SITES = {
    "swapped_frames": None,
    "substituted_chain": ("primitive",),
    "contact_flipped": ("contact",),
    "outcome_flipped": OUTCOME_KINDS,
    "truncated_complete": OUTCOME_KINDS,
}


def admits(kind: str, step_kind: str) -> bool:
    sites = SITES[kind]
    return step_kind != "outcome" if sites is None else step_kind in sites


def donors_of(chains: list[dict]) -> dict[str, list[dict]]:
    """High-level action text -> the chains that may stand in for it: [{unit_id, split, eval_level, chain}], sorted."""
    out: dict[str, list[dict]] = {}
    for c in sorted(chains, key=lambda c: (c["unit_id"], c["chain"][0]["window"][0])):
        out.setdefault(c["action_text"], []).append(c)
    return out


def _sentence_kind(st: dict) -> tuple:
    """What a step's sentence says apart from its fields: its step kind and claim (a contact and a no-contact
    claim read differently)."""
    return st["kind"], st["claim"]


def _sentence_counts(steps: list[dict]) -> dict[tuple, int]:
    """Scored steps per sentence kind."""
    out: dict[tuple, int] = {}
    for st in steps:
        if st["label"] in (1, -1):
            out[_sentence_kind(st)] = out.get(_sentence_kind(st), 0) + 1
    return out


class Budgets:
    """One injected kind makes at most `share` of the scored steps of a sentence kind wrong, over a source's drafts.
    The scored steps are counted as errors change them (outcome_flipped turns a success claim into a failure claim:
    its share is of the failure claims it adds to)."""

    def __init__(self, drafts: list[dict], share: float):
        self.share = share
        self.scored: dict[tuple, int] = {}
        for d in drafts:
            for k, n in _sentence_counts(d["steps"]).items():
                self.scored[k] = self.scored.get(k, 0) + n
        self.wrong: dict[tuple[str, tuple], int] = {}

    def take(self, kind: str, before: list[dict], after: list[dict]) -> bool:
        """Whether the change of one draft's steps from `before` to `after` (kind `kind` injected) keeps every
        sentence kind within the share; if so it is counted."""
        old, new = _sentence_counts(before), _sentence_counts(after)
        scored = {k: self.scored.get(k, 0) + new.get(k, 0) - old.get(k, 0) for k in set(self.scored) | set(new)}
        hit: dict[tuple, int] = {}
        for side, steps in ((1, after), (-1, before)):
            for st in steps:
                if st["error"] == kind and st["label"] == -1:
                    hit[_sentence_kind(st)] = hit.get(_sentence_kind(st), 0) + side
        if any(self.wrong.get((kind, k), 0) + n > self.share * scored.get(k, 0) for k, n in hit.items() if n > 0):
            return False
        self.scored = scored
        for k, n in hit.items():
            self.wrong[(kind, k)] = self.wrong.get((kind, k), 0) + n
        return True


def inject(drafts: list[dict], tpl: StepTaskFile, seed: int, slug: str, donors: dict | None = None) -> dict:
    """Inject errors into `drafts` (in place, in a drawn order; module docstring): returns the errors per kind, the
    sites drawn that took none (`missed`) and the items without an injected error. Each draft gets `injected`, the
    kinds it took in order."""
    rng = rng_for(seed, "steps_inject", slug)
    kinds = [k for k in tpl.injected if k in KINDS]
    used = {k: 0 for k in kinds}
    missed = {k: 0 for k in kinds}
    budgets = Budgets(drafts, float(tpl.max_wrong_share))
    rate = float(tpl.error_rate)
    ctx = {
        "tpl": tpl,
        "donors": donors or {},
        "claims": failure_claims(drafts, tpl.for_source(slug).failure_claims_wrong_share),
    }
    for k in rng.permutation(len(drafts)).tolist():  # a drawn order: a budget runs out over all units alike
        d = drafts[k]
        d["injected"] = []
        draws = rng.random((len(d["steps"]), 3)).tolist()  # per step: site or not, which kind, the kind's own draw
        for site, (take, which, u) in enumerate(draws):
            if take >= rate or site >= len(d["steps"]) or not _free(d["steps"][site]):
                continue  # not drawn, or already wrong (a partner of an earlier swap), neutral or a natural error
            options = [kind for kind in kinds if admits(kind, d["steps"][site]["kind"])]
            if not options:
                continue
            kind = options[int(which * len(options))]
            ctx["u"] = u
            snapshot = [dict(st) for st in d["steps"]]
            claims = ctx["claims"].wrong if ctx["claims"] is not None else None
            if KINDS[kind](d, site, ctx) and budgets.take(kind, snapshot, d["steps"]):
                used[kind] += 1
                d["injected"].append(kind)
                continue
            if claims is not None:
                ctx["claims"].wrong = claims
            d["steps"] = snapshot
            missed[kind] += 1
    return {
        "injected": used,
        "missed": missed,
        "clean_or_natural_only": sum(1 for d in drafts if not d["injected"]),
    }


def first_error_index(steps: list[dict]) -> int:
    return next((i for i, st in enumerate(steps) if st["label"] == -1), -1)
