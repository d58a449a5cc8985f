"""The model of the step track's template (configs/tasks/T13.yaml, `track: steps`): pipeline/steps/, docs/steps.md."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Union

from pydantic import Field, model_validator

from pipeline.settings.types import OneOrPerSource, PerSource, Slug, Strict, TaskId


class StepRange(Strict):
    min: int = Field(ge=1)
    max: int = Field(ge=1)

    @model_validator(mode="after")
    def _ordered(self):
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) <= max ({self.max})")
        return self


class StepPrompt(Strict):
    intro: str  # {goal}
    step: str  # {n}, {images}, {sentence}
    answer: str  # {num_steps}


StepSentences = Union[list[str], dict[Literal["positive", "negative"], list[str]]]
STEP_KINDS = ("primitive", "action_outcome", "phase", "contact", "outcome", "activity", "coordination")
INJECTED_KINDS = ("swapped_frames", "substituted_chain", "contact_flipped", "outcome_flipped", "truncated_complete")


class StepTaskFile(Strict):
    """configs/tasks/T13.yaml: the process-verification step track (pipeline/steps/, docs/steps.md)."""

    track: Literal["steps"]
    task_id: TaskId
    task_name: str
    sources: list[Slug]
    quota: dict[Slug, int]  # items per source at release scale
    goal: OneOrPerSource(str)
    step_kinds: PerSource(list[Literal[STEP_KINDS]])
    sentences: dict[Literal[STEP_KINDS], StepSentences]
    coordination_text: dict[str, str]
    steps: StepRange
    min_run_frames: int = Field(3, ge=1)
    frames_per_step: StepRange
    two_frames_from: int = Field(12, ge=2)
    neutral_margin: int = Field(2, ge=0)
    min_frame_gap: int = Field(4, ge=1)  # two steps of one unit (so of one item) show no frames closer than this
    idle_phases: list[str] = []
    cap_per_unit: OneOrPerSource(Annotated[int, Field(ge=1)]) = 6
    window_shift: float = Field(0.5, gt=0, le=1)  # a unit's item windows start this share of the longest one apart
    error_rate: float = Field(0.1, gt=0, le=1)  # each scored step is the site of an injected error this often
    max_wrong_share: float = Field(0.08, gt=0, le=1)  # one injected kind makes at most this share of a step kind wrong
    closing_after: int = Field(3, ge=1)  # the item that closes with a unit's outcome step: its first steps before it
    injected: list[Literal[INJECTED_KINDS]]
    outcome_failure_wording: OneOrPerSource(Annotated[float, Field(ge=0, le=1)]) = 0.5
    failure_claims_wrong_share: OneOrPerSource(float) | None = None  # outcome_flipped budget (perturb.FailureClaims)
    prompt_version: str
    prompt: StepPrompt
    variant: str = "default"
    by_source: ClassVar[frozenset[str]] = frozenset(
        {"goal", "step_kinds", "failure_claims_wrong_share", "cap_per_unit", "outcome_failure_wording"}
    )

    @model_validator(mode="after")
    def _covered(self):
        for slug in self.sources:
            if slug not in self.quota:
                raise ValueError(f"a quota for every listed source; {slug!r} has none")
            if slug not in self.step_kinds and "default" not in self.step_kinds:
                raise ValueError(f"step_kinds for source {slug!r}")
        if self.frames_per_step.max > 2:
            raise ValueError("frames_per_step.max <= 2 (a step shows 1-2 frames)")
        return self
