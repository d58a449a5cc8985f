"""The step track's release rows (the STEPS contract: docs/steps.md "Rows"): draft items with their labels -> one row
per item, VisualProcessBench's shape (`image`, `question`, `answer`, `response: {steps, process_correctness}`) plus
the project's keys.

Sentences: each step kind's wording variants (configs/tasks/T13.yaml `sentences`) are dealt in turn per (source,
kind, claim), in item order, so every variant of a claim is used equally often (± 1).
Item ids: `{item_id_prefix}_steps_{split}_{n:06d}`, numbered per split after sorting by (source in configured order,
source_unit_id, draft key).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import json

import polars as pl

from pipeline.release.files import image_filename
from pipeline.core.io import compact_json
from pipeline.release.files import source_names, source_order
from pipeline.release.identity import step_uid
from .items import STEP_ERROR_KINDS

if TYPE_CHECKING:
    from pipeline.settings.root import Settings
    from pipeline.settings.steps import StepTaskFile

IMAGE_TAG = "<image>"
RESPONSE_TYPE = pl.Struct({"steps": pl.List(pl.String), "process_correctness": pl.List(pl.Int64)})
STEP_SCHEMA = {
    "item_id": pl.String,
    "item_uid": pl.String,  # what the item is (pipeline/release/identity.py step_uid)
    "split": pl.String,
    "source": pl.String,
    "source_slug": pl.String,
    "source_task_id": pl.String,
    "source_unit_type": pl.String,
    "source_unit_id": pl.String,
    "task_id": pl.String,
    "task_name": pl.String,
    "eval_level": pl.String,
    "split_group_id": pl.String,
    "image": pl.List(pl.String),
    "question": pl.String,
    "response": RESPONSE_TYPE,
    "step_image_index_json": pl.String,
    "prompt": pl.String,
    "answer": pl.String,
    "num_steps": pl.Int64,
    "first_error_index": pl.Int64,
    "step_error_kinds_json": pl.String,
    "step_reconstruction_keys_json": pl.String,
    "image_hashes_json": pl.String,
    "licence": pl.String,
    "split_version": pl.String,
    "builder_version": pl.String,
    "prompt_version": pl.String,
}
# shown to a model (plus the images): never the gold labels, error kinds, frames or units
STEP_MODEL_FACING = (
    "item_id",
    "item_uid",
    "source",
    "task_id",
    "task_name",
    "eval_level",
    "split_group_id",
    "image",
    "question",
    "step_image_index_json",
    "prompt",
    "num_steps",
)


class Sentences:
    """Deals each (source, kind, claim)'s wording variants in turn."""

    def __init__(self, tpl: StepTaskFile):
        self.tpl, self.used = tpl, {}

    def __call__(self, slug: str, st: dict) -> str:
        spec = self.tpl.sentences[st["kind"]]
        if isinstance(spec, dict):
            polarity = "positive" if st["claim"] else "negative"
            variants = spec[polarity]
        else:
            polarity, variants = None, spec
        key = (slug, st["kind"], polarity)
        n = self.used.get(key, 0)
        self.used[key] = n + 1
        return variants[n % len(variants)].format(**st["fields"])


def goal(tpl: StepTaskFile, slug: str) -> str:
    return tpl.for_source(slug).goal


def prompt_text(tpl: StepTaskFile, question: str, sentences: list[str], images_per_step: list[int]) -> str:
    p = tpl.prompt
    lines = [p.intro.format(goal=question)]
    for n, (s, k) in enumerate(zip(sentences, images_per_step), start=1):
        lines.append(p.step.format(n=n, images=IMAGE_TAG * k, sentence=s))
    lines.append(p.answer.format(num_steps=len(sentences)))
    return "\n".join(lines)


def answer_text(labels: list[int]) -> str:
    """The gold output: `+` for 1 and 0 (a neutral step is never scored), `-` for -1."""
    return "<STEPS>" + ",".join("-" if v == -1 else "+" for v in labels) + "</STEPS>"


def recon_key(slug: str, st: dict, units: dict) -> dict:
    u = units[(slug, st["unit_id"])]
    return {
        "camera": st["camera"],
        "frame_indices": [int(f) for f in st["frames"]],
        "source": slug,
        "source_task_id": u["task_id"],
        "source_unit_id": st["unit_id"],
        "source_unit_type": u["unit_type"],
    }


def step_rows(drafts: list[dict], units: dict, hashes: dict, tpl: StepTaskFile, cfg: Settings) -> pl.DataFrame:
    """Release rows of every source's drafts. `units`: (slug, unit_id) -> {task_id, unit_type, licence};
    `hashes`: (slug, unit_id, camera, frame) -> the shown image's sha256 (a draft with a frame missing here is
    dropped by the caller first)."""
    rel = cfg.release
    names = source_names(cfg)
    order = {s: i for i, s in enumerate(source_order(cfg))}
    images_prefix = cfg.exports.images_prefix
    sentences = Sentences(tpl)
    drafts = sorted(drafts, key=lambda d: (order.get(d["source"], len(order)), d["unit_id"], d["key"]))
    rows, counters = [], {}
    for d in drafts:
        slug, split = d["source"], d["split"]
        counters[split] = counters.get(split, 0) + 1
        item_id = f"{rel.item_id_prefix}_steps_{split}_{counters[split]:06d}"
        texts = [sentences(slug, st) for st in d["steps"]]
        labels = [int(st["label"]) for st in d["steps"]]
        errors = [st["error"] if st["label"] == -1 else None for st in d["steps"]]
        assert all(e is None or e in STEP_ERROR_KINDS for e in errors), errors
        index, image_hashes, k = [], [], 0
        for st in d["steps"]:
            index.append(list(range(k, k + len(st["frames"]))))
            k += len(st["frames"])
            image_hashes += [hashes[(slug, st["unit_id"], st["camera"], int(f))] for f in st["frames"]]
        question = goal(tpl, slug)
        u = units[(slug, d["unit_id"])]
        row = {
            "item_id": item_id,
            "item_uid": None,
            "split": split,
            "source": names[slug],
            "source_slug": slug,
            "source_task_id": u["task_id"],
            "source_unit_type": u["unit_type"],
            "source_unit_id": d["unit_id"],
            "task_id": tpl.task_id,
            "task_name": tpl.task_name,
            "eval_level": d.get("eval_level"),
            "split_group_id": d["split_group_id"],
            "image": [f"{images_prefix}/{image_filename(item_id, i)}" for i in range(k)],
            "question": question,
            "response": {"steps": texts, "process_correctness": labels},
            "step_image_index_json": compact_json(index),
            "prompt": prompt_text(tpl, question, texts, [len(st["frames"]) for st in d["steps"]]),
            "answer": answer_text(labels),
            "num_steps": len(texts),
            "first_error_index": next((i for i, v in enumerate(labels) if v == -1), -1),
            "step_error_kinds_json": compact_json(errors),
            "step_reconstruction_keys_json": compact_json([recon_key(slug, st, units) for st in d["steps"]]),
            "image_hashes_json": compact_json(image_hashes),
            "licence": u["licence"],
            "split_version": rel.split_version,
            "builder_version": rel.builder_version,
            "prompt_version": tpl.prompt_version,
        }
        row["item_uid"] = step_uid(row, tpl.variant)
        rows.append(row)
    return pl.DataFrame(rows, schema=STEP_SCHEMA)


def row_problems(row: dict) -> list[str]:
    """The row contract, worded (the validator and the tests use it)."""
    out = []
    steps, labels = row["response"]["steps"], row["response"]["process_correctness"]
    index = json.loads(row["step_image_index_json"])
    kinds = json.loads(row["step_error_kinds_json"])
    keys = json.loads(row["step_reconstruction_keys_json"])
    hashes = json.loads(row["image_hashes_json"])
    n = row["num_steps"]
    if not (len(steps) == len(labels) == len(index) == len(kinds) == len(keys) == n):
        out.append(f"{row['item_id']}: per-step lists of unequal length (num_steps {n})")
    if any(v not in (1, 0, -1) for v in labels):
        out.append(f"{row['item_id']}: process_correctness holds values other than 1/0/-1")
    flat = [i for ix in index for i in ix]
    if flat != list(range(len(row["image"]))) or any(not 1 <= len(ix) <= 2 for ix in index):
        out.append(f"{row['item_id']}: step_image_index_json does not give each step 1-2 images in order")
    if len(hashes) != len(row["image"]) or row["prompt"].count(IMAGE_TAG) != len(row["image"]):
        out.append(f"{row['item_id']}: images, hashes and <image> tags differ in number")
    if any((k is None) != (v != -1) for k, v in zip(kinds, labels)) or any(
        k is not None and k not in STEP_ERROR_KINDS for k in kinds
    ):
        out.append(f"{row['item_id']}: an error kind per -1 step and only there")
    want = next((i for i, v in enumerate(labels) if v == -1), -1)
    if row["first_error_index"] != want:
        out.append(f"{row['item_id']}: first_error_index {row['first_error_index']} != {want}")
    if row["answer"] != answer_text(labels):
        out.append(f"{row['item_id']}: answer does not match process_correctness")
    return out
