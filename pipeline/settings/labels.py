"""The model of configs/labels.yaml (section `labels`): the label stage's rules, per source where the sources differ.

Each per-source section is a `BySource`: its shared keys are fields, its source entries are typed by `entries`.
Where a source picks a method (`contact.<slug>.method`, `phase`, `steps`, `outcome`), the entry is the model of that
method (a discriminated union on `method`), so a key of another method is an error too. To add a key: add a field to
the model of its method or section; to add a method: add a model with `method: Literal["name"]` to the union.
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import Field

from pipeline.settings.types import BySource, Slug, Strict

Smooth = Literal["none", "ema", "box"]


# ---------------------------------------------------------------------------------------------- speed
class SpeedRule(Strict):
    smooth: Smooth = "none"
    span: int = Field(1, ge=1)


class SpeedSection(BySource):
    entries: dict[Slug, SpeedRule] = {}


# ---------------------------------------------------------------------------------------------- contact
class GripperHold(Strict):
    enabled: bool = True
    open_quantile: float = 0.95
    closed_width: float = 0.0  # mm when fully closed on nothing (hardware constant)
    close_delta: float = 3.0
    hold_margin: float = 2.0
    min_run_frames: int = 6


class EffortDrop(Strict):
    method: Literal["effort_drop"]
    head_ratio: float = 0.1
    tail_ratio: float = 0.1
    contact_sigma_k: float = 3.0
    min_persist_frames: int = 5
    release_sigma_k: float = 2.0
    sigma_floor: float = 1e-6
    min_effort_range: float = 0.0
    boundary_ignore: int = 0
    onset_window: int = Field(10, ge=1)  # a contact must step down within this many frames (not drift)
    no_gripper_motion_tasks: list[str] = []  # tasks annotated with no gripper motion: no contact labels
    # holding read from the gripper opening too (IR gripper_width, GM-100 effector.position in m): off by default
    gripper: GripperHold = GripperHold(enabled=False)


class ForceHysteresis(Strict):
    method: Literal["force_hysteresis"]
    ema_span: int = 9
    hi_quantile: float = 0.8
    hi_floor: float = 2.5
    lo_ratio: float = 0.6
    lo_floor: float = 1.5
    min_run_frames: int = 6
    gripper: GripperHold = GripperHold()


class LowLevelLabels(Strict):
    method: Literal["low_level_labels"]
    no_contact_labels: list[str] = []
    hold_start_labels: list[str] = []  # an object is held from the end of one of these ...
    hold_end_labels: list[str] = []  # ... until one of these ends (holding is contact)


class NoMethod(Strict):
    method: Literal["none"]


ContactRule = Annotated[Union[EffortDrop, ForceHysteresis, LowLevelLabels, NoMethod], Field(discriminator="method")]


class ContactSection(BySource):
    entries: dict[Slug, ContactRule] = {}


# ---------------------------------------------------------------------------------------------- phase
class ContactSpeed(Strict):
    method: Literal["contact_speed"]
    low_velocity: float
    contact_window: int
    speed_channel: Literal["speed", "speed_full"] = "speed"  # the IR channel low_velocity was tuned on


class LowLevelMap(Strict):
    method: Literal["low_level_map"]
    no_action: str  # phase of "No action." segments
    map: dict[str, Union[str, dict[str, str]]]  # low-level verb -> phase, or {high-level verb | default: phase}


PhaseRule = Annotated[Union[ContactSpeed, LowLevelMap, NoMethod], Field(discriminator="method")]


class PhaseSection(BySource):
    entries: dict[Slug, PhaseRule] = {}


# ---------------------------------------------------------------------------------------------- motion
class AbsoluteMotion(Strict):
    mode: Literal["absolute"]
    stationary: float
    moving: float
    combine: Optional[Literal["max", "none"]] = None  # bimanual: the unit's state from the faster arm
    omit_unset = frozenset({"combine"})


class QuantileMotion(Strict):
    mode: Literal["quantile"]
    stationary_q: float
    stationary_floor: float = 0.0
    moving_q: float
    moving_floor: float = 0.0
    combine: Optional[Literal["max", "none"]] = None
    omit_unset = frozenset({"combine"})


class MotionSection(BySource):
    window: list[int]
    entries: dict[Slug, Annotated[Union[AbsoluteMotion, QuantileMotion], Field(discriminator="mode")]] = {}


# ---------------------------------------------------------------------------------------------- activity, arm type
class HysteresisActivity(Strict):
    mode: Literal["hysteresis"]
    smooth: Smooth = "none"
    span: int = 1
    high: float
    low: float
    transition_margin: int = 0
    min_stable_run: int = 1


class QuantileActivity(Strict):
    mode: Literal["quantile"]
    smooth: Smooth = "none"
    span: int = 1
    q: float
    floor: float = 0.0
    transition_margin: int = 0
    min_stable_run: int = 1


class NoMode(Strict):
    mode: Literal["none"]


class ActivitySection(BySource):
    entries: dict[
        Slug, Annotated[Union[HysteresisActivity, QuantileActivity, NoMode], Field(discriminator="mode")]
    ] = {}


class ArmTypeRule(Strict):
    method: Literal["activity"]
    min_active_share: float
    sync_overlap: float


class ArmTypeSection(BySource):
    entries: dict[Slug, Annotated[Union[ArmTypeRule, NoMethod], Field(discriminator="method")]] = {}


# ---------------------------------------------------------------------------------------------- direction
class AxisSign(Strict):
    axis: Literal["pos_x", "pos_y", "pos_z"]
    sign: Literal[-1, 1]


class DirectionRule(Strict):
    method: Literal["image_axes"]
    axes: list[Literal["pos_x", "pos_y", "pos_z"]] = ["pos_x", "pos_y", "pos_z"]  # dominance is judged over these
    offsets: list[int]
    min_delta: float
    consistent: bool = False
    mapping: dict[str, dict[str, dict[Literal["left", "right", "up", "down"], AxisSign]]]  # camera -> arm -> dir


class DirectionSection(BySource):
    purity_ratio: float = 1.0
    consistency_tolerance: float = 0.25
    entries: dict[Slug, Annotated[Union[DirectionRule, NoMethod], Field(discriminator="method")]] = {}


# ---------------------------------------------------------------------------------------------- steps
class ContactAnchors(Strict):
    method: Literal["contact_anchors"]
    anchor_merge_gap: int
    merge_gap: int
    transition_peak: float
    transition_mean: float
    max_anchors: int
    min_span: int


class MovingHysteresis(Strict):
    hi_quantile: float
    hi_floor: float
    lo_ratio: float
    lo_floor: float


class SpeedContactRuns(Strict):
    method: Literal["speed_contact_runs"]
    moving: MovingHysteresis
    contact_min_run: int
    moving_min_run: int
    merge_gap: int
    min_span: int


class HighSegments(Strict):
    method: Literal["high_segments"]
    success_only: bool = True


StepsRule = Annotated[Union[ContactAnchors, SpeedContactRuns, HighSegments, NoMethod], Field(discriminator="method")]


class StepsSection(BySource):
    entries: dict[Slug, StepsRule] = {}


# ---------------------------------------------------------------------------------------------- outcome
class RatingOutcome(Strict):
    method: Literal["rating"]
    success_min: int = 2
    failure_max: int = 1
    excluded: list[int] = [-1]


class SegmentSuccess(Strict):
    method: Literal["segment_success"]


class OutcomeSection(BySource):
    entries: dict[Slug, Annotated[Union[RatingOutcome, SegmentSuccess, NoMethod], Field(discriminator="method")]] = {}


# ================================================================================================ configs/labels.yaml
class LabelsFile(Strict):
    version: int = 1
    phases: list[str]  # T1 closed set, in process order
    progress_bins: dict[str, Annotated[list[float], Field(min_length=2, max_length=2)]]  # bin -> [lo, hi]
    speed: SpeedSection = SpeedSection()
    contact: ContactSection = ContactSection()
    phase: PhaseSection = PhaseSection()
    motion: MotionSection
    activity: ActivitySection = ActivitySection()
    arm_type: ArmTypeSection = ArmTypeSection()
    direction: DirectionSection = DirectionSection()
    steps: StepsSection = StepsSection()
    outcome: OutcomeSection = OutcomeSection()
