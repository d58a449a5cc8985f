"""release/README.md: the Hugging Face dataset card, generated from the release tables and the configs.

The YAML front matter declares a `default` config (eval -> test, sft -> train), one config per task family and one
per source; the family and source configs read per-config parquet files under exports/hf/ (the card's `configs`
syntax selects files, not rows). `dataset_info` lists the features and split sizes of exactly those files."""

from __future__ import annotations

import polars as pl
import yaml

from pipeline import writers
from pipeline.exports import common

_DTYPES = {pl.Utf8: "string", pl.String: "string", pl.Int64: "int64", pl.Int32: "int32", pl.Boolean: "bool",
           pl.Float64: "float64", pl.Float32: "float32", pl.Int8: "int8", pl.Int16: "int16"}


def features(df: pl.DataFrame) -> list[dict]:
    out = []
    for name, dtype in df.schema.items():
        base = _DTYPES.get(dtype) or _DTYPES.get(type(dtype))
        if base is None:
            raise ValueError(f"dataset card: column {name} has type {dtype}, which has no Hugging Face dtype here")
        out.append({"name": name, "dtype": base})
    return out


def config_tables(tables: dict[str, pl.DataFrame], cfg: dict) -> dict[str, dict[str, tuple[str, pl.DataFrame]]]:
    """{config_name: {hf_split: (release-relative parquet path, rows)}}; a split with no rows is left out."""
    files = writers.file_names(cfg)
    hf_dir = common.export_cfg(cfg)["dir"] + "/hf"
    configs: dict[str, dict] = {"default": {common.hf_split(cfg, s): (files[f"{s}_parquet"], tables[s])
                                            for s in writers.SPLITS}}
    both = pl.concat([tables[s] for s in writers.SPLITS])
    tasks = sorted(both["task_id"].unique().to_list(), key=writers.task_number)
    for col, values, kind in (("task_id", tasks, "task"), ("source_slug", writers.source_order(cfg), "source")):
        for v in values:
            name = v if kind == "task" else f"source_{v}"
            splits = {}
            for s in writers.SPLITS:
                part = tables[s].filter(pl.col(col) == v)
                if part.height:
                    hs = common.hf_split(cfg, s)
                    splits[hs] = (f"{hf_dir}/{name}/{hs}.parquet", part)
            if splits:
                configs[name] = splits
    return configs


def front_matter(configs: dict, cfg: dict) -> dict:
    ec = common.export_cfg(cfg)
    any_df = next(iter(configs["default"].values()))[1]
    n = sum(df.height for _, df in configs["default"].values())
    size = next(c for lim, c in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"),
                                 (1_000_000, "100K<n<1M")) if n < lim) if n < 1_000_000 else "n>1M"
    return {
        "pretty_name": ec["pretty_name"],
        "license": "other",
        "license_name": "per-source-terms",
        "license_details": " ".join(ec["licences"][s] for s in writers.source_order(cfg) if s in ec["licences"]),
        "language": ["en"],
        "task_categories": ["visual-question-answering"],
        "tags": ["robotics", "manipulation", "multiple-choice", "benchmark"],
        "size_categories": [size],
        "configs": [{"config_name": name, **({"default": True} if name == "default" else {}),
                     "data_files": [{"split": hs, "path": rel} for hs, (rel, _) in splits.items()]}
                    for name, splits in configs.items()],
        "dataset_info": [{"config_name": name, "features": features(any_df),
                          "splits": [{"name": hs, "num_examples": df.height} for hs, (_, df) in splits.items()]}
                         for name, splits in configs.items()],
    }


def _table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def card_markdown(tables: dict[str, pl.DataFrame], cfg: dict) -> str:
    ec = common.export_cfg(cfg)
    configs = config_tables(tables, cfg)
    files, xf = writers.file_names(cfg), ec["files"]
    ev, sft = tables["eval"], tables["sft"]
    tnames = writers.task_names(cfg)
    tasks = sorted(set(ev["task_id"].to_list()) | set(sft["task_id"].to_list()), key=writers.task_number)
    snames = writers.source_names(cfg)

    def count(df, col, v):
        return df.filter(pl.col(col) == v).height

    task_rows = [[t, tnames.get(t, t), count(ev, "task_id", t), count(sft, "task_id", t),
                  ", ".join(snames[s] for s in writers.source_order(cfg)
                            if pl.concat([ev, sft]).filter((pl.col("task_id") == t)
                                                            & (pl.col("source_slug") == s)).height)]
                 for t in tasks]
    src_rows = [[snames[s], count(ev, "source_slug", s), count(sft, "source_slug", s), ec["licences"].get(s, "")]
                for s in writers.source_order(cfg)]
    test, train = common.hf_split(cfg, "eval"), common.hf_split(cfg, "sft")
    head = yaml.safe_dump(front_matter(configs, cfg), sort_keys=False, allow_unicode=True, width=1000)
    body = f"""# {ec['pretty_name']}

{ec['intended_use']}

The `{test}` split ({ev.height} items, `{files['eval_parquet']}`) is for evaluation; the `{train}` split
({sft.height} items, `{files['sft_parquet']}`) is for fine-tuning. No item, and no episode, is in both: items are
split by `split_group_id`. Configs: `default` (both splits), one per task family (`T1` ... `T12`) and one per
source (`source_<slug>`).

## Tasks

{_table(["task", "name", test, train, "sources"], task_rows)}

## Sources and licences

The release contains no pixels. Licence: `other`, the terms of each source apply to its items and frames:

{_table(["source", test, train, "terms"], src_rows)}

## Reconstructing the frames

Fetch each source from its owner, then run

    processbench reconstruct --release . --upstream gm100=PATH --upstream rh20t=PATH ... --out FRAMES

It writes `FRAMES/{ec.get('images_prefix', 'images')}/<item_id>_<k>.png` (k = 0-based image of the item) and checks each
image against its recorded hash. Every export names its images relative to `FRAMES`.

## Exports

- LLaMA-Factory: `{xf['llamafactory_info']}` (sharegpt `messages` + `images`; set `dataset_dir` to that folder and
  `media_dir` to `FRAMES`).
- ms-swift: `{xf['swift_eval']}`, `{xf['swift_sft']}` (`messages` + `images`).
- VLMEvalKit: `{xf['vlmevalkit_eval']}` (custom MCQ TSV; `category` = family, `l2-category` = source).
- lmms-eval: `{xf['lmms_eval_dir']}/` (one task per family; run from this folder with `PROCESSBENCH_FRAMES=FRAMES`).
- GRPO: `{xf['grpo_sft']}`, `{xf['grpo_eval']}` (`problem`, verifiable `solution` `<ANSWER>X</ANSWER>`).

## Scoring

Write one jsonl row `{{"item_id": ..., "response": ...}}` per `{test}` item, then

    processbench score --release . --predictions predictions.jsonl --out scores

The answer is the last `<ANSWER>X</ANSWER>` tag; a response that is only a bare option letter (`B`, `(B)`, `B.`)
also counts; anything else is wrong and counted invalid. `metrics.json` reports accuracy overall, per family, per
source and per level, with random, label-prior and majority baselines and 95 % bootstrap intervals resampled by
`split_group_id`.

## Limitations and biases

{ec['limitations']}

{ec['biases']}

## Citation

```bibtex
{ec['citation'].rstrip()}
```
"""
    return f"---\n{head}---\n\n{body}"
