"""release/README.md: the Hugging Face dataset card, generated from the release tables and the configs.

The YAML front matter declares a `default` config with one split per eval level (L1, L2, L3; `test` without levels)
and the SFT split (`train`), one config per task family and one per source with the same splits, all holding only
what a model may be shown (`schema.MODEL_FACING_COLUMNS` and the image references), and a `reconstruction` config
with the columns that locate, render and check the frames, joined by `item_id`. Every config reads parquet files
under exports/hf/<config>/<split>.parquet (the card's `configs` syntax selects files, not rows; the canonical
`splits/` files keep the public schema). `dataset_info` lists the features, `num_examples` and `num_bytes` of
exactly those files."""

from __future__ import annotations

from typing import TYPE_CHECKING

import io as _io
import re

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from pipeline.release import writers
from pipeline.exports import common

if TYPE_CHECKING:
    from pipeline.settings.root import Settings

_DTYPES = {
    pl.Utf8: "string",
    pl.String: "string",
    pl.Int64: "int64",
    pl.Int32: "int32",
    pl.Boolean: "bool",
    pl.Float64: "float64",
    pl.Float32: "float32",
    pl.Int8: "int8",
    pl.Int16: "int16",
}
_ARROW = {
    "string": pa.string(),
    "int64": pa.int64(),
    "int32": pa.int32(),
    "bool": pa.bool_(),
    "float64": pa.float64(),
    "float32": pa.float32(),
    "int8": pa.int8(),
    "int16": pa.int16(),
}
RECONSTRUCTION_CONFIG = "reconstruction"


def _dtype(name: str, dtype) -> str:
    base = _DTYPES.get(dtype) or _DTYPES.get(type(dtype))
    if base is None:
        raise ValueError(f"dataset card: column {name} has type {dtype}, which has no Hugging Face dtype here")
    return base


def features(df: pl.DataFrame) -> list[dict]:
    """The `dataset_info` features of a table (strings, integers, booleans, floats and lists of them)."""
    out = []
    for name, dtype in df.schema.items():
        if isinstance(dtype, pl.List):
            out.append({"name": name, "list": _dtype(name, dtype.inner)})
        elif isinstance(dtype, pl.Struct):  # the step track's `response` {steps, process_correctness}
            out.append({"name": name, "struct": features(pl.DataFrame(schema=dict(dtype.to_schema())))})
        else:
            out.append({"name": name, "dtype": _dtype(name, dtype)})
    return out


def _arrow(f: dict) -> pa.DataType:
    if "struct" in f:
        return pa.struct([pa.field(g["name"], _arrow(g)) for g in f["struct"]])
    return pa.list_(_ARROW[f["list"]]) if "list" in f else _ARROW[f["dtype"]]


def num_bytes(df: pl.DataFrame) -> int:
    """The split's `num_bytes` as `datasets` counts it: the Arrow size of the rows read back from the parquet file
    (polars' own Arrow buffers can be larger) in the card's feature types."""
    fields = [pa.field(f["name"], _arrow(f)) for f in features(df)]
    buf = _io.BytesIO()
    df.write_parquet(buf)
    buf.seek(0)
    return int(pq.read_table(buf).cast(pa.schema(fields)).nbytes)


def config_tables(tables: dict[str, pl.DataFrame], cfg: Settings) -> dict[str, dict[str, tuple[str, pl.DataFrame]]]:
    """{config_name: {hf_split: (release-relative parquet path, rows)}}: `default`, one config per family, one per
    source (model-facing rows), then `reconstruction`; a split with no rows is left out."""
    hf_dir = cfg.exports.dir + "/hf"
    parts = common.parts(tables, cfg)
    facing = {p.name: common.model_facing_table(p.df, cfg) for p in parts}
    configs: dict[str, dict] = {
        "default": {p.name: (f"{hf_dir}/default/{p.name}.parquet", facing[p.name]) for p in parts}
    }
    both = pl.concat([tables[s] for s in writers.SPLITS])
    tasks = sorted(both["task_id"].unique().to_list(), key=writers.task_number)
    for col, values, kind in (("task_id", tasks, "task"), ("source_slug", writers.source_order(cfg), "source")):
        for v in values:
            name = v if kind == "task" else f"source_{v}"
            splits = {}
            for p in parts:
                part = facing[p.name].filter(p.df.get_column(col) == v)
                if part.height:
                    splits[p.name] = (f"{hf_dir}/{name}/{p.name}.parquet", part)
            if splits:
                configs[name] = splits
    configs[RECONSTRUCTION_CONFIG] = {
        p.name: (f"{hf_dir}/{RECONSTRUCTION_CONFIG}/{p.name}.parquet", common.reconstruction_table(p.df)) for p in parts
    }
    return configs


def model_facing_configs(configs: dict) -> list[str]:
    """The configs a model may be shown (all but `reconstruction` and the step track's reconstruction config)."""
    from pipeline.exports.steps import STEP_RECONSTRUCTION_CONFIG

    return [name for name in configs if name not in (RECONSTRUCTION_CONFIG, STEP_RECONSTRUCTION_CONFIG)]


def front_matter(configs: dict, cfg: Settings) -> dict:
    ec = cfg.exports
    n = sum(df.height for _, df in configs["default"].values())
    size = (
        next(
            c
            for lim, c in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"))
            if n < lim
        )
        if n < 1_000_000
        else "n>1M"
    )
    info = []
    for name, splits in configs.items():
        splits_info = [
            {"name": hs, "num_bytes": num_bytes(df), "num_examples": df.height} for hs, (_, df) in splits.items()
        ]
        info.append(
            {
                "config_name": name,
                "features": features(next(iter(splits.values()))[1]),
                "splits": splits_info,
                "dataset_size": sum(s["num_bytes"] for s in splits_info),
            }
        )
    return {
        "pretty_name": ec.pretty_name,
        "license": "other",
        "license_name": "per-source-terms",
        "license_details": " ".join(ec.licences[s] for s in writers.source_order(cfg) if s in ec.licences),
        "language": ["en"],
        "task_categories": ["visual-question-answering"],
        "tags": ["robotics", "manipulation", "multiple-choice", "benchmark"],
        "size_categories": [size],
        "configs": [
            {
                "config_name": name,
                **({"default": True} if name == "default" else {}),
                "data_files": [{"split": hs, "path": rel} for hs, (rel, _) in splits.items()],
            }
            for name, splits in configs.items()
        ],
        "dataset_info": info,
    }


def _table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def identity_section(cfg: Settings, fingerprint: str | None) -> str:
    """The card's section on item and release identity (pipeline/release/identity.py); `fingerprint`: the one
    provenance.json states (None until the release step states it: a placeholder line it then replaces)."""
    from pipeline.release.identity import excluded_files, fingerprint_line

    excluded = excluded_files(cfg)
    pattern = "|".join(re.escape(rel) for rel in excluded)
    return f"""## Release identity

{fingerprint_line(fingerprint)}

The fingerprint is the sha256 of the lines of `{writers.file_names(cfg)["checksums"]}` for every file of the release
but the ones that state it or that `processbench validity` rewrites (`release_fingerprint_excludes` in
`{writers.file_names(cfg)["provenance"]}`):

    grep -v -E '  ({pattern})$' {writers.file_names(cfg)["checksums"]} | sha256sum

Every item carries `item_uid`, derived from what the item is (its family and template variant, the path-free keys of
its frames in display order, its question, options in order and answer; for T13 its steps, their frames and labels),
never from its position: the same item has the same `item_uid` in every build that holds it, so results are matched
across releases by it, and `processbench diff OLD NEW` says which items and cells two releases share.
"""


def card_markdown(
    tables: dict[str, pl.DataFrame],
    cfg: Settings,
    configs: dict | None = None,
    warnings=(),
    quotas=(),
    fingerprint: str | None = None,
) -> str:
    """The card; `configs`: config_tables(tables, cfg) when the caller has them already; `warnings`: what the build
    recorded in provenance.json (an eval level the corpus cannot fill), a section of their own when there are any;
    `quotas`: provenance.json's quota cells, a line each (pipeline/release/quotas.py `card_section`);
    `fingerprint`: the release fingerprint provenance.json states (identity_section)."""
    from pipeline.release.quotas import card_section

    from pipeline.scoring.mcq import METRIC_DEFINITIONS  # the one place each metric is defined
    from pipeline.exports.steps import step_section

    ec = cfg.exports
    configs = config_tables(tables, cfg) if configs is None else configs
    files, xf = writers.file_names(cfg), common.export_files(cfg)
    parts = common.parts(tables, cfg)
    tnames = cfg.task_names()
    both = pl.concat([tables[s] for s in writers.SPLITS])
    tasks = sorted(set(both["task_id"].to_list()), key=writers.task_number)
    snames = writers.source_names(cfg)

    def count(df, col, v):
        return df.filter(pl.col(col) == v).height

    names = [p.name for p in parts]
    task_rows = [
        [
            t,
            tnames.get(t, t),
            *(count(p.df, "task_id", t) for p in parts),
            ", ".join(
                snames[s]
                for s in writers.source_order(cfg)
                if both.filter((pl.col("task_id") == t) & (pl.col("source_slug") == s)).height
            ),
        ]
        for t in tasks
    ]
    src_rows = [
        [snames[s], *(count(p.df, "source_slug", s) for p in parts), ec.licences.get(s, "")]
        for s in writers.source_order(cfg)
    ]
    split_lines = "\n".join(
        f"- `{p.name}` ({p.df.height} items, `{p.file(files[f'{p.split}_parquet'])}`): "
        + ("fine-tuning" if p.split == "sft" else _LEVEL_TEXT.get(p.level or "", "evaluation"))
        for p in parts
    )
    xfile = {k: ", ".join(f"`{p.file(xf[k])}`" for p in parts if p.split == "eval") for k in xf}
    frames = ec.images_prefix
    head = yaml.safe_dump(front_matter(configs, cfg), sort_keys=False, allow_unicode=True, width=1000)
    warning_text = (
        (
            "\n## Build warnings\n\nStatistics this corpus could not meet (recorded in "
            "`metadata/provenance.json`; what the release holds is right):\n\n" + "".join(f"- {w}\n" for w in warnings)
        )
        if warnings
        else ""
    )
    body = f"""# {ec.pretty_name}

{ec.intended_use}

Splits (every config has them):

{split_lines}

No item, and no episode, is in two splits: items are split by `split_group_id`. Configs: `default`, one per task
family (`T1` ... `T12`) and one per source (`source_<slug>`) hold what a model may be shown: `item_id`, `item_uid`,
`source`, `task_id`, `task_name`, `eval_level`, `split_group_id`, `question`, `choice_A` ... `choice_F`,
`num_choices`, `answer` and `images` (the image files, relative to the reconstruction folder). `{RECONSTRUCTION_CONFIG}` holds,
per `item_id`, the columns that locate, render and check the frames (frame indices, `visual_ref`, reconstruction
key, render spec, display labels, image hashes) and the release bookkeeping: never show them to a model (frame
indices alone give the temporal families away). The canonical files under `splits/` carry every column.

    from datasets import load_dataset
    bench = load_dataset("{ec.hub_repo}")          # {", ".join(names)}
    keys = load_dataset("{ec.hub_repo}", "{RECONSTRUCTION_CONFIG}")  # join on item_id

{identity_section(cfg, fingerprint)}
## Tasks

{_table(["task", "name", *names, "sources"], task_rows)}
{step_section(configs, cfg)}
{card_section(list(quotas), cfg)}
## Sources and licences

The release contains no pixels. Licence: `other`, the terms of each source apply to its items and frames:

{_table(["source", *names, "terms"], src_rows)}

## Reconstructing the frames

Fetch each source from its owner, then run

    processbench reconstruct --release . --upstream gm100=PATH --upstream rh20t=PATH ... --out FRAMES

It rebuilds the images of every release file (every eval level and SFT), writes
`FRAMES/{frames}/<item_id>_<k>.png` (k = 0-based image of the item), checks each image against its recorded hash
and prints per file what it wrote. Every export names its images relative to `FRAMES`.

## Answer protocol

Every prompt ends with the output protocol; its answer line reads `<ANSWER>letter</ANSWER>`, where `letter` is a
placeholder for the chosen option's label (never an option label itself). The answer is the last
`<ANSWER>X</ANSWER>` tag of a response (any case); a response that is only a bare option letter (`B`, `(B)`, `B.`)
also counts; anything else is wrong and counted invalid.

## Exports

One file per eval level ({", ".join(f"`{p.name}`" for p in parts if p.split == "eval")}; L1 keeps the plain name,
other levels add `_<level>`) and one for SFT, each holding only the model-facing columns above:

- LLaMA-Factory: `{xf["llamafactory_info"]}` (sharegpt `messages` + `images`, one entry per split; set
  `dataset_dir` to that folder and `media_dir` to `FRAMES`).
- ms-swift: {xfile["swift_eval"]}, `{xf["swift_sft"]}` (`messages` + `images`); swift resolves the relative
  image paths against `ROOT_IMAGE_DIR`: run it with `ROOT_IMAGE_DIR=FRAMES`.
- VLMEvalKit: {xfile["vlmevalkit_eval"]} (custom MCQ TSV: `index`, `image_path`, the plain `question`, options
  `A` ... `F`, `answer`, `category` = family, `l2-category` = source; VLMEvalKit writes its own prompt). Put the
  TSV in VLMEvalKit's data folder (`LMUData`) with the images beside it (`FRAMES/{frames}` copied or linked) and run
  `python run.py --data ProcessBench --model MODEL --judge exact_matching` (without `--judge exact_matching`
  VLMEvalKit falls back to a paid API judge when its heuristics fail).
- VLMEvalKit CircularEval: `{xf["vlmevalkit_circular"]}`: every eval item once per rotation of its options
  (copy k shows option j+k at position j; `index` = item index + k x 1,000,000, as MMBench's circular files).
  VLMEvalKit evaluates a dataset named `*_circular` circularly: an item counts only if every copy is right.
- lmms-eval: `{xf["lmms_eval_dir"]}/` (one task per level and family, one group per level with its aggregate,
  `processbench` over all levels, `processbench_circular`; intervals clustered by `split_group_id`); run from this
  folder with `PROCESSBENCH_FRAMES=FRAMES` and `--include_path {xf["lmms_eval_dir"]}`.
- GRPO (TRL `GRPOTrainer`): {xfile["grpo_eval"]}, `{xf["grpo_sft"]}`: a conversational `prompt` (one
  `{{"type": "image"}}` per image, then the text), `images` (paths under `FRAMES`: load them as images, e.g.
  `dataset.cast_column("images", Sequence(Image()))` after prefixing `FRAMES/`) and `solution` =
  `<answer>X</answer>`, which the open-r1 / SEED-Bench-R1 accuracy reward reads as its ground truth. Their reward
  matches `<answer>` in lower case only, while the prompt asks for `<ANSWER>`: use this reward (gold 1.0, any other
  or no answer 0.0):

```python
{REWARD_SNIPPET.rstrip()}
```

## Scoring

Write one jsonl row `{{"item_id": ..., "response": ...}}` per eval item, then

    processbench score --release . --predictions predictions.jsonl --out scores

`metrics.json` reports accuracy overall, per family, per source and per level, with random, label-prior and
majority baselines and 95 % bootstrap intervals resampled by `split_group_id`. CircularEval: answer every row of
`{xf["vlmevalkit_circular"]}` (jsonl rows `{{"item_id": "<item_id>.c<k>", "response": ...}}`, k = `index` //
1,000,000; the lmms-eval circular task's documents carry `copy_id`) and run `processbench score ... --circular`:
plain accuracy (copy 0), circular accuracy (every copy right) and position consistency (the same option text chosen
in every copy), per level.

Definitions (`metrics.json` `definitions`, per cell = source × family × eval level):

{chr(10).join(f"- **{name}**: {text}" for name, text in METRIC_DEFINITIONS.items())}

## Limitations and biases

{ec.limitations}

{ec.biases}
{warning_text}
## Citation

```bibtex
{ec.citation.rstrip()}
```
"""
    return f"---\n{head}---\n\n{body}"


# What each level holds (configs/split.yaml `ood`, docs/release-format.md "The split").
_LEVEL_TEXT = {
    "L1": "evaluation, in distribution",
    "L2": "evaluation, held-out environments (scenes or tasks no training item comes from)",
    "L3": "evaluation, held-out tasks (with every scene they were recorded in)",
}

# The GRPO accuracy reward the card prints (tests exec it from the card): TRL passes `completions` (conversational:
# lists of messages) and every dataset column by name, `solution` included.
REWARD_SNIPPET = """import re

_TAG = re.compile(r"<answer>\\s*([A-F])\\s*</answer>", re.IGNORECASE)


def accuracy_reward(completions, solution, **kwargs):
    # 1.0 when the completion's last <answer>X</answer> tag (any case) is the solution's letter, else 0.0
    rewards = []
    for completion, sol in zip(completions, solution):
        text = completion[-1]["content"] if isinstance(completion, list) else completion
        got, want = _TAG.findall(text or ""), _TAG.findall(sol)
        rewards.append(1.0 if got and want and got[-1].upper() == want[-1].upper() else 0.0)
    return rewards
"""
