"""Process labels: small source-agnostic rules that turn the episode IR into per-frame process labels.

Every threshold comes from configs/labels.yaml (`cfg.labels`, one entry per source in every section). Each label
dimension is one module with its own table of methods (labels.<section>.<source>.method -> function): contact,
phase, motion, direction, coordination, steps (local steps / progress), outcome, segments (primitive chains). The
rule functions take plain numpy arrays and explicit parameters so that each can be tested on hand-made signals.
`compute_labels(source, ir, cfg)` applies them to one source partition and returns these tables (polars):

units       one row per unit
            source, unit_id, camera, fps, num_frames, arm_type (GM-100 from arm activity; "single_arm" for a
            single-arm unit; null for other bimanual hardware), primary_arm (left | right | both | single | null),
            outcome (success | failure | null: RH20T rating rule), rating, meta_json (per-unit thresholds, evidence)
frames      one row per unit and frame of the primary camera (frame_index 0..num_frames-1)
            source, unit_id, frame_index, phase (one of labels.phases | null), motion (moving | stationary | null,
            the unit's arm; bimanual: combined as configured), motion_mean (window mean speed behind it),
            coord (both_active | left_only | right_only | both_idle | null; bimanual units only, null near a change
            or in a short run), step_id (local step holding the frame | null), step_u (progress 0..1 | null),
            progress (early | middle | late | null near a bin edge)
arms        one row per unit, arm and frame
            source, unit_id, arm, frame_index, speed (native or derived), speed_s (smoothed), motion, motion_mean,
            still_thr, move_thr (the thresholds behind motion), active (coordination activity | null),
            contact (bool | null where the source or the arm has no contact rule), direction (left | right | up |
            down | null), dir_mag (dominant image-axis displacement), dir_purity
steps       one row per local step (interval): source, unit_id, step_id, start_frame, end_frame (inclusive), kind
            (contact_step | interaction_run | high_segment), arm_pattern, text (REASSEMBLE high-level text), success
segments    REASSEMBLE high-level segments with their primitive chains
            source, unit_id, seg_index, text (trailing period removed), verb (lower case), no_action, start_frame,
            end_frame, success, chain (distinct consecutive low-level labels), chain_start, chain_end (frame range of
            each chain element's run)
primitives  REASSEMBLE low-level segments
            source, unit_id, parent_index, seg_index, text, start_frame, end_frame, phase, contact, next_text (next
            distinct label within the same high-level segment | null), high_text, high_verb, high_success

Tables are sorted by their keys; the same IR and config give identical tables.
"""

from .contact import (
    CONTACT_METHODS,
    detect_effort_contacts,
    effort_baseline,
    force_contact_mask,
    gripper_hold_mask,
    primitive_contact,
)
from .coordination import (
    ACTIVITY_MODES,
    COORD_STATES,
    activity_mask,
    arm_type_from_activity,
    coordination_codes,
    stable_codes,
)
from .direction import DIRECTION_METHODS, DIRECTIONS, direction_label, direction_labels, direction_mapping
from .driver import compute_labels, compute_labels_isolated, source_spec
from .motion import MOTION_MODES, classify_motion, motion_thresholds
from .outcome import OUTCOME_METHODS, distinct_chain, outcome_from_rating
from .phase import PHASE_METHODS, PHASE_NULL, phase_from_contacts, phase_from_primitive
from .signals import (
    box,
    derive_speed,
    drop_short_runs,
    ema,
    events_to_mask,
    hysteresis,
    runs,
    smooth,
    value_runs,
    window_mean,
)
from .steps import (
    PROGRESS_BINS,
    STEP_METHODS,
    merge_anchor_events,
    moving_mask_hysteresis,
    progress_bin,
    progress_u,
    steps_from_contact_anchors,
    steps_from_runs,
)
from .tables import TABLE_SCHEMAS
from .text import NO_ACTION, high_level_verb, is_no_action, normalize_text
