"""What `processbench build` prints when a release is there: items per source and split/eval level, read back from
the release's own split files, the release's absolute path, and the commands a user runs next."""

from __future__ import annotations

from pathlib import Path

import polars as pl

COLUMNS = ("split", "eval_level", "source")


def item_counts(release: Path) -> pl.DataFrame:
    """One row per source, one column per split and eval level (`eval L1`, `eval L2`, ..., `sft`), and `total`."""
    files = [
        f for f in sorted((Path(release) / "splits").glob("*.parquet")) if "num_steps" not in pl.read_parquet_schema(f)
    ]  # the multiple-choice files (not the T13 step files)
    if not files:
        return pl.DataFrame()
    rows = pl.concat([pl.read_parquet(f, columns=list(COLUMNS)) for f in files])
    rows = rows.with_columns(
        part=pl.when(pl.col("eval_level").is_null())
        .then(pl.col("split"))
        .otherwise(pl.col("split") + " " + pl.col("eval_level"))
    )
    wide = (
        rows.group_by("source", "part")
        .len()
        .pivot(on="part", index="source", values="len", sort_columns=True)
        .fill_null(0)
        .sort("source")
    )
    parts = [c for c in wide.columns if c != "source"]
    wide = wide.select("source", *sorted(parts, key=lambda p: (p.startswith("sft"), p)))
    wide = wide.with_columns(total=pl.sum_horizontal(*parts))
    return pl.concat([wide, wide.select(pl.lit("all").alias("source"), pl.exclude("source").sum()).cast(wide.schema)])


def counts_text(release: Path) -> str:
    table = item_counts(release)
    if table.is_empty():
        return "(no split files in the release)"
    head = list(table.columns)
    rows = [[str(v) for v in r] for r in table.iter_rows()]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    fmt = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    lines = [fmt(head), fmt(["-" * w for w in widths]), *(fmt(r) for r in rows)]
    manifest = Path(release) / "metadata" / "steps_manifest.json"  # the T13 step track (pipeline/steps/write.py)
    if manifest.is_file():
        import json

        per = json.loads(manifest.read_text(encoding="utf-8")).get("sources", {})
        lines.append("step items (T13):")
        lines += [
            f"  {s} {v['items']} items / {v['steps']} steps (natural errors {v['natural_error_share']:.0%} of wrong steps)"
            for s, v in sorted(per.items())
        ]
    return "\n".join(lines)


def next_commands(release: Path, upstream: dict[str, str]) -> list[str]:
    """The commands after a build: the items' images from the upstream copies, a model's run, its score."""
    release = Path(release).absolute()
    ups = " ".join(f"--upstream {s}={p}" for s, p in sorted(upstream.items())) or "--upstream SLUG=PATH ..."
    return [
        f"processbench reconstruct --release {release} {ups} --out build/reconstructed"
        "    # every item's images, verified against the release",
        f"processbench eval --release {release} --images build/reconstructed --base-url http://127.0.0.1:8000/v1 "
        "--model NAME --out build/eval    # ask a served model every eval item, then score it (docs/evaluation.md)",
        f"processbench score --release {release} --predictions predictions.jsonl --out build/score"
        "    # or score answers you collected yourself (harness formats in the release's exports/)",
    ]
