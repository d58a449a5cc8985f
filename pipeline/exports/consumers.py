"""Trainer and harness exports, each a pure function of the release rows (`common.model_rows`: a table's rows with
their prompts, built and checked once for every export): LLaMA-Factory (sharegpt `messages`), ms-swift (`messages` +
`images`), VLMEvalKit (custom MCQ TSV), lmms-eval (task folder) and GRPO jsonl (a verifiable `<ANSWER>X</ANSWER>`
solution). Image references are relative to the folder `processbench reconstruct --out` writes. Every model-facing
text is checked for hidden frame data before it is returned."""

from __future__ import annotations

import csv
import io as _io
from pathlib import Path

from pipeline.exports import common
from pipeline.schema import CHOICE_LETTERS
from pipeline.writers import task_number


def messages_rows(rows: list[common.ModelRow]) -> list[dict]:
    """sharegpt-style rows with OpenAI role tags: read as they are by LLaMA-Factory and ms-swift."""
    return [{"messages": [{"role": "user", "content": m.user_turn},
                          {"role": "assistant", "content": m.row["sft_target"]}],
             "images": m.images} for m in rows]


def llamafactory_info(cfg: dict) -> dict:
    """dataset_info.json entries; file_name is relative to this folder (LLaMA-Factory's dataset_dir)."""
    files = common.export_files(cfg)
    name = common.safe_name(common.export_cfg(cfg)["dataset_name"])
    info = {}
    for split in ("eval", "sft"):
        rel = files[f"llamafactory_{split}"].rsplit("/", 1)[-1]
        info[f"{name}_{common.hf_split(cfg, split)}"] = {
            "file_name": rel,
            "formatting": "sharegpt",
            "columns": {"messages": "messages", "images": "images"},
            "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"},
        }
    return info


def vlmevalkit_tsv(rows: list[common.ModelRow], cfg: dict) -> str:
    """VLMEvalKit custom MCQ: it builds the options block itself from the A..F columns, so `question` is the
    question alone (with the T8/T9 header lines); multi-image rows give image_path as a Python list literal."""
    buf = _io.StringIO()
    w = csv.writer(buf, delimiter="\t", lineterminator="\n")
    w.writerow(["index", "image_path", "question", *CHOICE_LETTERS, "answer", "category", "l2-category", "item_id",
                "split_group_id"])
    for n, m in enumerate(rows):
        r, refs = m.row, m.images
        header = list(((cfg["tasks"].get(r["task_id"]) or {}).get("prompt") or {}).get("header") or [])
        question = "\n".join(header + [r["question"]]) if header else r["question"]
        common.check_model_text([question, *common.options(r)], r, "vlmevalkit", m.hidden)
        path = refs[0] if len(refs) == 1 else repr(refs)
        opts = common.options(r) + [""] * (len(CHOICE_LETTERS) - int(r["num_choices"]))
        w.writerow([n, path, question, *opts, r["answer"], r["task_id"], r["source"], r["item_id"],
                    r["split_group_id"]])
    return buf.getvalue()


def grpo_rows(rows: list[common.ModelRow]) -> list[dict]:
    """GRPO rows in the open-r1 style SEED-Bench-R1 trains on: the prompt as `problem`, a verifiable `solution`."""
    out = []
    for m in rows:
        r = m.row
        out.append({
            "problem_id": r["item_id"],
            "problem": m.prompt,
            "data_type": "image",
            "problem_type": "multiple choice",
            "options": [f"{c}. {t}" for c, t in zip(CHOICE_LETTERS, common.options(r))],
            "solution": r["sft_target"],
            "images": m.images,
            "task_id": r["task_id"],
            "source": r["source"],
            "split_group_id": r["split_group_id"],
        })
    return out


def lmms_eval_files(rows: list[common.ModelRow], cfg: dict) -> dict[str, str]:
    """The lmms-eval task folder (names relative to it): a shared template, one YAML per family, a group YAML, the
    family's rows as jsonl and utils.py. lmms-eval resolves `data_files` from the working directory, so the YAMLs
    name them relative to the release folder (run lmms-eval from there)."""
    ec = common.export_cfg(cfg)
    folder = ec["files"]["lmms_eval_dir"]
    base = common.safe_name(ec["dataset_name"])
    files: dict[str, str] = {}
    tasks = sorted({m.row["task_id"] for m in rows}, key=task_number)
    files["_default_template_yaml"] = (
        "# Shared by every ProcessBench family task. Run lmms-eval from the release folder, with\n"
        "# PROCESSBENCH_FRAMES set to the folder `processbench reconstruct --out` wrote.\n"
        "dataset_path: json\n"
        "test_split: test\n"
        "output_type: generate_until\n"
        "doc_to_visual: !function utils.doc_to_visual\n"
        "doc_to_text: !function utils.doc_to_text\n"
        "doc_to_target: answer\n"
        "generation_kwargs:\n  max_new_tokens: 512\n  temperature: 0\n  do_sample: false\n"
        "process_results: !function utils.process_results\n"
        "metric_list:\n  - metric: accuracy\n    aggregation: !function utils.aggregate_accuracy\n"
        "    higher_is_better: true\n"
        "metadata:\n  version: 1.0\n")
    by_task: dict[str, list[common.ModelRow]] = {t: [] for t in tasks}
    for m in rows:  # one pass over the table, not one per family
        by_task[m.row["task_id"]].append(m)
    for t in tasks:
        data = [{"item_id": m.row["item_id"], "task_id": t, "source": m.row["source"], "prompt": m.prompt,
                 "answer": m.row["answer"], "images": m.images, "split_group_id": m.row["split_group_id"]}
                for m in by_task[t]]
        files[f"{t}.jsonl"] = common.jsonl(data)
        files[f"{base}_{t.lower()}.yaml"] = (
            f"task: {base}_{t.lower()}\ninclude: _default_template_yaml\n"
            f"dataset_kwargs:\n  data_files:\n    test: {folder}/{t}.jsonl\n")
    files[f"{base}.yaml"] = f"group: {base}\ntask:\n" + "".join(f"  - {base}_{t.lower()}\n" for t in tasks)
    files["utils.py"] = (Path(__file__).parent / "lmms_utils.py").read_text(encoding="utf-8")
    return files
