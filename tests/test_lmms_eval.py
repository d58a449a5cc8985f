"""lmms-eval itself runs the release's exported task folder: the real package (requirements-lmms.lock, installed by
`make lmms-venv` into its own virtualenv, .venv-lmms, which `make test` builds and names in PROCESSBENCH_LMMS_EVAL_PYTHON)
loads the YAMLs and utils.py through its TaskManager and scores them with its own evaluator, `python -m lmms_eval`, as
the card tells a user to run it.

The model is lmms-eval's own `from_log` model, which replays responses from log files: here `<ANSWER>X</ANSWER>` with
X the release's answer (the canonical eval tables; for the circular task, the answer after rotation,
pipeline/scoring/circular.py). Gold must score 1.0 in every task, level group, the `processbench` group and the circular
task, with lmms-eval's `doc_to_target` giving the same letter for every document. A planted wrong answer in one task's
jsonl and a planted wrong `doc_to_target` in another task's YAML are each found, and nothing else."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from pipeline.scoring.circular import COPY_SEP, circular_rows
from pipeline.settings.config import load_settings
from pipeline.exports import common
from pipeline.release.rows import read_tables
from pipeline.exports.lmms import TEMPLATE
from pipeline.release.schema import CHOICE_LETTERS

PYTHON_ENV = "PROCESSBENCH_LMMS_EVAL_PYTHON"
PLANTED = "planted"
RUN_LIMIT_S = 1800  # a bound on a hung run, not a timing check (a run takes about a minute)


@pytest.fixture(scope="session")  # session scope: set up before the demo build, so a skip costs nothing
def lmms_python() -> str:
    py = os.environ.get(PYTHON_ENV)
    if not py:
        why = f"{PYTHON_ENV} is not set: `make test` builds lmms-eval's virtualenv (make lmms-venv) and sets it"
        if os.environ.get("CI") == "true":
            pytest.fail(why)  # CI runs `make test`: a skip there would hide the check
        pytest.skip(why)
    assert Path(py).is_file(), f"{PYTHON_ENV}={py}: no such interpreter (run `make lmms-venv`)"
    return py


@pytest.fixture(scope="module")
def cfg():
    return load_settings(scale="demo")


@pytest.fixture(scope="module")
def gold(demo_release, cfg) -> dict[str, str]:
    """{item id or circular copy id: answer letter} from the release's canonical eval tables (every level)."""
    ev = read_tables(demo_release, cfg, levels=True)["eval"]
    out = dict(zip(ev["item_id"], ev["answer"]))
    out.update(zip(*circular_rows(ev).select("copy_id", "answer")))
    return out


def _tasks(folder: Path) -> dict[str, dict]:
    """{task name: its YAML} for the folder's tasks (group YAMLs and the shared template left out)."""
    loader = type("L", (yaml.SafeLoader,), {})
    loader.add_constructor("!function", lambda ld, node: ld.construct_scalar(node))
    out = {}
    for path in sorted(folder.glob("*.yaml")):
        doc = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
        if "task" in doc and "group" not in doc:
            out[doc["task"]] = doc
    return out


def _docs(release: Path, task: dict) -> list[dict]:
    path = release / task["dataset_kwargs"]["data_files"]["test"]
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _write_gold_logs(release: Path, folder: Path, gold: dict[str, str], logs: Path) -> None:
    """One log per task in the form lmms-eval's `from_log` model reads: the gold response per document index."""
    logs.mkdir(parents=True, exist_ok=True)
    for name, task in _tasks(folder).items():
        entries = [
            {"doc_id": i, "resps": [[f"thinking\n<ANSWER>{gold[d.get('copy_id', d['item_id'])]}</ANSWER>"]]}
            for i, d in enumerate(_docs(release, task))
        ]
        log = {
            "args": {"model": "from_log", "model_args": "", "limit": None},
            "model_configs": {"task": name},
            "time": "0101_0000",
            "logs": entries,
        }
        (logs / f"{name}.json").write_text(json.dumps(log), encoding="utf-8")


def _planted_copy(release: Path, folder: Path, base: str, dest: Path) -> tuple[Path, str, str]:
    """The task folder copied to `dest` under the name PLANTED (tasks, groups, files; data files by absolute path),
    with a wrong answer in the first document of the L1 T1 task and a wrong doc_to_target in the first L2 task.
    Returns the copy, and the planted tasks (answer, target)."""
    dest.mkdir(parents=True)
    answer_task, target_task = f"{PLANTED}_l1_t1", None
    for name, task in _tasks(folder).items():
        if name.startswith(f"{base}_circular"):
            continue
        new = PLANTED + name[len(base) :]
        docs = _docs(release, task)
        if new == answer_task:
            docs[0]["answer"] = next(c for c in CHOICE_LETTERS if c != docs[0]["answer"])
        (dest / f"{new}.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
        lines = [
            f"    test: {dest / f'{new}.jsonl'}" if ln.startswith("    test: ") else ln.replace(base, PLANTED)
            for ln in (folder / f"{name}.yaml").read_text(encoding="utf-8").splitlines()
        ]
        if target_task is None and new.startswith(f"{PLANTED}_l2_"):
            target_task = new
            lines.append("doc_to_target: source")
        (dest / f"{new}.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for path in folder.glob("*.yaml"):  # the groups, under the planted names
        if path.stem not in _tasks(folder):
            text = path.read_text(encoding="utf-8")
            (dest / path.name.replace(base, PLANTED)).write_text(text.replace(base, PLANTED), encoding="utf-8")
    for name in (TEMPLATE, "utils.py"):
        shutil.copy(folder / name, dest / name)
    return dest, answer_task, target_task


def _run_lmms_eval(python: str, release: Path, include: Path, tasks: list[str], logs: Path, out: Path) -> dict:
    """`python -m lmms_eval` from the release folder; its results and its per-sample logs by task."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "VIRTUAL_ENV"))}
    env.update(
        HF_HOME=str(out / "hf"),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        WANDB_MODE="disabled",
        TOKENIZERS_PARALLELISM="false",
    )
    cmd = [
        python,
        "-m",
        "lmms_eval",
        "--model",
        "from_log",
        "--model_args",
        f"logs={logs}",
        "--tasks",
        ",".join(tasks),
        "--include_path",
        str(include),
        "--output_path",
        str(out / "results"),
        "--log_samples",
        "--verbosity",
        "WARNING",
    ]
    proc = subprocess.run(cmd, cwd=release, env=env, capture_output=True, text=True, timeout=RUN_LIMIT_S)
    found = sorted((out / "results").rglob("*_results.json"))
    assert proc.returncode == 0 and len(found) == 1, (proc.returncode, found, proc.stdout[-3000:], proc.stderr[-6000:])
    samples = {}
    for path in (out / "results").rglob("*_samples_*.jsonl"):
        samples[path.stem.split("_samples_", 1)[1]] = [
            json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
        ]
    return {"results": json.loads(found[0].read_text(encoding="utf-8")), "samples": samples}


def _problems(run: dict, release: Path, folder: Path, gold: dict[str, str], base: str) -> list[str]:
    """Every way the run differs from gold scoring 1.0 through the task folder named `base`, naming the task or
    group."""
    res = {k: v for k, v in run["results"]["results"].items() if k == base or k.startswith(f"{base}_")}
    tasks = _tasks(folder)
    out = []
    for name, task in tasks.items():
        metric = "circular_accuracy" if name == f"{base}_circular" else "accuracy"
        docs = _docs(release, task)
        if res.get(name, {}).get(f"{metric},none") != 1.0:
            out.append(f"{name}: {metric} {res.get(name, {}).get(f'{metric},none')}")
        samples = sorted(run["samples"].get(name, []), key=lambda s: s["doc_id"])
        if len(samples) != len(docs):
            out.append(f"{name}: {len(samples)} samples for {len(docs)} documents")
            continue
        wrong = [s["doc_id"] for s, d in zip(samples, docs) if str(s["target"]) != gold[d.get("copy_id", d["item_id"])]]
        if wrong:
            out.append(f"{name}: doc_to_target is not the answer for documents {wrong[:5]}")
    groups = [g for g in res if g not in tasks]
    for g in groups:
        if res[g].get("accuracy,none") != 1.0:
            out.append(f"group {g}: accuracy {res[g].get('accuracy,none')}")
    if base not in groups:
        out.append(f"group {base}: not in the results")
    return out


def test_lmms_eval_scores_gold_1_through_the_exported_task(lmms_python, demo_release, cfg, gold, tmp_path):
    """One lmms-eval run over the exported folder and a planted copy of it (one run: loading torch and lmms-eval's
    task index is most of a run's time). lmms-eval's CLI takes one --include_path, which it walks: it holds the
    exported folder as written (its YAMLs name their data relative to the release folder, the run's working
    directory) and the planted copy."""
    base = common.safe_name(cfg.exports.dataset_name)
    exported = demo_release / common.export_files(cfg)["lmms_eval_dir"]
    include = tmp_path / "tasks"
    folder = Path(shutil.copytree(exported, include / base))
    planted, answer_task, target_task = _planted_copy(demo_release, folder, base, include / PLANTED)
    _write_gold_logs(demo_release, folder, gold, tmp_path / "logs")
    _write_gold_logs(demo_release, planted, gold, tmp_path / "logs")
    run = _run_lmms_eval(
        lmms_python, demo_release, include, [base, f"{base}_circular", PLANTED], tmp_path / "logs", tmp_path / "out"
    )
    assert _problems(run, demo_release, folder, gold, base) == []
    res = run["results"]["results"]
    levels = sorted({d["eval_level"] for t in _tasks(folder).values() for d in _docs(demo_release, t)})
    assert levels == ["L1", "L2", "L3"] and all(f"{base}_{lv.lower()}" in res for lv in levels)
    assert sum(len(_docs(demo_release, t)) for n, t in _tasks(folder).items() if n != f"{base}_circular") == sum(
        1 for k in gold if COPY_SEP not in k
    )
    # lmms-eval's clustered standard errors read the tasks' cluster_key (split_group_id) from the per-item dicts
    assert res[f"{base}_l1_t1"]["accuracy_stderr_clustered,none"] != "N/A"

    # planted: a wrong answer in one task's documents, a wrong doc_to_target in another task's YAML
    problems = _problems(run, demo_release, planted, gold, PLANTED)
    assert sorted({p.split(":")[0] for p in problems}) == sorted(
        [answer_task, target_task, f"group {PLANTED}_l1", f"group {PLANTED}"]
    ), problems
    assert f"{target_task}: doc_to_target is not the answer" in " ".join(problems)
