"""The building blocks of the settings models (pipeline/settings.py, pipeline/settings_labels.py): the strict base
model, source-slug and task-id types, per-source values and sections."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_serializer, model_validator

import upstream_adapters

class Strict(BaseModel):
    """Base of every settings model: unknown keys are errors. Fields named in `omit_unset` are left out of the dump
    when the file does not set them (for sections whose code distinguishes "absent" from any value)."""

    model_config = ConfigDict(extra="forbid")
    omit_unset: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _dump(self, handler):
        data = handler(self)
        for name in self.omit_unset - self.model_fields_set:
            data.pop(name, None)
        return data


def _known_slug(slug: str) -> str:
    if slug not in upstream_adapters.ADAPTERS:
        raise ValueError(f"a registered source slug ({', '.join(sorted(upstream_adapters.ADAPTERS))}), got {slug!r}")
    return slug


def _slug_or_default(key: str) -> str:
    return key if key == "default" else _known_slug(key)


Slug = Annotated[str, AfterValidator(_known_slug)]
SlugOrDefault = Annotated[str, AfterValidator(_slug_or_default)]
TaskId = Annotated[str, Field(pattern=r"^T[1-9][0-9]*$")]


def PerSource(tp):  # named like a type, as it reads: {slug | default: value}
    return dict[SlugOrDefault, tp]


def OneOrPerSource(tp):  # named like a type: a plain value for every source, or {slug | default: value}
    return Union[tp, dict[SlugOrDefault, tp]]


class BySource(Strict):
    """A section with shared keys (the declared fields) plus one entry per source slug, written side by side in YAML
    (`motion: {window: [...], gm100: {...}}`). Subclasses type `entries`; the dump puts them back at the top level."""

    entries: dict[Slug, Any] = {}

    @model_validator(mode="before")
    @classmethod
    def _collect(cls, data):
        if not isinstance(data, dict):
            return data
        shared = set(cls.model_fields) - {"entries"}
        return {**{k: v for k, v in data.items() if k in shared},
                "entries": {k: v for k, v in data.items() if k not in shared}}

    @model_serializer(mode="wrap")
    def _dump(self, handler):
        data = handler(self)
        entries = data.pop("entries", {})
        return {**data, **entries}
