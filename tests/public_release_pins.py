"""The public release's pins: what the reference ProcessBench release published for its twelve task families, which
this build reproduces (docs/release-format.md): the public task names, option counts, legacy aliases, question texts
and the per-source quotas at release scale.

Tests compare the configs with these pins for the pinned families only. A family added later (T13, ...) is not
pinned here, and a test that enumerates families reads them from the configs (`pipeline.settings.config.task_ids`), so adding
one is a YAML template and a registry line (tests/test_new_family.py), with no other test to edit.
"""

from __future__ import annotations

TASK_NAMES = {
    "T1": "Phase Recognition",
    "T2": "Contact Detection",
    "T3": "Motion Direction Prediction",
    "T4": "Bimanual Coordination State",
    "T5": "Primitive-local Progress",
    "T6": "Motion State Recognition",
    "T7": "Operation Outcome Prediction",
    "T8": "Temporal Ordering",
    "T9": "Temporal Priority Prediction",
    "T10": "Current Primitive Recognition",
    "T11": "Next Primitive Prediction",
    "T12": "Primitive Chain Restoration",
}
NUM_CHOICES = {
    "T1": 4,
    "T2": 2,
    "T3": 4,
    "T4": 4,
    "T5": 3,
    "T6": 2,
    "T7": 2,
    "T8": 6,
    "T9": 2,
    "T10": 4,
    "T11": 4,
    "T12": 4,
}
# task_type_legacy of the public rows where it differs from the task id (T9: per source)
LEGACY_ALIASES = {"T5": "T_progress", "T8": "T_temporal", "T9": {"aist": "T9", "default": "T_binary"}}
QUESTIONS = {  # (family, source | default) -> question text (T11 and T12 changed on purpose: see their YAML)
    ("T1", "default"): "Which phase best describes the current robot manipulation state?",
    ("T2", "gm100"): "Is the {arm} gripper currently in contact with anything?",
    ("T2", "default"): "Is the end effector currently in contact with anything?",
    ("T3", "gm100"): "In which direction does the {arm} robot arm primarily move in the scene?",
    ("T3", "default"): "In which direction does the robot arm primarily move across these time-ordered frames?",
    ("T3", "aist"): "In which direction does the {arm} robot arm primarily move across these time-ordered frames?",
    ("T4", "default"): "Across these time-ordered frames, which bimanual activity state best describes the robot?",
    ("T5", "default"): "Across these time-ordered frames, how far along is the current manipulation step?",
    ("T6", "default"): "Across these time-ordered frames, is the robot arm actively moving or stationary?",
    ("T6", "aist"): "Across these time-ordered frames, is the {arm} robot arm actively moving or stationary?",
    ("T7", "rh20t"): "Based on these early frames of the episode, will this manipulation attempt eventually succeed?",
    (
        "T7",
        "reassemble",
    ): "Based on these early frames of the current operation, will this operation eventually succeed?",
    ("T8", "default"): "Order these three frames from earliest to latest in the manipulation sequence.",
    ("T10", "default"): "What is the current low-level action in these ordered frames?",
    ("T11", "default"): "What low-level action should happen next, after the one under way in these frames?",
    # T12: the public text named the high-level action and both neighbours, which left one likely answer
    ("T12", "default"): "These frames show a local chain of low-level actions, before > [MASK] > after, in time order: "
    "the first frame the action before, the middle frames the masked action, the last frame the "
    "action after. Which action fills [MASK]?",
}
# source -> family -> items at release scale
QUOTAS = {
    "gm100": {"T1": 3000, "T2": 1000, "T3": 2500, "T4": 1500, "T5": 2500, "T6": 1500, "T8": 2000, "T9": 1500},
    "rh20t": {"T1": 2000, "T2": 1500, "T3": 1800, "T5": 2300, "T6": 1500, "T7": 4000, "T8": 1200, "T9": 1500},
    "reassemble": {
        "T1": 2523,
        "T2": 2523,
        "T5": 2931,
        "T6": 1260,
        "T7": 1110,
        "T8": 907,
        "T9": 1849,
        "T10": 2438,
        "T11": 1338,
        "T12": 286,
    },
    "aist": {"T3": 3041, "T4": 1989, "T6": 1597, "T8": 2200, "T9": 600},
}
QUOTA_TOTALS = {"gm100": 15500, "rh20t": 15800, "reassemble": 17165, "aist": 9427}
RELEASE_ITEMS = 57892  # every source's quotas together
