"""The release in its users' tools: card (datasets), Croissant (mlcroissant), trainer / harness exports."""

from __future__ import annotations

import csv
import importlib.util
import json
import re
import shutil

import polars as pl
import pytest
import yaml

from pipeline.release import writers
from pipeline.release.rows import read_tables
from pipeline.settings.config import load_settings
from pipeline.exports.steps import (
    STEP_CONFIG,
    STEP_CONFIG_COLUMNS,
    STEP_RECONSTRUCTION_COLUMNS,
    STEP_RECONSTRUCTION_CONFIG,
    step_parts,
)
from pipeline.exports import card, common, consumers, facing, lmms, run_exports, write_exports
from pipeline.release.schema import CHOICE_LETTERS, MODEL_FACING_COLUMNS
from pipeline.publish.validate import validate_release


@pytest.fixture(scope="module")
def cfg():
    return load_settings(scale="demo")


@pytest.fixture(scope="module")
def tables(demo_release, cfg):
    """The release tables as the exports read them: `eval` holds every eval level."""
    return read_tables(demo_release, cfg, levels=True)


@pytest.fixture(scope="module")
def parts(tables, cfg):
    return common.parts(tables, cfg)


def _jsonl(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _front_matter(path):
    text = path.read_text(encoding="utf-8")
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n", 2)[1])


def _step_level_rows(release, cfg, level: str) -> int:
    from pipeline.steps.tables import read_step_tables

    steps = read_step_tables(release, cfg, columns=["eval_level"])
    return steps["eval"].filter(pl.col("eval_level") == level).height if steps else 0


def test_build_writes_every_export_under_checksums(demo_release, cfg, parts):
    listed = {line.split("  ", 1)[1] for line in (demo_release / "checksums.sha256").read_text().splitlines()}
    assert [p.name for p in parts] == ["L1", "L2", "L3", "train"]
    for key, rel in common.export_files(cfg).items():
        if key == "lmms_eval_dir":
            continue
        split = key.rsplit("_", 1)[-1]
        for p in [p for p in parts if p.split == split] if split in writers.SPLITS else []:
            if key.startswith("visualprocessbench") and p.file(rel) not in listed:
                # the step track's: a level holding no step items (its units' sources build none) has no file
                assert not _step_level_rows(demo_release, cfg, p.name), (key, p.name)
                continue
            assert p.file(rel) in listed, (key, p.name)  # one file per eval level (and one for SFT)
        assert split in writers.SPLITS or rel in listed, key
    assert any(r.startswith(common.export_files(cfg)["lmms_eval_dir"] + "/") for r in listed)
    assert validate_release(demo_release, cfg) == []


def test_exports_are_deterministic(demo_release, cfg, tmp_path):
    copy = tmp_path / "rel"
    shutil.copytree(demo_release, copy)
    run_exports(cfg, copy)
    assert (copy / "checksums.sha256").read_bytes() == (demo_release / "checksums.sha256").read_bytes()


def test_card_configs_load_in_datasets(demo_release, cfg, tables, parts, tmp_path, monkeypatch, caplog):
    """Every config of the card loads in `datasets` with a split per eval level and SFT, the declared counts and
    byte sizes, and no warning; the model-facing configs hold only MODEL_FACING_COLUMNS and the images."""
    import logging
    import warnings

    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    fm = _front_matter(demo_release / "README.md")
    assert fm["license"] == "other"
    names = [c["config_name"] for c in fm["configs"]]
    tasks = sorted(set(tables["eval"]["task_id"]) | set(tables["sft"]["task_id"]), key=writers.task_number)
    sources = set(tables["eval"]["source_slug"]) | set(tables["sft"]["source_slug"])
    assert names == [
        "default",
        *tasks,
        *[f"source_{s}" for s in writers.source_order(cfg) if s in sources],
        card.RECONSTRUCTION_CONFIG,
        STEP_CONFIG,
        STEP_RECONSTRUCTION_CONFIG,
    ]
    names, step_names = names[:-2], names[-2:]  # the T13 step track's configs: checked after the loop
    info = {i["config_name"]: i for i in fm["dataset_info"]}
    facing_cols = [*MODEL_FACING_COLUMNS, common.IMAGES_COLUMN]
    caplog.set_level(logging.WARNING)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name in names:
            ds = datasets.load_dataset(str(demo_release), name=name, cache_dir=str(tmp_path / "hf"))
            declared = {s["name"]: s for s in info[name]["splits"]}
            for p in parts:
                df = p.df
                if name.startswith("T"):
                    df = df.filter(pl.col("task_id") == name)
                elif name.startswith("source_"):
                    df = df.filter(pl.col("source_slug") == name[len("source_") :])
                got = ds[p.name].num_rows if p.name in ds else 0
                assert got == df.height, (name, p.name)
                if got:
                    assert declared[p.name]["num_examples"] == df.height
                    assert declared[p.name]["num_bytes"] == ds[p.name].info.splits[p.name].num_bytes, (name, p.name)
                    assert ds[p.name]["item_id"] == df["item_id"].to_list()
            cols = [f["name"] for f in info[name]["features"]]
            want = ["item_id", *common.RECONSTRUCTION_ONLY] if name == card.RECONSTRUCTION_CONFIG else facing_cols
            assert cols == want and next(iter(ds.values())).column_names == want, name
        steps = step_parts(demo_release, cfg)
        for name, want in zip(step_names, (list(STEP_CONFIG_COLUMNS), list(STEP_RECONSTRUCTION_COLUMNS))):
            ds = datasets.load_dataset(str(demo_release), name=name, cache_dir=str(tmp_path / "hf"))
            declared = {s["name"]: s for s in info[name]["splits"]}
            assert {k: v.num_rows for k, v in ds.items()} == {p[0]: p[3].height for p in steps}
            for split, _, _, df in steps:
                assert declared[split]["num_bytes"] == ds[split].info.splits[split].num_bytes, (name, split)
                assert ds[split]["item_id"] == df["item_id"].to_list() and ds[split].column_names == want
        ds_steps = datasets.load_dataset(str(demo_release), name=STEP_CONFIG, cache_dir=str(tmp_path / "hf"))
        row = ds_steps["train"][0]  # `response` is a struct: {steps: [...], process_correctness: [...]}
        assert set(row["response"]) == {"steps", "process_correctness"}
        assert len(row["response"]["steps"]) == len(row["response"]["process_correctness"]) == row["num_steps"]
    assert [str(w.message) for w in caught] == [] and [r.getMessage() for r in caplog.records] == []
    default = datasets.load_dataset(str(demo_release), cache_dir=str(tmp_path / "hf"))
    assert {k: v.num_rows for k, v in default.items()} == {p.name: p.df.height for p in parts}
    assert set(default["L2"]["eval_level"]) == {"L2"} and set(default["L3"]["eval_level"]) == {"L3"}


def test_croissant_validates_and_iterates(demo_release, parts, cfg):
    mlc = pytest.importorskip("mlcroissant")
    ds = mlc.Dataset(jsonld=str(demo_release / "croissant.json"))
    meta = json.loads((demo_release / "croissant.json").read_text())
    for key in ("rai:dataUseCases", "rai:dataLimitations", "rai:dataBiases", "rai:dataCollection", "license"):
        assert meta[key]
    steps = [f"{STEP_CONFIG}_{p[0]}" for p in step_parts(demo_release, cfg)]
    assert [r["@id"] for r in meta["recordSet"]] == ["L1", "L2", "L3", "train", *steps]
    for (_, _, _, df), rs in zip(step_parts(demo_release, cfg), steps):  # the step files iterate too
        ids = [r[f"{rs}/item_id"] for r in ds.records(record_set=rs)]
        assert [i.decode() if isinstance(i, bytes) else i for i in ids] == df["item_id"].to_list()
    for p in parts:
        rset = next(r for r in meta["recordSet"] if r["@id"] == p.name)
        assert {"@id": f"{p.name}/split_group_id"} in rset["key"]
        ids = [r[f"{p.name}/item_id"] for r in ds.records(record_set=p.name)]
        assert [i.decode() if isinstance(i, bytes) else i for i in ids] == p.df["item_id"].to_list()


def test_llamafactory_rows_satisfy_the_image_tag_rule(demo_release, cfg, parts):
    xf = common.export_files(cfg)
    info = json.loads((demo_release / xf["llamafactory_info"]).read_text())
    folder = (demo_release / xf["llamafactory_info"]).parent
    assert list(info) == [f"processbench_{p.name}" for p in parts]
    for p in parts:
        entry = info[f"processbench_{p.name}"]
        assert entry["formatting"] == "sharegpt"
        rows = _jsonl(folder / entry["file_name"])
        assert len(rows) == p.df.height
        for r in rows:
            n_tags = sum(m["content"].count("<image>") for m in r["messages"])
            assert n_tags == len(r["images"]) >= 1
            assert [m["role"] for m in r["messages"]] == ["user", "assistant"]
            assert all(re.fullmatch(r"images/pb_v2_(eval|sft)_\d{6}_\d+\.png", x) for x in r["images"])
        assert [r["messages"][1]["content"] for r in rows] == p.df["sft_target"].to_list()


def _reward(demo_release):
    """The GRPO reward the card prints, exec'd from the card itself."""
    text = (demo_release / "README.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", text, re.DOTALL).group(1)
    scope = {}
    exec(compile(code, "card-reward", "exec"), scope)
    return scope["accuracy_reward"]


def _recipe_ground_truth(solution):
    """How the open-r1 / SEED-Bench-R1 accuracy reward reads the gold answer from `solution`."""
    m = re.search(r"<answer>(.*?)</answer>", solution, re.DOTALL)
    return m.group(1).strip() if m else solution.strip()


def test_swift_and_grpo_rows(demo_release, cfg, parts):
    xf = common.export_files(cfg)
    reward = _reward(demo_release)
    for p in parts:
        swift = _jsonl(demo_release / p.file(xf[f"swift_{p.split}"]))
        assert len(swift) == p.df.height
        grpo = _jsonl(demo_release / p.file(xf[f"grpo_{p.split}"]))
        assert len(grpo) == p.df.height
        for g, r in zip(grpo, p.df.iter_rows(named=True)):
            assert g["item_id"] == r["item_id"] and g["eval_level"] == r["eval_level"]
            [turn] = g["prompt"]
            assert turn["role"] == "user"
            kinds = [c["type"] for c in turn["content"]]
            assert kinds == ["image"] * len(g["images"]) + ["text"] and len(g["images"]) == common.num_images(r)
            assert turn["content"][-1]["text"] == common.prompt(r, cfg)
            assert g["solution"] == f"<answer>{r['answer']}</answer>"
            assert _recipe_ground_truth(g["solution"]) == r["answer"]
        gold = [[{"role": "assistant", "content": f"reasoning\n<ANSWER>{g['answer']}</ANSWER>"}] for g in grpo]
        wrong = [
            [
                {
                    "role": "assistant",
                    "content": "<answer>" + next(c for c in CHOICE_LETTERS if c != g["answer"]) + "</answer>",
                }
            ]
            for g in grpo
        ]
        unsure = [[{"role": "assistant", "content": "I don't know"}] for _ in grpo]
        solutions = [g["solution"] for g in grpo]
        assert set(reward(gold, solutions)) == {1.0}
        assert set(reward(wrong, solutions)) == {0.0} and set(reward(unsure, solutions)) == {0.0}


def _tsv(path):
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


def test_vlmevalkit_tsv_columns(demo_release, cfg, parts):
    """VLMEvalKit's custom MCQ TSV (not installable from the package registry: held to its documented columns):
    unique integer `index`, `image_path`, the plain `question`, options A..F (empty past the item's), `answer` a
    letter among them; VLMEvalKit writes the prompt, so no protocol text is in the TSV."""
    xf = common.export_files(cfg)
    for p in [p for p in parts if p.split == "eval"]:
        rows = _tsv(demo_release / p.file(xf["vlmevalkit_eval"]))
        assert list(rows[0])[:10] == ["index", "image_path", "question", *"ABCDEF", "answer"]
        assert len(rows) == p.df.height and len({int(t["index"]) for t in rows}) == len(rows)
        for t, r in zip(rows, p.df.iter_rows(named=True)):
            assert t["answer"] == r["answer"] and t["category"] == r["task_id"] and t["l2-category"] == r["source"]
            assert [t[c] for c in "ABCDEF"][: r["num_choices"]] == common.options(r)
            assert all(t[c] == "" for c in "ABCDEF"[r["num_choices"] :])
            assert t["question"].endswith(r["question"]) and "ANSWER" not in t["question"]
            assert t["answer"] in "ABCDEF"[: r["num_choices"]]


def test_vlmevalkit_circular_copies(demo_release, cfg, tables):
    """ProcessBench_circular.tsv: VLMEvalKit evaluates a dataset whose name holds `circular` circularly, grouping
    copies by index mod 1e6 (its `g_index`): every item once per rotation, the gold option text the same in each."""
    rows = _tsv(demo_release / common.export_files(cfg)["vlmevalkit_circular"])
    assert "circular" in common.export_files(cfg)["vlmevalkit_circular"].lower()
    ev = tables["eval"]
    assert len(rows) == int(ev["num_choices"].sum())
    by_item: dict[int, list[dict]] = {}
    for t in rows:
        by_item.setdefault(int(int(t["index"]) % 1e6), []).append(t)
    assert len(by_item) == ev.height
    for i, r in enumerate(ev.iter_rows(named=True)):
        copies = by_item[i]
        assert [int(t["index"]) // 1_000_000 for t in copies] == list(range(r["num_choices"]))
        gold = {t[t["answer"]] for t in copies}
        assert gold == {r[f"choice_{r['answer']}"]} and {t["item_id"] for t in copies} == {r["item_id"]}
        assert len({t["answer"] for t in copies}) == r["num_choices"]  # the gold moves through every letter


def _lmms_loader():
    loader = type("L", (yaml.SafeLoader,), {})
    loader.add_constructor("!function", lambda ld, node: ("function", ld.construct_scalar(node)))
    return loader


def test_lmms_eval_task_folder(demo_release, cfg, parts):
    folder = demo_release / common.export_files(cfg)["lmms_eval_dir"]
    loader = _lmms_loader()
    template = yaml.load((folder / "_default_template_yaml").read_text(), Loader=loader)
    assert template["process_results"] == ("function", "utils.process_results")
    assert template["cluster_key"] == "split_group_id"
    spec = importlib.util.spec_from_file_location("pb_lmms_utils", folder / "utils.py")
    utils = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(utils)
    top = yaml.load((folder / "processbench.yaml").read_text(), Loader=loader)
    assert top["task"] == ["processbench_l1", "processbench_l2", "processbench_l3"]
    assert top["aggregate_metric_list"] == [{"metric": "accuracy", "aggregation": "mean", "weight_by_size": True}]
    for p in [p for p in parts if p.split == "eval"]:
        group = yaml.load((folder / f"processbench_{p.level.lower()}.yaml").read_text(), Loader=loader)
        assert group["aggregate_metric_list"][0]["metric"] == "accuracy"
        n = 0
        for name in group["task"]:
            task = yaml.load((folder / f"{name}.yaml").read_text(), Loader=loader)
            data = _jsonl(demo_release / task["dataset_kwargs"]["data_files"]["test"])
            n += len(data)
            gold = [utils.process_results(d, [f"thinking\n<ANSWER>{d['answer']}</ANSWER>"])["accuracy"] for d in data]
            assert utils.aggregate_accuracy(gold) == 1.0
            assert {g["split_group_id"] for g in gold} == {d["split_group_id"] for d in data}
            wrong = [utils.process_results(d, ["I cannot tell"])["accuracy"] for d in data]
            assert utils.aggregate_accuracy(wrong) == 0.0
            assert utils.doc_to_text(data[0]) == data[0]["prompt"]
        assert n == p.df.height
    circ = yaml.load((folder / "processbench_circular.yaml").read_text(), Loader=loader)
    data = _jsonl(demo_release / circ["dataset_kwargs"]["data_files"]["test"])
    gold = [utils.process_results_circular(d, [f"<ANSWER>{d['answer']}</ANSWER>"])["circular_accuracy"] for d in data]
    assert utils.aggregate_circular(gold) == 1.0
    # one wrong copy of an item makes the item wrong
    first = data[0]["item_id"]
    half = [dict(g, score=0.0) if g["item_id"] == first and i % 2 else g for i, g in enumerate(gold)]
    n_items = len({d["item_id"] for d in data})
    assert utils.aggregate_circular(half) == pytest.approx((n_items - 1) / n_items)


def _model_texts(demo_release, cfg, parts):
    """(export, item_id, text) for every model-facing text of every export."""
    xf = common.export_files(cfg)
    for p in parts:
        for key in ("llamafactory", "swift"):
            for r, item in zip(_jsonl(demo_release / p.file(xf[f"{key}_{p.split}"])), p.df["item_id"]):
                yield key, item, " ".join(m["content"] for m in r["messages"])
        for r in _jsonl(demo_release / p.file(xf[f"grpo_{p.split}"])):
            yield "grpo", r["item_id"], r["prompt"][0]["content"][-1]["text"] + r["solution"]
        if p.split == "eval":
            for r in _tsv(demo_release / p.file(xf["vlmevalkit_eval"])):
                yield "vlmevalkit", r["item_id"], " ".join(r[c] for c in ("question", *"ABCDEF"))
    for r in _tsv(demo_release / xf["vlmevalkit_circular"]):
        yield "vlmevalkit_circular", r["item_id"], " ".join(r[c] for c in ("question", *"ABCDEF"))
    for path in sorted((demo_release / xf["lmms_eval_dir"]).glob("*.jsonl")):
        for r in _jsonl(path):
            yield "lmms-eval", r["item_id"], r["prompt"]


def test_no_model_facing_export_carries_frame_data(demo_release, cfg, tables, parts):
    rows = {r["item_id"]: r for s in writers.SPLITS for r in tables[s].iter_rows(named=True)}
    seen = set()
    for key, item_id, text in _model_texts(demo_release, cfg, parts):
        assert common.model_text_leaks(text, rows[item_id]) == [], (key, item_id)
        assert "<ANSWER>A</ANSWER>" not in text.replace(rows[item_id]["sft_target"], ""), (key, item_id)
        seen.add((key, item_id))
    assert len(seen) == 6 * tables["eval"].height + 3 * tables["sft"].height
    assert facing.release_problems(demo_release, cfg) == []


def test_a_column_a_model_may_not_see_is_refused(demo_release, tables, cfg, tmp_path, monkeypatch):
    """A hidden column planted in a model-facing export is refused before it is written, and one planted in a
    model-facing file on disk (an export jsonl, a card config parquet) makes the release invalid."""
    plain = consumers.grpo_rows
    monkeypatch.setattr(consumers, "grpo_rows", lambda rows: [dict(r, frame_indices_json="[1]") for r in plain(rows)])
    with pytest.raises(ValueError, match="frame_indices_json"):
        write_exports(tmp_path / "rel", tables["eval"], tables["sft"], cfg)
    monkeypatch.undo()
    with pytest.raises(ValueError, match="visual_ref"):
        facing.check_table("exports/hf/default/L1.parquet", tables["eval"].select("item_id", "visual_ref"))

    copy = tmp_path / "copy"
    shutil.copytree(demo_release, copy)
    xf = common.export_files(cfg)
    swift = copy / xf["swift_sft"]
    rows = _jsonl(swift)
    rows[3]["image_hashes_json"] = "[]"
    swift.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    hf = copy / "exports/hf/T1/L1.parquet"
    pl.read_parquet(hf).with_columns(pl.lit("x").alias("reconstruction_key_json")).write_parquet(hf)
    recon = copy / "exports/hf/reconstruction/L1.parquet"  # the reconstruction config may carry them
    assert "reconstruction_key_json" in pl.read_parquet(recon).columns
    found = facing.release_problems(copy, cfg)
    assert found == [
        "exports/hf/T1/L1.parquet: column reconstruction_key_json (not model-facing)",
        f"{xf['swift_sft']}: column image_hashes_json (not model-facing)",
    ]
    problems = validate_release(copy, cfg, leaks=False)
    assert all(f in problems for f in found)


def test_planted_frame_leak_is_refused(tables, cfg):
    df = tables["eval"].head(3)
    rows = common.model_rows(df, cfg)
    part = common.parts({"eval": df, "sft": tables["sft"].head(0)}, cfg)[0]
    for fn in (
        consumers.messages_rows,
        consumers.grpo_rows,
        lambda r: consumers.vlmevalkit_tsv(r, cfg),
        lambda r: lmms.lmms_eval_files([(part, r)], cfg),
    ):
        fn(rows)
    leaky = df.with_columns((pl.col("question") + " (frames " + pl.col("frame_indices_json") + ")").alias("question"))
    with pytest.raises(ValueError, match="frame_indices_json"):  # in the prompt every export shows
        common.model_rows(leaky, cfg)
    with pytest.raises(ValueError, match="frame_indices_json"):  # in the SFT target
        common.model_rows(
            df.with_columns((pl.col("sft_target") + pl.col("frame_indices_json")).alias("sft_target")), cfg
        )
    with pytest.raises(ValueError, match="render_spec"):
        common.model_rows(df.with_columns(pl.lit("see render_spec").alias("question")), cfg)
    # VLMEvalKit shows the question and options in columns of their own: it checks them itself
    unchecked = [
        common.ModelRow(r, "a clean prompt", [], common._hidden_values(r)) for r in leaky.iter_rows(named=True)
    ]
    with pytest.raises(ValueError, match="vlmevalkit.*frame_indices_json"):
        consumers.vlmevalkit_tsv(unchecked, cfg)


def test_write_exports_refuses_a_path_leak(tables, cfg, tmp_path, monkeypatch):
    import pipeline.exports as exports

    scanned = []
    real = exports.find_path_leaks
    monkeypatch.setattr(exports, "find_path_leaks", lambda text: scanned.append(text) or real(text))
    bad = tables["eval"].with_columns(pl.lit("/home/someone/data").alias("choice_A"))
    with pytest.raises(ValueError, match="leak") as refused:
        write_exports(tmp_path, bad, tables["sft"], cfg)
    files = common.export_files(cfg)  # a text that leaks is never written; the clean ones are
    for key in ("llamafactory_eval", "swift_eval"):  # one text, two files: checked once, both refused
        assert not list(tmp_path.glob(files[key].replace(".jsonl", "*"))), key
        assert files[key] in str(refused.value)
    assert (tmp_path / files["llamafactory_sft"]).is_file()
    sft = (tmp_path / files["llamafactory_sft"]).read_text(encoding="utf-8")
    assert (tmp_path / files["swift_sft"]).read_text(encoding="utf-8") == sft
    assert scanned.count(sft) == 1  # the text LLaMA-Factory and ms-swift share is scanned once


def test_the_validator_refuses_a_path_planted_in_a_trainer_export(demo_release, cfg, tmp_path):
    """The exports scan a shared text once when they make it; a leak put into one of its files on disk afterwards is
    the validator's to find, in either file."""
    copy = tmp_path / "copy"
    shutil.copytree(demo_release, copy)
    xf = common.export_files(cfg)
    for key in ("llamafactory_sft", "swift_sft"):
        path = copy / xf[key]
        path.write_text(
            path.read_text(encoding="utf-8").replace('"content":"', '"content":"/home/alice/x ', 1), encoding="utf-8"
        )
        assert "/home/alice/x" in path.read_text(encoding="utf-8")
    writers.write_checksums(copy, cfg)
    problems = validate_release(copy, cfg)
    for key in ("llamafactory_sft", "swift_sft"):
        assert any(xf[key] in p and "/home/alice/x" in p for p in problems), (key, problems)


def test_trainer_files_read_as_their_loaders_read_them(demo_release, cfg, tables, parts, tmp_path):
    """LLaMA-Factory and ms-swift read jsonl through datasets' json builder, and so does TRL (the GRPO rows); VLMEvalKit
    reads its TSV with pandas (sep='\\t'), takes options from the non-empty A..F cells and a list literal in
    image_path as several images."""
    import ast

    datasets = pytest.importorskip("datasets")
    pd = pytest.importorskip("pandas")
    xf = common.export_files(cfg)
    ds = datasets.load_dataset(
        "json", data_files=str(demo_release / xf["llamafactory_sft"]), cache_dir=str(tmp_path / "hf"), split="train"
    )
    assert ds.num_rows == tables["sft"].height and set(ds.column_names) == {"messages", "images"}
    grpo = datasets.load_dataset(
        "json", data_files=str(demo_release / xf["grpo_sft"]), cache_dir=str(tmp_path / "hf"), split="train"
    )
    assert {"prompt", "images", "solution"} <= set(grpo.column_names)
    assert grpo[0]["prompt"][0]["content"][-1]["type"] == "text"
    for p in [p for p in parts if p.split == "eval"]:
        tsv = pd.read_csv(demo_release / p.file(xf["vlmevalkit_eval"]), sep="\t")
        assert len(tsv) == p.df.height
        for (_, t), r in zip(tsv.iterrows(), p.df.iter_rows(named=True)):
            opts = [t[c] for c in "ABCDEF" if not pd.isna(t[c])]
            assert len(opts) == r["num_choices"]
            paths = ast.literal_eval(t["image_path"]) if t["image_path"].startswith("[") else [t["image_path"]]
            assert len(paths) == common.num_images(r)
