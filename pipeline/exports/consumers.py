"""Trainer and harness exports, each a pure function of one part's rows (an eval level or SFT; `common.model_rows`:
a table's rows with their prompts, built and checked once for every export): LLaMA-Factory (sharegpt `messages`),
ms-swift (`messages` + `images`), VLMEvalKit (custom MCQ TSV, and its CircularEval copy) and GRPO jsonl (a
conversational `prompt`, the images and an `<answer>X</answer>` solution); lmms-eval is `lmms.py`. Image references
are relative to the folder `processbench reconstruct --out` writes. Every model-facing text is checked for hidden
frame data before it is returned, and every row carries only model-facing columns (`common.MODEL_FACING_COLUMNS`)
besides the tool's own keys."""

from __future__ import annotations

from typing import TYPE_CHECKING

import csv
import io as _io

from pipeline.scoring.circular import INDEX_STRIDE, rotate
from pipeline.exports import common
from pipeline.release.schema import CHOICE_LETTERS

if TYPE_CHECKING:
    from pipeline.settings.root import Settings


def messages_rows(rows: list[common.ModelRow]) -> list[dict]:
    """sharegpt-style rows with OpenAI role tags: read as they are by LLaMA-Factory and ms-swift."""
    return [
        {
            "messages": [
                {"role": "user", "content": m.user_turn},
                {"role": "assistant", "content": m.row["sft_target"]},
            ],
            "images": m.images,
        }
        for m in rows
    ]


def llamafactory_info(parts: list[common.Part], cfg: Settings) -> dict:
    """dataset_info.json entries, one per part (`processbench_L1`, ..., `processbench_train`); file_name is relative
    to this folder (LLaMA-Factory's dataset_dir)."""
    files = common.export_files(cfg)
    name = common.safe_name(cfg.exports.dataset_name)
    info = {}
    for part in parts:
        rel = part.file(files[f"llamafactory_{part.split}"]).rsplit("/", 1)[-1]
        info[f"{name}_{part.name}"] = {
            "file_name": rel,
            "formatting": "sharegpt",
            "columns": {"messages": "messages", "images": "images"},
            "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"},
        }
    return info


TSV_COLUMNS = (
    "index",
    "image_path",
    "question",
    *CHOICE_LETTERS,
    "answer",
    "category",
    "l2-category",
    "eval_level",
    "item_id",
    "item_uid",
    "split_group_id",
)


def _question(r: dict, cfg: Settings) -> str:
    """The plain question (T8/T9 with their header lines): VLMEvalKit adds the options and its own instruction."""
    t = cfg.tasks.get(r["task_id"])
    header = list(t.prompt.header) if t is not None and t.prompt is not None else []
    return "\n".join(header + [r["question"]]) if header else r["question"]


def vlmevalkit_tsv(rows: list[common.ModelRow], cfg: Settings, circular: bool = False) -> str:
    """VLMEvalKit custom MCQ: `question` is the plain question, options in A..F (empty past num_choices), multi-image
    rows give image_path as a Python list literal. circular=True: every item once per
    rotation of its options (pipeline/scoring/circular.py), copy k at index item + k x 1e6, as VLMEvalKit's circular files."""
    buf = _io.StringIO()
    w = csv.writer(buf, delimiter="\t", lineterminator="\n")
    w.writerow(TSV_COLUMNS)
    for n, m in enumerate(rows):
        r, refs = m.row, m.images
        question = _question(r, cfg)
        common.check_model_text([question, *common.options(r)], r, "vlmevalkit", m.hidden)
        path = refs[0] if len(refs) == 1 else repr(refs)
        k_max = int(r["num_choices"]) if circular else 1
        for k in range(k_max):
            opts, answer = rotate(common.options(r), r["answer"], k)
            opts += [""] * (len(CHOICE_LETTERS) - len(opts))
            w.writerow(
                [
                    n + k * INDEX_STRIDE,
                    path,
                    question,
                    *opts,
                    answer,
                    r["task_id"],
                    r["source"],
                    r["eval_level"] or "",
                    r["item_id"],
                    r["item_uid"],
                    r["split_group_id"],
                ]
            )
    return buf.getvalue()


def grpo_rows(rows: list[common.ModelRow]) -> list[dict]:
    """GRPO rows for TRL's GRPOTrainer: a conversational `prompt` (one image placeholder per image, then the text),
    `images` (paths under the reconstruction folder) and a `solution` in the `<answer>X</answer>` form the open-r1 /
    SEED-Bench-R1 accuracy reward reads its ground truth from; the model-facing columns ride along for rewards."""
    out = []
    for m in rows:
        r = m.row
        out.append(
            {
                "prompt": [
                    {
                        "role": "user",
                        "content": [*({"type": "image"} for _ in m.images), {"type": "text", "text": m.prompt}],
                    }
                ],
                "images": m.images,
                "solution": f"<answer>{r['answer']}</answer>",
                **{
                    c: r[c]
                    for c in ("item_id", "item_uid", "source", "task_id", "eval_level", "split_group_id", "answer")
                },
            }
        )
    return out
