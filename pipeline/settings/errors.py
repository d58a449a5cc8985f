"""Config errors that name the file, the key path and what was expected, from pydantic's validation errors."""

from __future__ import annotations

import difflib
import typing
from types import UnionType

from pydantic import BaseModel, TypeAdapter, ValidationError

from pipeline.core.errors import ProjectError


class ConfigError(ValueError, ProjectError):
    """A config file that does not match its model: `file`, `key` (dotted path) and `expected`."""

    def __init__(self, file, key: str, expected: str):
        self.file, self.key, self.expected = str(file), key, expected
        where = f"{self.file}: {key}" if key else self.file
        super().__init__(f"{where}: expected {expected}")


def _strip(tp):
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    return tp


def _members(tp) -> list:
    tp = _strip(tp)
    if typing.get_origin(tp) in (typing.Union, UnionType):
        return [_strip(a) for a in typing.get_args(tp) if a is not type(None)]
    return [tp]


def _tag_of(model: type[BaseModel]) -> set:
    out = set()
    for name in ("method", "mode"):
        f = model.model_fields.get(name)
        if f is not None and typing.get_origin(f.annotation) is typing.Literal:
            out |= set(typing.get_args(f.annotation))
    return out


def _walk(tp, loc) -> tuple[list[str], object]:
    """Follow a pydantic error location through the model types: (key path parts, the type reached)."""
    parts: list[str] = []
    for el in loc:
        if el == "[key]":  # the key itself is wrong: the path already names it
            continue
        members = _members(tp)
        if len(members) > 1:  # a union: pydantic names the member (a tag or a type) in the location
            models = [m for m in members if isinstance(m, type) and issubclass(m, BaseModel)]
            hit = next((m for m in models if el in _tag_of(m) or el == m.__name__), None)
            if hit is not None:
                tp = hit
                continue
            kind = str(el).split("[", 1)[0]
            hit = next((m for m in members if (typing.get_origin(m) or m).__name__ == kind), None)
            if hit is not None:
                tp = hit
                continue
            tp = members[0]
        tp = _members(tp)[0]
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            if el == "entries" and "entries" in tp.model_fields:  # BySource: entries sit at the section's top level
                tp = tp.model_fields["entries"].annotation
                continue
            f = tp.model_fields.get(str(el))
            parts.append(str(f.alias or el) if f else str(el))
            tp = f.annotation if f else None
        elif typing.get_origin(tp) is dict:
            parts.append(str(el))
            tp = typing.get_args(tp)[1]
        elif typing.get_origin(tp) in (list, tuple):
            parts[-1:] = [f"{parts[-1] if parts else ''}[{el}]"]
            args = typing.get_args(tp)
            tp = args[0] if args else None
        else:
            parts.append(str(el))
            tp = None
    return parts, tp


def _allowed(tp) -> list[str]:
    tp = _members(tp)[0]
    if not (isinstance(tp, type) and issubclass(tp, BaseModel)):
        return []
    keys = [f.alias or n for n, f in tp.model_fields.items() if n != "entries"]
    return keys + (["<source slug>"] if "entries" in tp.model_fields else [])


def _expected(err: dict, root, loc) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        _, parent = _walk(root, loc[:-1])
        allowed = _allowed(parent)
        near = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        return f"no key {loc[-1]!r}{hint}; allowed keys: {', '.join(allowed) or 'none'}"
    if kind == "union_tag_invalid":
        c = err["ctx"]
        return f"{c['discriminator']} to be one of {c['expected_tags']}, got {c['tag']!r}"
    if kind == "missing":
        return "this required key to be set"
    if kind == "value_error" and "registered source slug" in err["msg"] and "entries" in loc:
        # a key of a per-source section that is no source: maybe a misspelt shared key of the section
        _, section = _walk(root, loc[: loc.index("entries")])
        shared = _allowed(section)[:-1]
        near = difflib.get_close_matches(str(loc[loc.index("entries") + 1]), shared, n=1)
        if shared:
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            return f"a shared key of the section ({', '.join(shared)}){hint} or {err['msg'][len('Value error, ') :]}"
    msg = err["msg"]
    for lead in ("Value error, ", "Input should be "):
        msg = msg[len(lead) :] if msg.startswith(lead) else msg
    if "input" in err and kind not in ("value_error", "assertion_error", "union_tag_invalid"):
        return f"{msg[0].lower()}{msg[1:]} (got {err['input']!r})"
    return msg


_ADAPTERS: dict[int, TypeAdapter] = {}


def _adapter(model) -> TypeAdapter:
    """One TypeAdapter per model (building one compiles the model's schema: the slow part of a load)."""
    key = id(model)
    if key not in _ADAPTERS:
        _ADAPTERS[key] = TypeAdapter(model)
    return _ADAPTERS[key]


def validate_file(model, data, file: str, prefix: str = "") -> dict:
    """Validate one file's section with its model (a pydantic model or a type such as dict[Slug, Entry]) and
    return the plain dict (defaults filled). The first error becomes a ConfigError; key paths start with `prefix`
    (the section name)."""
    adapter = _adapter(model)
    try:
        value = adapter.validate_python(data)
    except ValidationError as exc:
        found = []  # (key path, expected) per error; a union reports one error per member
        for err in exc.errors(include_url=False):
            loc = tuple(err["loc"])
            parts, _ = _walk(model, loc[:-1] if err["type"] == "extra_forbidden" else loc)
            if err["type"] == "extra_forbidden":
                parts.append(str(loc[-1]))
            found.append((parts, _expected(err, model, loc), "[key]" in loc))
        # the first error's key, at the deepest level any union member reached there (the most specific reason)
        head = found[0][0][:1]
        same = [f for f in found if f[0][:1] == head]
        depth = max(len(f[0]) for f in same)
        deepest = [f for f in same if len(f[0]) == depth]
        deepest = [f for f in deepest if f[2]] or deepest  # a wrong key: its value's errors are noise
        parts = deepest[0][0]
        expected = " or ".join(dict.fromkeys(f[1] for f in deepest if f[0] == parts))
        raise ConfigError(file, ".".join(([prefix] if prefix else []) + parts), expected) from None
    return adapter.dump_python(value, mode="python")
