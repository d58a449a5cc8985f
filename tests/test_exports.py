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

from pipeline import writers
from pipeline.config import load_config
from pipeline.exports import common, consumers, run_exports, write_exports
from pipeline.validate import validate_release


@pytest.fixture(scope="module")
def cfg():
    return load_config(scale="demo")


@pytest.fixture(scope="module")
def tables(demo_release, cfg):
    return common.read_tables(demo_release, cfg)


def _jsonl(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _front_matter(path):
    text = path.read_text(encoding="utf-8")
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n", 2)[1])


def test_build_writes_every_export_under_checksums(demo_release, cfg):
    listed = {line.split("  ", 1)[1] for line in (demo_release / "checksums.sha256").read_text().splitlines()}
    for key, rel in common.export_files(cfg).items():
        if key != "lmms_eval_dir":
            assert rel in listed, rel
    assert any(r.startswith(common.export_files(cfg)["lmms_eval_dir"] + "/") for r in listed)
    assert validate_release(demo_release, cfg) == []


def test_exports_are_deterministic(demo_release, cfg, tmp_path):
    copy = tmp_path / "rel"
    shutil.copytree(demo_release, copy)
    run_exports(cfg, copy)
    assert (copy / "checksums.sha256").read_bytes() == (demo_release / "checksums.sha256").read_bytes()


def test_card_configs_load_in_datasets(demo_release, cfg, tables, tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    fm = _front_matter(demo_release / "README.md")
    assert fm["license"] == "other"
    names = [c["config_name"] for c in fm["configs"]]
    tasks = sorted(set(tables["eval"]["task_id"]) | set(tables["sft"]["task_id"]), key=writers.task_number)
    assert names == ["default", *tasks, *[f"source_{s}" for s in writers.source_order(cfg)
                                          if s in set(tables["eval"]["source_slug"]) | set(tables["sft"]["source_slug"])]]
    info = {i["config_name"]: i for i in fm["dataset_info"]}
    split_of = {common.hf_split(cfg, s): s for s in writers.SPLITS}
    for name in names:
        ds = datasets.load_dataset(str(demo_release), name=name, cache_dir=str(tmp_path / "hf"))
        for hs, split in split_of.items():
            df = tables[split]
            if name.startswith("T"):
                df = df.filter(pl.col("task_id") == name)
            elif name.startswith("source_"):
                df = df.filter(pl.col("source_slug") == name[len("source_"):])
            got = ds[hs].num_rows if hs in ds else 0
            assert got == df.height, (name, hs)
            declared = {s["name"]: s["num_examples"] for s in info[name]["splits"]}
            assert declared.get(hs, 0) == df.height
        assert [f["name"] for f in info[name]["features"]] == tables["eval"].columns


def test_croissant_validates_and_iterates(demo_release, tables):
    mlc = pytest.importorskip("mlcroissant")
    ds = mlc.Dataset(jsonld=str(demo_release / "croissant.json"))
    meta = json.loads((demo_release / "croissant.json").read_text())
    for key in ("rai:dataUseCases", "rai:dataLimitations", "rai:dataBiases", "rai:dataCollection", "license"):
        assert meta[key]
    for rs, split in (("test", "eval"), ("train", "sft")):
        rset = next(r for r in meta["recordSet"] if r["@id"] == rs)
        assert {"@id": f"{rs}/split_group_id"} in rset["key"]
        ids = [r[f"{rs}/item_id"] for r in ds.records(record_set=rs)]
        want = tables[split]["item_id"].to_list()
        assert [i.decode() if isinstance(i, bytes) else i for i in ids] == want


def test_llamafactory_rows_satisfy_the_image_tag_rule(demo_release, cfg, tables):
    xf = common.export_files(cfg)
    info = json.loads((demo_release / xf["llamafactory_info"]).read_text())
    folder = (demo_release / xf["llamafactory_info"]).parent
    for entry in info.values():
        assert entry["formatting"] == "sharegpt"
        rows = _jsonl(folder / entry["file_name"])
        assert rows
        for r in rows:
            n_tags = sum(m["content"].count("<image>") for m in r["messages"])
            assert n_tags == len(r["images"]) >= 1
            assert [m["role"] for m in r["messages"]] == ["user", "assistant"]
            assert all(re.fullmatch(r"images/pb_v2_(eval|sft)_\d{6}_\d+\.png", p) for p in r["images"])
    sft = _jsonl(demo_release / xf["llamafactory_sft"])
    assert [r["messages"][1]["content"] for r in sft] == tables["sft"]["sft_target"].to_list()


def test_swift_and_grpo_rows(demo_release, cfg, tables):
    xf = common.export_files(cfg)
    swift = _jsonl(demo_release / xf["swift_eval"])
    assert len(swift) == tables["eval"].height
    grpo = _jsonl(demo_release / xf["grpo_sft"])
    assert len(grpo) == tables["sft"].height
    for g, r in zip(grpo, tables["sft"].iter_rows(named=True)):
        assert g["solution"] == f"<ANSWER>{r['answer']}</ANSWER>" and g["problem_id"] == r["item_id"]
        assert len(g["options"]) == r["num_choices"]


def test_vlmevalkit_tsv_columns(demo_release, cfg, tables):
    path = demo_release / common.export_files(cfg)["vlmevalkit_eval"]
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    assert len(rows) == tables["eval"].height
    for t, r in zip(rows, tables["eval"].iter_rows(named=True)):
        assert t["answer"] == r["answer"] and t["category"] == r["task_id"] and t["l2-category"] == r["source"]
        assert [t[c] for c in "ABCDEF"][: r["num_choices"]] == common.options(r)
        assert all(t[c] == "" for c in "ABCDEF"[r["num_choices"]:])


def test_lmms_eval_task_folder(demo_release, cfg, tables):
    folder = demo_release / common.export_files(cfg)["lmms_eval_dir"]
    loader = type("L", (yaml.SafeLoader,), {})
    loader.add_constructor("!function", lambda ld, node: ("function", ld.construct_scalar(node)))
    template = yaml.load((folder / "_default_template_yaml").read_text(), Loader=loader)
    assert template["process_results"] == ("function", "utils.process_results")
    spec = importlib.util.spec_from_file_location("pb_lmms_utils", folder / "utils.py")
    utils = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(utils)
    for t in sorted(set(tables["eval"]["task_id"])):
        task = yaml.load((folder / f"processbench_{t.lower()}.yaml").read_text(), Loader=loader)
        data = _jsonl(demo_release / task["dataset_kwargs"]["data_files"]["test"])
        assert len(data) == tables["eval"].filter(pl.col("task_id") == t).height
        gold = [utils.process_results(d, [f"thinking\n<ANSWER>{d['answer']}</ANSWER>"])["accuracy"] for d in data]
        assert utils.aggregate_accuracy(gold) == 1.0
        wrong = [utils.process_results(d, ["I cannot tell"])["accuracy"] for d in data]
        assert utils.aggregate_accuracy(wrong) == 0.0
        assert utils.doc_to_text(data[0]) == data[0]["prompt"]


def _model_texts(demo_release, cfg):
    """(item_id, text) for every model-facing text of every export."""
    xf = common.export_files(cfg)
    for key in ("llamafactory_eval", "llamafactory_sft", "swift_eval", "swift_sft"):
        for r in _jsonl(demo_release / xf[key]):
            yield key, r["images"][0].split("/")[-1].rsplit("_", 1)[0], " ".join(m["content"] for m in r["messages"])
    for key in ("grpo_eval", "grpo_sft"):
        for r in _jsonl(demo_release / xf[key]):
            yield key, r["problem_id"], r["problem"] + " ".join(r["options"])
    with open(demo_release / xf["vlmevalkit_eval"], newline="", encoding="utf-8") as fh:
        for r in csv.DictReader(fh, delimiter="\t"):
            yield "vlmevalkit", r["item_id"], " ".join(r[c] for c in ("question", *"ABCDEF"))
    for p in sorted((demo_release / xf["lmms_eval_dir"]).glob("T*.jsonl")):
        for r in _jsonl(p):
            yield "lmms-eval", r["item_id"], r["prompt"]


def test_no_model_facing_export_carries_frame_data(demo_release, cfg, tables):
    rows = {r["item_id"]: r for s in writers.SPLITS for r in tables[s].iter_rows(named=True)}
    seen = set()
    for key, item_id, text in _model_texts(demo_release, cfg):
        assert common.model_text_leaks(text, rows[item_id]) == [], (key, item_id)
        seen.add((key, item_id))
    assert len(seen) == 5 * tables["eval"].height + 3 * tables["sft"].height


def test_planted_frame_leak_is_refused(tables, cfg):
    df = tables["eval"].head(3)
    rows = common.model_rows(df, cfg)
    for fn in (consumers.messages_rows, consumers.grpo_rows, lambda r: consumers.vlmevalkit_tsv(r, cfg),
               lambda r: consumers.lmms_eval_files(r, cfg)):
        fn(rows)
    leaky = df.with_columns((pl.col("question") + " (frames " + pl.col("frame_indices_json") + ")").alias("question"))
    with pytest.raises(ValueError, match="frame_indices_json"):  # in the prompt every export shows
        common.model_rows(leaky, cfg)
    with pytest.raises(ValueError, match="frame_indices_json"):  # in the SFT target
        common.model_rows(df.with_columns((pl.col("sft_target") + pl.col("frame_indices_json")).alias("sft_target")),
                          cfg)
    with pytest.raises(ValueError, match="render_spec"):
        common.model_rows(df.with_columns(pl.lit("see render_spec").alias("question")), cfg)
    # VLMEvalKit shows the question and options in columns of their own: it checks them itself
    unchecked = [common.ModelRow(r, "a clean prompt", [], common._hidden_values(r))
                 for r in leaky.iter_rows(named=True)]
    with pytest.raises(ValueError, match="vlmevalkit.*frame_indices_json"):
        consumers.vlmevalkit_tsv(unchecked, cfg)


def test_write_exports_refuses_a_path_leak(tables, cfg, tmp_path):
    bad = tables["eval"].with_columns(pl.lit("/home/someone/data").alias("choice_A"))
    with pytest.raises(ValueError, match="leak"):
        write_exports(tmp_path, bad, tables["sft"], cfg)
    files = common.export_files(cfg)  # a text that leaks is never written; the clean ones are
    assert not (tmp_path / files["llamafactory_eval"]).exists()
    assert (tmp_path / files["llamafactory_sft"]).is_file()


def test_trainer_files_read_as_their_loaders_read_them(demo_release, cfg, tables, tmp_path):
    """LLaMA-Factory and ms-swift read jsonl through datasets' json builder; VLMEvalKit reads its TSV with pandas
    (sep='\\t'), takes options from the non-empty A..F cells and a list literal in image_path as several images."""
    import ast

    datasets = pytest.importorskip("datasets")
    pd = pytest.importorskip("pandas")
    xf = common.export_files(cfg)
    ds = datasets.load_dataset("json", data_files=str(demo_release / xf["llamafactory_sft"]),
                               cache_dir=str(tmp_path / "hf"), split="train")
    assert ds.num_rows == tables["sft"].height and set(ds.column_names) == {"messages", "images"}
    tsv = pd.read_csv(demo_release / xf["vlmevalkit_eval"], sep="\t")
    assert len(tsv) == tables["eval"].height
    for (_, t), r in zip(tsv.iterrows(), tables["eval"].iter_rows(named=True)):
        opts = [t[c] for c in "ABCDEF" if not pd.isna(t[c])]
        assert len(opts) == r["num_choices"]
        paths = ast.literal_eval(t["image_path"]) if t["image_path"].startswith("[") else [t["image_path"]]
        assert len(paths) == common.num_images(r)
