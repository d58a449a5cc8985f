"""The building blocks of the settings models (pipeline/settings/models.py, pipeline/settings/labels.py): the strict base
model, source-slug and task-id types, per-source values and sections."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_serializer, model_validator

import upstream_adapters


class Strict(BaseModel):
    """Base of every settings model: unknown keys are errors. Fields named in `omit_unset` are left out of the dump
    when the file does not set them (for sections whose code distinguishes "absent" from any value)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    omit_unset: ClassVar[frozenset[str]] = frozenset()
    by_source: ClassVar[frozenset[str]] = frozenset()  # fields typed PerSource / OneOrPerSource

    def for_source(self, slug: str):
        """This model with every per-source field (`by_source`, also in nested models) resolved for `slug`: the
        slug's entry, else the map's `default` entry, else None; a plain value is the value itself."""
        vals = {}
        for name in type(self).model_fields:
            v = getattr(self, name)
            if name in self.by_source:
                v = v.get(slug, v.get("default")) if isinstance(v, dict) else v
            elif isinstance(v, Strict) and v._resolves_per_source():
                v = v.for_source(slug)
            vals[name] = v
        return type(self).model_construct(_fields_set=set(self.model_fields_set), **vals)

    @classmethod
    def _resolves_per_source(cls) -> bool:
        return bool(cls.by_source) or any(
            isinstance(f.annotation, type) and issubclass(f.annotation, Strict) and f.annotation._resolves_per_source()
            for f in cls.model_fields.values()
        )

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

    def for_source(self, slug: str):
        """The source's entry (its rule), or None when the section has none."""
        return self.entries.get(slug)

    @model_validator(mode="before")
    @classmethod
    def _collect(cls, data):
        if not isinstance(data, dict):
            return data
        shared = set(cls.model_fields) - {"entries"}
        return {
            **{k: v for k, v in data.items() if k in shared},
            "entries": {k: v for k, v in data.items() if k not in shared},
        }

    @model_serializer(mode="wrap")
    def _dump(self, handler):
        data = handler(self)
        entries = data.pop("entries", {})
        return {**data, **entries}
