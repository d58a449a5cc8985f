"""Segment pass (REASSEMBLE): high-level segments with their primitive chains, and the per-frame phase, contact and
local steps that the segment-based methods read from the primitive labels."""

from __future__ import annotations

import numpy as np

from .contact import primitive_contact
from .outcome import distinct_chain
from .phase import phase_from_primitive
from .text import high_level_verb, is_no_action, normalize_text


def segment_pass(
    source: str,
    uid: str,
    useg: dict,
    n: int,
    phases: list,
    phase_spec: dict,
    contact_spec: dict,
    steps_spec: dict,
    phase_codes: np.ndarray,
    T: dict,
) -> tuple[list[dict], np.ndarray | None]:
    """Fill the segments / primitives tables of one unit, write the primitive phases into `phase_codes` (method
    low_level_map), and return (high-segment steps (method high_segments), per-frame contact (method
    low_level_labels) or None)."""
    steps: list[dict] = []
    if not useg["high"]:
        return steps, None
    phase_map = phase_spec["method"] == "low_level_map"
    contact_lbl = contact_spec["method"] == "low_level_labels"
    high_steps = steps_spec["method"] == "high_segments"
    prim_contact = np.full(n, -1, dtype=np.int8)
    if contact_lbl:
        hold_start = {normalize_text(x).lower() for x in contact_spec["hold_start_labels"]}
        hold_end = {normalize_text(x).lower() for x in contact_spec["hold_end_labels"]}
    held = False  # an object is in the gripper (REASSEMBLE: from a Grasp to the next Release)
    for h in useg["high"]:
        htext = normalize_text(h["text"])
        hs, he = int(h["start_frame"]), int(h["end_frame"])
        lows = useg["low"].get(h["seg_index"], [])
        chain = distinct_chain([lw["text"] for lw in lows])
        T["segments"].add(
            source=source,
            unit_id=uid,
            seg_index=int(h["seg_index"]),
            text=htext,
            verb=high_level_verb(htext),
            no_action=is_no_action(htext),
            start_frame=hs,
            end_frame=he,
            success=h["success"],
            chain=[c[0] for c in chain],
            chain_start=[int(lows[c[1]]["start_frame"]) for c in chain],
            chain_end=[int(lows[c[2]]["end_frame"]) for c in chain],
        )
        if is_no_action(htext):
            if phase_map:
                phase_codes[hs : he + 1] = phases.index(phase_spec["no_action"])
            if contact_lbl:
                prim_contact[hs : he + 1] = int(held)
            continue
        texts = [normalize_text(lw["text"]) for lw in lows]
        for i, lw in enumerate(lows):
            ls, le = int(lw["start_frame"]), int(lw["end_frame"])
            nxt = next((x for x in texts[i + 1 :] if x != texts[i]), None)
            ph = phase_from_primitive(lw["text"], htext, phase_spec["map"]) if phase_map else None
            ct = None
            if contact_lbl:
                ct = primitive_contact(lw["text"], contact_spec["no_contact_labels"])
                ct = True if held else ct  # holding the object is contact, whatever the primitive
                low = texts[i].lower()
                held = True if low in hold_start else (False if low in hold_end else held)
            if ph is not None:
                phase_codes[ls : le + 1] = phases.index(ph)
            if ct is not None:
                prim_contact[ls : le + 1] = int(ct)
            T["primitives"].add(
                source=source,
                unit_id=uid,
                parent_index=int(h["seg_index"]),
                seg_index=int(lw["seg_index"]),
                text=texts[i],
                start_frame=ls,
                end_frame=le,
                phase=ph,
                contact=ct,
                next_text=nxt,
                high_text=htext,
                high_verb=high_level_verb(htext),
                high_success=h["success"],
            )
        if high_steps and (h["success"] or not steps_spec["success_only"]):
            steps.append(
                {
                    "start": hs,
                    "end": he,
                    "arm_pattern": "single",
                    "text": htext,
                    "success": h["success"],
                    "kind": "high_segment",
                }
            )
    contact = np.where(prim_contact < 0, None, prim_contact == 1) if contact_lbl else None
    return steps, contact
