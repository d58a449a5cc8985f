"""Shared machinery of the family generators: template access (configs/tasks/T*.yaml), per-unit table slicing,
frame-window helpers, distractor policies, render specs, and the candidate accumulator (CANDIDATES contract)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import itertools
import json
import math
from collections import Counter
from functools import cached_property

import numpy as np
import polars as pl
import pyarrow as pa

from pipeline.core.io import compact_json, key_runs, sorted_by
from pipeline.core.seeding import py_rng, stable_hash

if TYPE_CHECKING:
    from pipeline.settings.models import Distractors
    from pipeline.settings.root import Settings

CANDIDATE_SCHEMA = {
    "candidate_key": pl.String,
    "source": pl.String,
    "unit_id": pl.String,
    "task_id": pl.String,
    "task_type_legacy": pl.String,
    "input_type": pl.String,
    "camera": pl.String,
    "question_fields_json": pl.String,
    "answer_text": pl.String,
    "distractors": pl.List(pl.String),
    "num_choices": pl.Int64,
    "frame_indices": pl.List(pl.Int64),
    "display_labels": pl.List(pl.String),
    "render_spec_json": pl.String,
    "anchor_frame": pl.Int64,
    "arm_type": pl.String,
    "label_meta_json": pl.String,
}


def empty_candidates() -> pl.DataFrame:
    return pl.DataFrame(schema=CANDIDATE_SCHEMA)


class Rule:
    """One rule of a family generator, with what it looked at and what it left out (summed over units): `count` as it
    is applied. `name` is short (usually the config key's last part), `setting` the config key that sets it, `what`
    the things it looks at (a plural noun: arms, outcome segments, anchors), `why` what befell the ones it left out
    (a predicate: "were not asked about: ...")."""

    __slots__ = ("name", "setting", "what", "why", "considered", "excluded", "labels")

    def __init__(self, name: str, setting: str, what: str, why: str):
        self.name, self.setting, self.what, self.why = name, setting, what, why
        self.considered, self.excluded = 0, 0
        self.labels: Counter = Counter()

    def count(self, considered: int, excluded: int = 0, labels: dict | None = None) -> None:
        """`considered` looked at, `excluded` of them left out (`labels`: the left-out ones by answer label)."""
        self.considered += int(considered)
        self.excluded += int(excluded)
        if labels:
            self.labels.update({str(k): int(v) for k, v in labels.items() if v})

    def figures(self) -> dict:
        out = {k: getattr(self, k) for k in ("name", "setting", "what", "why", "considered", "excluded")}
        return out | ({"excluded_labels": dict(sorted(self.labels.items()))} if self.labels else {})


class LeftOut:
    """What one family's own rules left out on the way to its candidate pool, as figures per rule: the generator
    declares a rule where it applies it (`rule`, the same name again returns the same one) and counts what it looked
    at and what it left out. `figures()` (rules that looked at something, in the order declared) is kept with the
    family's part of the pool (pipeline/stages.py run_candidates) and words the shortfall's reason
    (pipeline/items/shortfall.py): nothing is written per (source, family), a new rule brings its own words."""

    def __init__(self):
        self._rules: dict[tuple[str, str], Rule] = {}

    def rule(self, name: str, setting: str, what: str, why: str) -> Rule:
        key = (name, what)
        if key not in self._rules:
            self._rules[key] = Rule(name, setting, what, why)
        return self._rules[key]

    def figures(self) -> list[dict]:
        return [r.figures() for r in self._rules.values() if r.considered]


def scale_quota(q: int, scale: float) -> int:
    """Release quota -> quota at `scale`: rounded half up, at least 1 for a family the source has (q > 0)."""
    if q <= 0:
        return 0
    return max(1, int(math.floor(q * float(scale) + 0.5)))


class Spec:
    """One family's template resolved for one source."""

    def __init__(self, cfg: Settings, task_id: str, source: str):
        self.cfg = cfg
        self.task_id = task_id
        self.source = source
        self.t = cfg.tasks[task_id]
        self.r = self.t.for_source(source)  # every per-source value resolved for this source
        self.seed = int(cfg.build.release_seed)
        self.left_out = LeftOut()  # what the generator's rules leave out, per rule (figures)

    def rule(self, name: str, key: str, what: str, why: str, setting: str | None = None) -> Rule:
        """A rule of this family's generator, set by its template key `key` (`frames.same_task_pools`), or by the
        config key `setting` of another file (`labels.direction.aist.mapping`)."""
        return self.left_out.rule(name, setting or f"tasks.{self.task_id}.{key}", what, why)

    def cap_rule(self, cap: int | None, what: str = "anchors") -> Rule | None:
        """The per-unit, per-label cap (`cap()` of candidates.cap_per_label) as a rule over `what` (None: no cap)."""
        if cap is None:
            return None
        why = f"lay past the cap of {cap:,} per {self.unit_word} and label"
        return self.rule("cap_per_label", "candidates.cap_per_label", what, why)

    @cached_property
    def unit_word(self) -> str:
        """The source's unit (episode, recording) in the rules' words."""
        src = self.cfg.sources.get(self.source) if isinstance(self.cfg.sources, dict) else None
        return str(getattr(src, "unit_type", None) or "unit")

    def get(self, key: str, default=None):
        """The template key resolved for this source; `default` where it resolves to None."""
        v = getattr(self.r, key)
        return default if v is None else v

    def cand(self, key: str, default=None):
        v = getattr(self.r.candidates, key)
        return default if v is None else v

    @property
    def num_choices(self) -> int:
        return int(self.get("num_choices"))

    @property
    def legacy(self) -> str:
        return str(self.get("legacy_alias", self.task_id))

    @cached_property
    def label_texts(self) -> dict[str, str]:
        return dict(self.get("labels") or {})

    @cached_property
    def label_list(self) -> list[str]:
        return list(self.label_texts)

    @cached_property
    def frames(self) -> dict:
        """The source's window: the keys its file sets (the families test which keys a window has)."""
        w = self.r.frames
        return w.model_dump() if w is not None else {}

    @cached_property
    def distractor_cfg(self) -> Distractors:
        return self.t.distractors

    @property
    def enabled(self) -> bool:
        return self.source in self.t.sources and self.source in self.t.quota

    @cached_property
    def quota(self) -> int:
        """This family's quota for the source at the configured build scale."""
        build = self.cfg.build
        scale = float(build.quota_scale[build.scale])
        return scale_quota(int(self.t.quota.get(self.source, 0)), scale)

    def cap(self, key: str, n_units: int, n_labels: int = 1) -> int | None:
        """Per-unit (per-label) cap on candidates: the template's `key` as a floor, raised so that the pool can hold
        `pool_factor` x the quota when spread evenly over the units (and labels). None = no cap."""
        base = self.cand(key)
        factor = self.cand("pool_factor")
        if base is None and factor is None:
            return None
        adaptive = math.ceil(float(factor or 0) * self.quota / max(1, n_units * max(1, n_labels)))
        return max(int(base or 0), adaptive)


# ------------------------------------------------------------------------------------------- per-unit slicing


def column_array(s: pl.Series) -> np.ndarray:
    """A column as a numpy array; in a string column each distinct value is one shared str object (a label column of
    a million frames holds a handful of values: 8 bytes a row instead of a str object each)."""
    if s.dtype != pl.String:
        return s.to_numpy()
    shared: dict = {}
    out = np.empty(s.len(), dtype=object)
    out[:] = [shared.setdefault(v, v) for v in s.to_list()]
    return out


def by_unit(df: pl.DataFrame | None, columns: list[str], sort: list[str]) -> dict[str, dict[str, np.ndarray]]:
    """unit_id -> {column: numpy array} for one table, rows sorted by `sort` (unit_id first)."""
    if df is None or df.height == 0:
        return {}
    d = sorted_by(df.select(["unit_id", *[c for c in columns if c != "unit_id"]]), sort)
    cols = {c: column_array(d.get_column(c)) for c in columns if c != "unit_id"}
    return {u: {c: a[s:e] for c, a in cols.items()} for u, s, e in key_runs(d, ["unit_id"])}


def arms_by_unit(arms: pl.DataFrame | None, columns: list[str]) -> dict[str, dict[str, dict[str, np.ndarray]]]:
    """unit_id -> arm -> {column: array indexed by frame}."""
    out: dict[str, dict[str, dict[str, np.ndarray]]] = {}
    if arms is None or arms.height == 0:
        return out
    d = sorted_by(arms.select(["unit_id", "arm", "frame_index", *columns]), ["unit_id", "arm", "frame_index"])
    cols = {c: column_array(d.get_column(c)) for c in columns}
    for u, a, s, e in key_runs(d, ["unit_id", "arm"]):
        out.setdefault(u, {})[a] = {c: arr[s:e] for c, arr in cols.items()}
    return out


# ------------------------------------------------------------------------------------------- frame windows


def label_runs(labels) -> list[tuple[int, int, object]]:
    """Runs of equal non-null labels: [(start, end_exclusive, label)] (labels: strings or None)."""
    arr = np.asarray(labels, dtype=object)
    n = arr.size
    if n == 0:
        return []
    null = np.equal(arr, None)
    txt = np.where(null, "\x00", arr).astype(str)
    cut = np.flatnonzero(txt[1:] != txt[:-1]) + 1
    starts = np.concatenate(([0], cut))
    ends = np.concatenate((cut, [n]))
    return [(int(a), int(b), arr[a]) for a, b in zip(starts, ends) if not null[a]]


def stride_anchors(start: int, end_excl: int, margin: int, stride: int) -> list[int]:
    """Anchors every `stride` frames inside [start + margin, end - 1 - margin], centred in the run."""
    lo, hi = start + margin, end_excl - 1 - margin
    if hi < lo:
        return []
    stride = max(1, int(stride))
    span = hi - lo
    off = (span % stride) // 2
    return list(range(lo + off, hi + 1, stride))


def stable_subrange(lo: int, hi: int, margin_ratio: float, min_margin: int) -> tuple[int, int] | None:
    """[lo, hi] (inclusive) shrunk by max(min_margin, ratio * span), never by more than a third of it."""
    span = hi - lo + 1
    if span <= 0:
        return None
    m = max(int(min_margin), int(round(span * float(margin_ratio))))
    m = min(m, max(0, (span - 1) // 3))
    return lo + m, hi - m


def window_at_progress(lo: int, hi: int, progress: float, offsets, margin_ratio: float, min_margin: int):
    """Centre at `progress` of the stable sub-range of [lo, hi]; the window (centre + offsets) stays inside
    [lo, hi] (the centre is clamped), else None. Returns (centre, frames)."""
    st = stable_subrange(lo, hi, margin_ratio, min_margin)
    if st is None:
        return None
    s_lo, s_hi = st
    c = int(round(s_lo + float(progress) * (s_hi - s_lo)))
    mn, mx = min(offsets), max(offsets)
    c_lo, c_hi = lo - mn, hi - mx
    if c_hi < c_lo:
        return None
    c = min(max(c, c_lo), c_hi)
    return c, [c + int(o) for o in offsets]


def relative_frames(lo: int, hi: int, fractions, margin_ratio: float, min_margin: int, min_step: int = 1):
    """Frames at fractions of the stable sub-range of [lo, hi]; strictly increasing by >= min_step, else None."""
    st = stable_subrange(lo, hi, margin_ratio, min_margin)
    if st is None:
        return None
    s_lo, s_hi = st
    f = [int(round(s_lo + float(p) * (s_hi - s_lo))) for p in fractions]
    if any(b - a < max(1, int(min_step)) for a, b in zip(f[:-1], f[1:])):
        return None
    return f


def evenly(items: list, cap: int | None) -> list:
    """At most `cap` items, evenly spread over the (time-ordered) list; deterministic."""
    if cap is None or len(items) <= cap:
        return items
    if cap <= 0:
        return []
    last, cap = len(items) - 1, int(cap)
    if cap == 1:
        return [items[last // 2]]
    idx = sorted({(2 * i * last + (cap - 1)) // (2 * (cap - 1)) for i in range(cap)})  # round(i * last / (cap - 1))
    return [items[i] for i in idx]


# ------------------------------------------------------------------------------------------- distractors


def _tiebreak(key: str) -> int:
    return int(stable_hash("tie", key, n=8), 16)


def permutations_of(labels) -> list[str]:
    return ["".join(p) for p in itertools.permutations(labels)]


def kendall(a: str, b: str) -> int:
    pos = {c: i for i, c in enumerate(b)}
    seq = [pos[c] for c in a]
    return sum(1 for i in range(len(seq)) for j in range(i + 1, len(seq)) if seq[i] > seq[j])


def order_distractors(
    spec: Spec, answer: str, key: str, *, context: list[str] | None = None, exclude: set[str] | None = None
) -> list[str]:
    """Distractor labels, hard ones first, exactly num_choices - 1 of them (fewer only if the label space is too
    small). Policies (template `distractors.policy`):
      all          the other labels in label order
      neighbours   nearest labels in `order` first (ties broken by a stable per-candidate coin)
      pairs        the template's `hard[answer]` first, then the rest in label order
      context      the generator's `context` labels (same chain / recording) first, then the rest in a seeded order
      uniform      a seeded uniform draw from the plausible labels (the generator's `context` when given, else every
                   label): with balanced answers every label of an option set is then equally likely the answer
      permutations the other permutations of the display labels, fewest swaps away first"""
    d = spec.distractor_cfg
    policy = d.policy
    k = spec.num_choices - 1
    exclude = set(exclude or ()) | {answer}
    if policy == "permutations":
        perms = permutations_of(spec.get("display_labels"))
        rest = [p for p in perms if p not in exclude]
        rest.sort(key=lambda p: (kendall(p, answer), p))
        return rest[:k]
    labels = spec.label_list
    pool = [x for x in labels if x not in exclude]
    if policy == "neighbours":
        order = list(d.order or labels)
        ia = order.index(answer)
        coin = _tiebreak(key) & 1
        pool.sort(key=lambda x: (abs(order.index(x) - ia), (order.index(x) < ia) == bool(coin)))
    elif policy == "pairs":
        hard = list((d.hard or {}).get(answer, []))
        pool.sort(key=lambda x: (0, hard.index(x)) if x in hard else (1, labels.index(x)))
    elif policy == "uniform":
        plausible = pool if context is None else sorted(set(context) & set(pool), key=labels.index)
        if len(plausible) < k:
            return plausible  # no plausible distractors enough: the candidate is not emitted
        return py_rng(spec.seed, "distractors", spec.task_id, key).sample(plausible, k)
    elif policy == "context":
        ctx = [x for x in dict.fromkeys(context or []) if x in pool]
        rest = [x for x in pool if x not in ctx]
        py_rng(spec.seed, "distractors", spec.task_id, key).shuffle(rest)
        pool = ctx + rest
    return pool[:k]


# ------------------------------------------------------------------------------------------- render specs


def render_spec(spec: Spec, frames: list[int], labels: list[str]) -> str | None:
    r = spec.t.render
    if not r:
        return None
    out = {
        "version": 1,
        "kind": r.kind,
        "labels": list(labels),
        "frame_indices": [int(f) for f in frames],
        "size": r.size,
        "label": r.label.model_dump(),
    }
    if r.kind == "panels":
        out["gap"] = int(r.gap)
    return compact_json(out)


# ------------------------------------------------------------------------------------------- accumulator


class Pool:
    """Candidate rows of one family and source (CANDIDATES contract)."""

    def __init__(self, spec: Spec, units: dict[str, dict]):
        self.spec = spec
        self.units = units
        self.rows: dict[str, list] = {k: [] for k in CANDIDATE_SCHEMA}
        self.n_choices = spec.num_choices
        self.texts = spec.label_texts
        self.input_type = str(spec.get("input_type"))
        self.legacy = spec.legacy
        self.prefix = f"{spec.task_id}|{spec.source}|"
        self.options = spec.rule(
            "distractors",
            "distractors.policy",
            "candidates",
            f"could not be given {self.n_choices - 1} plausible wrong option{'s' if self.n_choices != 2 else ''} "
            "(never padded)",
        )

    def add(
        self,
        unit_id: str,
        key: str,
        answer: str,
        frames: list[int],
        anchor: int,
        *,
        distractors: list[str] | None = None,
        context: list[str] | None = None,
        exclude: set[str] | None = None,
        display_labels: list[str] | None = None,
        answer_text: str | None = None,
        meta: dict | None = None,
        qfields: dict | None = None,
        render: str | None = None,
    ) -> None:
        sp = self.spec
        ckey = f"{self.prefix}{unit_id}|{key}"
        if distractors is None:
            distractors = order_distractors(sp, answer, ckey, context=context, exclude=exclude)
        if answer_text is None:
            answer_text = self.texts[answer]
            distractors = [self.texts[d] for d in distractors]
        self.options.considered += 1
        if len(distractors) != self.n_choices - 1:
            self.options.excluded += 1
            return  # the label space cannot fill the options: never padded
        u = self.units[unit_id]
        r = self.rows
        r["candidate_key"].append(ckey)
        r["source"].append(sp.source)
        r["unit_id"].append(unit_id)
        r["task_id"].append(sp.task_id)
        r["task_type_legacy"].append(self.legacy)
        r["input_type"].append(self.input_type)
        r["camera"].append(u["camera"])
        # the question's fields; its text is made from the template by the release step (pipeline/release/prompts.py
        # question_texts), so a question edit changes no candidate and runs no step before the release
        r["question_fields_json"].append(compact_json(qfields or {}))
        r["answer_text"].append(answer_text)
        r["distractors"].append(list(distractors))
        r["num_choices"].append(self.n_choices)
        r["frame_indices"].append([int(f) for f in frames])
        r["display_labels"].append(list(display_labels) if display_labels is not None else None)
        if display_labels is not None:
            render = render_spec(sp, frames, display_labels)
        r["render_spec_json"].append(render)  # labels drawn on the frames (T8/T9; T5's strip numbers and NOW)
        r["anchor_frame"].append(int(anchor))
        r["arm_type"].append(u.get("arm_type"))
        r["label_meta_json"].append(
            json.dumps({"label": answer, **(meta or {})}, sort_keys=True, separators=(",", ":"), default=_jsonable)
        )
        return None

    def frame(self) -> pl.DataFrame:
        if not self.rows["candidate_key"]:
            return empty_candidates()
        return columns_frame(self.rows, CANDIDATE_SCHEMA)


_ARROW_INNER = {pl.String: pa.string(), pl.Int64: pa.int64()}


def list_column(name: str, values: list, dtype: pl.DataType) -> pl.Series:
    """A polars List column from python lists (None allowed), built through Arrow offsets (fast for many rows)."""
    inner = dtype.inner
    offsets = np.zeros(len(values) + 1, dtype=np.int32)
    flat: list = []
    valid = np.ones(len(values), dtype=bool)
    for i, v in enumerate(values):
        if v is None:
            valid[i] = False
            offsets[i + 1] = offsets[i]
            continue
        flat.extend(v)
        offsets[i + 1] = offsets[i] + len(v)
    arr = pa.ListArray.from_arrays(
        pa.array(offsets), pa.array(flat, type=_ARROW_INNER[inner]), mask=pa.array(~valid) if not valid.all() else None
    )
    return pl.Series(name, pl.from_arrow(arr)).cast(dtype)


def columns_frame(cols: dict[str, list], schema: dict) -> pl.DataFrame:
    """DataFrame from column lists, list columns through Arrow."""
    data = []
    for name, dtype in schema.items():
        vals = cols[name]
        if isinstance(dtype, pl.List):
            data.append(list_column(name, vals, dtype))
        else:
            data.append(pl.Series(name, vals, dtype=dtype))
    return pl.DataFrame(data)


def _jsonable(x):
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return None if np.isnan(x) else round(float(x), 6)
    if isinstance(x, np.bool_):
        return bool(x)
    raise TypeError(f"not JSON serialisable: {type(x)}")


def rnd(x) -> float | None:
    """A float for label_meta_json (6 decimals; None for NaN)."""
    if x is None:
        return None
    x = float(x)
    return None if np.isnan(x) else round(x, 6)
