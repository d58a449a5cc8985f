"""The split stage: isolation groups, the stratified eval selection, optional out-of-distribution eval levels.

Pure functions over tables (no Dagster), configured by the merged config's `cfg.split` (configs/split.yaml, here
called `policy`: `cfg.split.model_dump()`, its seed `cfg.split_seed`: split.seed, else build.release_seed). Modules:
policy (config lookups), groups (union-find over isolation keys), objective (the pool and J), public (the public
rule), ours (our rule), report, assign (split_items, OOD levels), levels (which values an OOD level holds out: the
label-balanced choice), checks, pool_file (`processbench split`).

    groups = build_groups(items, units, policy)             # (source, unit_id) -> split_group_id (union-find merges)
    out, summary = split_items(items, groups, policy, seed)  # + split, split_group_id (, eval_level)
    leaked_groups(out) == []                                 # isolation check
    group_lists(out)                                         # {"eval": [...], "sft": [...]} for metadata/*.txt
    split_pool_file(pool_jsonl, out_dir, config_file)        # `processbench split --items POOL.jsonl --out DIR`

Selection, per source (docs/release-format.md, "Split"): the number of eval groups is max(1, round(eval_ratio × groups))
with Python's round, as the public script. Both rules minimise the public objective J over the eval group set S

    J(S) = Σ_t w_t·|n_t − r·N_t| / max(r·N_t, 1) + zero_penalty·w_t·[r·N_t ≥ 1 ∧ n_t = 0]
           + items_weight·|n − r·N| / max(r·N, 1)

* `public_rule` re-implements the public script's search: greedy from a shuffled order, at most `swap_passes` best
  swaps among the top-`swap_candidates` groups each way (ranked by Σ_t w_t·count·deficit/target), `restarts`
  restarts seeded from random.Random(42), keep the best. Numerically it sums J in a fixed family order (the public
  script sums in the pool's first-seen order), so ties decided in the last bit may differ; the algorithm is the same.
* `our_rule` (default), shares first, answers second (each family's answer labels, `objective.balance_on`; letters for
  pools that carry letters only). Phase 1 minimises J: exact search over every eval set when
  C(groups, m) ≤ exact_max_combinations (REASSEMBLE: C(37,6)), otherwise best-swap sweeps from the public set and
  seeded random sets (random starts escape the greedy basin the public rule ends in). Phase 2 minimises
  J + letter_weight·(L + letter_l1_weight·L1) under J ≤ cap = min(J_public, J_phase1 + share_slack), with
  L = Σ_t (k_t·majority_answer_share_t − 1) (0 = every answer equally frequent in eval; unweighted) and L1 the
  answers' L1 distance from uniform (a smooth companion that guides the search), by sweeps from every phase-1
  optimum, iterated local search (random kicks + sweeps) on the best, and the public set itself if it is within the
  cap and better. Hence J(ours) ≤ J(public) on the same pool (exact search: see below); and when the public set was within the cap
  (else J(ours) < J(public)), J + λ·(L + μ·L1) is no worse either: ours never loses on both. Iteration counts
  come from work budgets divided by m·(groups − m), so they depend on the pool, never on the clock. Objective comparisons are quantised to 1e-10, ties go to the lowest index, and
  every RNG derives from (seed, stage, source): the result does not hinge on the last bit of a float sum.
  The exact search first restricts the sets to those whose worst family share is within `max_family_deviation_pts`
  of r (or, if none is, to those with the least worst deviation), then to `families_not_worse_than_public` unless
  that leaves none; J(ours) ≤ J(public) then holds whenever the public set meets the bound (ours._exact).

Group ids: a unit's group is its unit_id (the public release) unless the policy merges units sharing a stricter key
(`merge_keys`; a key is a unit field or a tuple of fields, e.g. [task_id, scene_id]): a merged group is named
"<key>=<smallest value of key in the group>" (first listed key the group has a value of; fields joined by "+",
values by ","). Merged ids contain "=" and never collide with unit ids.
"""

from .assign import split_items
from .checks import (
    group_count_problems,
    group_lists,
    held_out_problems,
    isolation_key_problems,
    leaked_groups,
    level_count_problems,
    level_share_warnings,
)
from .groups import GROUPS_SCHEMA, build_groups
from .objective import Selection, SplitPool, make_pool
from .ours import our_rule
from .policy import UNIT_KEYS, family_sort_key, load_policy, n_eval_groups
from .pool_file import split_pool_file
from .public import public_rule
from .report import eval_letter_report

__all__ = [
    "GROUPS_SCHEMA",
    "UNIT_KEYS",
    "Selection",
    "SplitPool",
    "build_groups",
    "eval_letter_report",
    "family_sort_key",
    "group_count_problems",
    "group_lists",
    "held_out_problems",
    "isolation_key_problems",
    "leaked_groups",
    "level_count_problems",
    "level_share_warnings",
    "load_policy",
    "make_pool",
    "n_eval_groups",
    "our_rule",
    "public_rule",
    "split_items",
    "split_pool_file",
]
