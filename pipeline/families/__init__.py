"""The twelve task families: one generator per family, each reading the label tables + IR of one source and its
YAML template (configs/tasks/T<n>.yaml), emitting an over-complete pool of candidate items (CANDIDATES contract).

    pool = build_candidates("gm100", ir, labels, cfg)     # polars DataFrame, sorted by candidate_key
    part = family_candidates("T5", "gm100", Context("gm100", ir, labels, cfg))   # one family's part of the pool
    part, left_out = family_part("T5", "gm100", ctx)      # and what its rules left out, per rule (figures)
    pool = merge_candidates("gm100", parts)                # the pool from its parts (pipeline/stages.py keeps them)

Template keys read here (per source where a mapping is keyed by source slugs and/or `default`; the model of a
template, with every key and its type, is pipeline/settings/models.py TaskFile):
    task_id, task_name, name_aliases, legacy_alias, input_type, num_choices, sources, quota, question, labels
    (closed label set: label -> choice text), frames (offsets / relative / centers / grid / segment_midpoints),
    candidates (stride, boundary_margin, cap_per_label, cap_per_unit), min_gap, balance_labels, distractors
    (policy all | neighbours | pairs | context | permutations), display_labels, choice_order, render, prompt.
Each generator counts, per rule it applies, what the rule looked at and what it left out (common.py `Spec.rule`,
`LeftOut`): the figures are kept with the family's part of the pool and word a quota shortfall's reason
(pipeline/items/shortfall.py), e.g. REASSEMBLE T7's `same_task_pools` leaving out the successes no failure pairs.
The selection (pipeline.items.selection) picks the quota from the pool; nothing here is random except seeded choices
(display order of T8/T9, ties among distractors), keyed by the candidate key, so the pool is deterministic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl


from .common import CANDIDATE_SCHEMA, LeftOut, Spec, empty_candidates
from .context import Context
from .framewise import t1_phase, t2_contact, t3_direction, t4_coordination, t6_motion
from .outcome import t7_outcome
from .progress import t5_progress
from .primitives import t10_current, t11_next, t12_chain
from .temporal import answer_for, canonical_choices, t8_ordering, t9_priority

if TYPE_CHECKING:
    from pipeline.settings.root import Settings

GENERATORS = {
    "T1": t1_phase,
    "T2": t2_contact,
    "T3": t3_direction,
    "T4": t4_coordination,
    "T5": t5_progress,
    "T6": t6_motion,
    "T7": t7_outcome,
    "T8": t8_ordering,
    "T9": t9_priority,
    "T10": t10_current,
    "T11": t11_next,
    "T12": t12_chain,
}

__all__ = [
    "build_candidates",
    "family_candidates",
    "family_part",
    "LeftOut",
    "merge_candidates",
    "enabled_families",
    "Context",
    "GENERATORS",
    "CANDIDATE_SCHEMA",
    "Spec",
    "answer_for",
    "canonical_choices",
    "empty_candidates",
]


def enabled_families(cfg: Settings, source: str) -> list[str]:
    """The families whose template lists the source (with a quota), in task order."""
    return [t for t in cfg.task_ids if Spec(cfg, t, source).enabled]


def family_candidates(task_id: str, source: str, ctx: Context) -> pl.DataFrame:
    """One family's candidates for one source (CANDIDATE_SCHEMA; the family must be enabled for the source)."""
    return family_part(task_id, source, ctx)[0]


def family_part(task_id: str, source: str, ctx: Context) -> tuple[pl.DataFrame, list[dict]]:
    """One family's candidates for one source and what its generator's rules left out (`LeftOut.figures()`)."""
    if task_id not in GENERATORS:
        raise KeyError(f"no generator for task family {task_id}")
    spec = Spec(ctx.cfg, task_id, source)
    return GENERATORS[task_id](spec, ctx), spec.left_out.figures()


def merge_candidates(source: str, parts: list[pl.DataFrame]) -> pl.DataFrame:
    """The pool from its families' parts: one table sorted by candidate_key (keys must be unique)."""
    parts = [p for p in parts if p.height]
    if not parts:
        return empty_candidates()
    pool = pl.concat(parts, how="vertical").sort("candidate_key")
    dup = pool.height - pool.get_column("candidate_key").n_unique()
    if dup:
        raise ValueError(f"{source}: {dup} duplicate candidate keys")
    return pool


def build_candidates(
    source: str, ir: dict[str, pl.DataFrame], labels: dict[str, pl.DataFrame], cfg: Settings
) -> pl.DataFrame:
    """The full candidate pool of one source: every family whose template lists the source (with a quota)."""
    ctx = Context(source, ir, labels, cfg)
    return merge_candidates(source, [family_candidates(t, source, ctx) for t in enabled_families(cfg, source)])
