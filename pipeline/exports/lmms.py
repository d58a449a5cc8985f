"""The lmms-eval task folder: one task per (eval level, family), a group per level with its aggregate, the group
`processbench` over every level, and the CircularEval task `processbench_circular` (pipeline/scoring/circular.py).

Each task reads its own jsonl (model-facing columns, the prompt and the image references). lmms-eval resolves
`data_files` from the working directory, so the YAMLs name them relative to the release folder (run lmms-eval from
there, with `--include_path <the folder>`). Scores are the tasks' own tag-first `process_results` (utils.py, the
release's answer rule, never lmms-eval's shared extractor); their per-item dicts carry `score` and `split_group_id`,
which `cluster_key` names, so lmms-eval's clustered standard errors treat one episode's items as one cluster."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pathlib import Path

from pipeline.scoring.circular import copy_id, rotate
from pipeline.exports import common
from pipeline.release.schema import CHOICE_LETTERS
from pipeline.release.writers import task_number

if TYPE_CHECKING:
    from pipeline.settings.root import Settings

TEMPLATE = "_default_template_yaml"
_METRIC = (
    "metric_list:\n  - metric: accuracy\n    aggregation: !function utils.aggregate_accuracy\n"
    "    higher_is_better: true\n"
)


def _template() -> str:
    return (
        "# Shared by every ProcessBench task. Run lmms-eval from the release folder, with PROCESSBENCH_FRAMES\n"
        "# set to the folder `processbench reconstruct --out` wrote.\n"
        "dataset_path: json\n"
        "test_split: test\n"
        "output_type: generate_until\n"
        "doc_to_visual: !function utils.doc_to_visual\n"
        "doc_to_text: !function utils.doc_to_text\n"
        "doc_to_target: answer\n"
        "generation_kwargs:\n  max_new_tokens: 512\n  temperature: 0\n  do_sample: false\n"
        "process_results: !function utils.process_results\n"
        + _METRIC
        + "# Items of one episode are correlated: clustered standard errors by isolation group.\n"
        "cluster_key: split_group_id\n"
        "metadata:\n  version: 2.0\n"
    )


def _doc(m: common.ModelRow, prompt: str | None = None, answer: str | None = None, cid: str | None = None) -> dict:
    r = m.row
    doc = {
        "item_id": r["item_id"],
        "item_uid": r["item_uid"],
        "task_id": r["task_id"],
        "source": r["source"],
        "eval_level": r["eval_level"],
        "prompt": m.prompt if prompt is None else prompt,
        "answer": r["answer"] if answer is None else answer,
        "images": m.images,
        "split_group_id": r["split_group_id"],
    }
    if cid is not None:
        doc["copy_id"] = cid
    return doc


def _group(name: str, members: list[str]) -> str:
    return (
        f"group: {name}\ntask:\n"
        + "".join(f"  - {t}\n" for t in members)
        + "aggregate_metric_list:\n  - metric: accuracy\n    aggregation: mean\n    weight_by_size: true\n"
        + "metadata:\n  version: 2.0\n"
    )


def _task(name: str, folder: str, data: str, extra: str = "") -> str:
    return f"task: {name}\ninclude: {TEMPLATE}\ndataset_kwargs:\n  data_files:\n    test: {folder}/{data}\n" + extra


def _circular_prompt(m: common.ModelRow, options: list[str], cfg: Settings) -> str:
    """The item's prompt with its options in the rotated order (the one prompt builder, pipeline/release/prompts.py)."""
    row = dict(m.row)
    row.update({f"choice_{c}": (options[j] if j < len(options) else None) for j, c in enumerate(CHOICE_LETTERS)})
    return common.prompt(row, cfg)


def lmms_eval_files(eval_parts: list[tuple[common.Part, list[common.ModelRow]]], cfg: Settings) -> dict[str, str]:
    """{file name in the task folder: text} for the eval parts (level, rows with prompts)."""
    ec = cfg.exports
    folder = ec.files.lmms_eval_dir
    base = common.safe_name(ec.dataset_name)
    files: dict[str, str] = {TEMPLATE: _template()}
    groups = []
    circular = []
    for part, rows in eval_parts:
        prefix = f"{base}_{part.level.lower()}" if part.level else base
        by_task: dict[str, list[common.ModelRow]] = {}
        for m in rows:  # one pass over the table, not one per family
            by_task.setdefault(m.row["task_id"], []).append(m)
        names = []
        for t in sorted(by_task, key=task_number):
            name = f"{prefix}_{t.lower()}"
            files[f"{name}.jsonl"] = common.jsonl([_doc(m) for m in by_task[t]])
            files[f"{name}.yaml"] = _task(name, folder, f"{name}.jsonl")
            names.append(name)
        if part.level:
            files[f"{prefix}.yaml"] = _group(prefix, names)
            groups.append(prefix)
        else:
            groups += names
        for m in rows:
            options = common.options(m.row)
            for k in range(len(options)):
                rotated, answer = rotate(options, m.row["answer"], k)
                prompt = _circular_prompt(m, rotated, cfg)
                common.check_model_text([prompt], m.row, "lmms-eval circular", m.hidden)
                circular.append(_doc(m, prompt, answer, copy_id(m.row["item_id"], k)))
    files[f"{base}.yaml"] = _group(base, groups)
    files[f"{base}_circular.jsonl"] = common.jsonl(circular)
    files[f"{base}_circular.yaml"] = _task(
        f"{base}_circular",
        folder,
        f"{base}_circular.jsonl",
        "process_results: !function utils.process_results_circular\n"
        "metric_list:\n  - metric: circular_accuracy\n    aggregation: !function utils.aggregate_circular\n"
        "    higher_is_better: true\n",
    )
    files["utils.py"] = (Path(__file__).parent / "lmms_utils.py").read_text(encoding="utf-8")
    return files
