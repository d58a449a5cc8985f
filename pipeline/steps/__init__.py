"""The process-verification step track (T13, configs/tasks/T13.yaml `track: steps`; docs/steps.md).

Plain functions over the label and IR tables (no Dagster). Building the items:

    units = items.source_steps(slug, ir, labels, template)      # per unit: ordered candidate steps / chains
    drafts = items.draft_items(slug, units, template, seed)     # items: ordered steps with labels (natural errors)
    drafts = perturb.inject(drafts, template, seed, donors)     # injected errors, living in the frames
    rows = rows.step_rows(drafts, ...)                          # the release rows (STEPS contract, schema.py)

Scoring them: the answer parser (parse.py), the release's step files (tables.py) and the blind gates of the validity
audit (gates.py); the step scorer (macro-F1, first-error score, baselines, intervals) is pipeline/scoring/steps.py,
beside the multiple-choice scorer. `processbench score` and the validity audit only call them. A release without step files has no step track: every
entry point then behaves as without this package.

`BUILDERS` is the registry line of the step families: task id -> the function building its draft items.
"""

from __future__ import annotations

from . import items

BUILDERS = {"T13": items.build_drafts}
