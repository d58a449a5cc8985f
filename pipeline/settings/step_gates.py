"""The model of the T13 step track's settings: configs/validity.yaml `validity.steps` (the blind gates,
pipeline/steps/gates.py). Its own file beside pipeline/settings/models.py, which holds the section it belongs to."""

from __future__ import annotations

from pydantic import Field

from pipeline.settings.types import Strict


class ValidityStepsNgram(Strict):
    order: int = Field(2, ge=1, le=5)  # sentences of context + 1
    alpha: float = Field(1.0, gt=0)  # Dirichlet smoothing towards the shorter context


class ValidityStepsClassifier(Strict):
    C: float = Field(1.0, gt=0)
    max_iter: int = Field(200, ge=1)


class ValidityStepsBoosted(Strict):
    """Gradient-boosted trees of the per-class gates (pipeline/steps/baselines.py `boosted`)."""

    max_iter: int = Field(100, ge=1)
    learning_rate: float = Field(0.1, gt=0, le=1)
    max_leaf_nodes: int = Field(15, ge=2)
    min_samples_leaf: int = Field(20, ge=1)


class ValidityStepsClasses(Strict):
    """The per-class gates: correct steps against one class of wrong step, cross-fitted by split group."""

    min_wrong: int = Field(30, ge=1)  # cells with fewer wrong steps of the class: reported only
    folds: int = Field(5, ge=2)  # a source's split groups are dealt over this many folds
    max_over_random: float = Field(0.10, ge=0)  # each gate's macro-F1 - random


class ValidityStepsFrames(Strict):
    """Steps of one item that show the same frame (or frames this close): the share per class of step."""

    near_frames: int = Field(3, ge=0)  # frames of one unit and camera at most this far apart count as shared
    max_gap: float = Field(0.02, ge=0)  # |share of a class of wrong step - share of correct steps| at most this
    min_steps: int = Field(20, ge=1)  # classes with fewer steps in a source: reported only


class ValiditySteps(Strict):
    """The T13 step track's blind gates (pipeline/steps/gates.py)."""

    min_steps: int = Field(200, ge=1)  # (source, level) cells with fewer scored eval steps: reported only
    max_over_random: float = Field(0.10, ge=0)  # each gate's step macro-F1 - random (a guess at the wrong rate)
    ngram: ValidityStepsNgram = ValidityStepsNgram()
    text_classifier: ValidityStepsClassifier = ValidityStepsClassifier()
    boosted: ValidityStepsBoosted = ValidityStepsBoosted()
    classes: ValidityStepsClasses = ValidityStepsClasses()
    frames: ValidityStepsFrames = ValidityStepsFrames()
