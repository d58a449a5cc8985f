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


class ValiditySteps(Strict):
    """The T13 step track's blind gates (pipeline/steps/gates.py)."""

    min_steps: int = Field(200, ge=1)  # (source, level) cells with fewer scored eval steps: reported only
    max_over_random: float = Field(0.10, ge=0)  # each gate's step macro-F1 - random (a guess at the wrong rate)
    ngram: ValidityStepsNgram = ValidityStepsNgram()
    text_classifier: ValidityStepsClassifier = ValidityStepsClassifier()
