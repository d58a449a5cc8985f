"""The release in its users' tools (issue 13): the Hugging Face card, Croissant, trainer / harness exports.

`EXPORTERS` is the one registry of exports: each is an asset of the Dagster graph (group `exports`, key
`exports/<name>`, assets/tables.py) whose materialization carries the rows it wrote. An exporter makes its files
from one part's rows at a time (`part`: each eval level, then SFT, `common.parts`) and/or once over the whole release
(`end`); both yield `Output`s (release-relative file, text or table, rows). Adding an export is one function and one
line here (docs/extending.md#an-export).

`write_exports(release_dir, eval_df, sft_df, cfg)` writes them from the two release tables (eval: every level);
`run_exports(cfg, release_dir)` reads the tables back from the release (every level file) and writes the exports.
Both re-write checksums.sha256 so every new file is covered (checksums=False: the caller does, as the release stage
does once at its end); both return {export name: {"files": [release-relative files, sorted], "rows": n}}."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from pipeline.release import writers
from pipeline.core import io
from pipeline.exports import card, common, consumers, croissant, facing, lmms
from pipeline.core.leaks import find_path_leaks
from pipeline.release.identity import stated_fingerprint
from pipeline.release.rows import read_tables

if TYPE_CHECKING:
    from pipeline.settings.root import Settings


@dataclass(frozen=True)
class Output:
    """One file of an export: `data` a text or a table (parquet); `rows` the records it holds (0: metadata only);
    `facing`: a table a model may be shown (checked for hidden columns before it is written)."""

    rel: str
    data: str | pl.DataFrame
    rows: int = 0
    facing: bool = True


@dataclass
class PartRows:
    """One part's rows with their prompts (`common.model_rows`, built once for every export of the part)."""

    part: common.Part
    rows: list[common.ModelRow]
    cfg: Settings

    @cached_property
    def messages(self) -> str:  # LLaMA-Factory (sharegpt with OpenAI role tags) and ms-swift read the same rows
        return common.jsonl(consumers.messages_rows(self.rows))


@dataclass
class Run:
    """What the `end` hooks see: the release tables, its parts, the eval parts' rows, the release folder."""

    tables: dict[str, pl.DataFrame]
    parts: list[common.Part]
    release_dir: Path
    cfg: Settings
    eval_parts: list[tuple[common.Part, list[common.ModelRow]]] = field(default_factory=list)
    leaks: dict[str, list[str]] = field(default_factory=dict)  # texts refused (not written), by file

    def raise_leaks(self) -> None:
        if self.leaks:
            raise ValueError(f"path or identity leaks (or columns a model may not see) in exports: {self.leaks}")


@dataclass(frozen=True)
class Exporter:
    description: str
    main: Callable[[Settings], str]  # cfg -> the release-relative file the asset points at
    part: Callable[[PartRows], Iterator[Output]] | None = None
    end: Callable[[Run], Iterator[Output]] | None = None
    reads_release: bool = False  # `end` reads release files: runs only when no export text was refused


def _file(key: str) -> Callable[[Settings], str]:
    return lambda cfg: common.export_files(cfg)[key]


def _per_part(key: str, text: Callable[[PartRows], str]) -> Callable[[PartRows], Iterator[Output]]:
    def part(p: PartRows) -> Iterator[Output]:
        yield Output(p.part.file(common.export_files(p.cfg)[f"{key}_{p.part.split}"]), text(p), len(p.rows))

    return part


def _llamafactory_info(run: Run) -> Iterator[Output]:
    yield Output(
        common.export_files(run.cfg)["llamafactory_info"], common.dumps(consumers.llamafactory_info(run.parts, run.cfg))
    )


def _vlmevalkit_part(p: PartRows) -> Iterator[Output]:
    if p.part.split == "eval":  # the harnesses score the eval levels only
        yield Output(
            p.part.file(common.export_files(p.cfg)["vlmevalkit_eval"]),
            consumers.vlmevalkit_tsv(p.rows, p.cfg),
            len(p.rows),
        )


def _vlmevalkit_circular(run: Run) -> Iterator[Output]:
    rows = [m for _, rows in run.eval_parts for m in rows]
    yield Output(
        common.export_files(run.cfg)["vlmevalkit_circular"],
        consumers.vlmevalkit_tsv(rows, run.cfg, circular=True),
        sum(len(common.options(m.row)) for m in rows),
    )


def _lmms_eval(run: Run) -> Iterator[Output]:
    folder = common.export_files(run.cfg)["lmms_eval_dir"]
    for name, text in lmms.lmms_eval_files(run.eval_parts, run.cfg).items():
        yield Output(f"{folder}/{name}", text, text.count("\n") if name.endswith(".jsonl") else 0)


def _visualprocessbench(run: Run) -> Iterator[Output]:
    from pipeline.exports.steps import visualprocessbench_texts  # (it imports pipeline.exports)

    for rel, text in visualprocessbench_texts(run.release_dir, run.cfg):
        yield Output(rel, text, text.count("\n"))


def _card(run: Run) -> Iterator[Output]:
    from pipeline.release.quotas import recorded_quotas
    from pipeline.exports.steps import step_configs  # (it imports pipeline.exports)

    configs = card.config_tables(run.tables, run.cfg) | step_configs(run.release_dir, run.cfg)  # + the T13 track's
    warnings = common.recorded_warnings(run.release_dir, run.cfg)
    quotas = recorded_quotas(run.release_dir, run.cfg)  # what each cell delivers against its quota, and why
    fingerprint = stated_fingerprint(run.release_dir, run.cfg)  # None while the release step builds: stated last
    text = card.card_markdown(run.tables, run.cfg, configs, warnings, quotas, fingerprint)
    yield Output(common.export_files(run.cfg)["card"], text)
    facing_names = card.model_facing_configs(configs)
    for name, splits in configs.items():
        for rel, df in splits.values():
            yield Output(rel, df, df.height, facing=name in facing_names)


def _croissant(run: Run) -> Iterator[Output]:
    from pipeline.steps.tables import read_step_tables  # (it imports pipeline.exports)

    doc = croissant.croissant(run.tables, run.release_dir, run.cfg)  # the rows its record sets describe
    steps = read_step_tables(run.release_dir, run.cfg, columns=["item_id"]) or {}  # + the T13 step files'
    rows = sum(p.df.height for p in run.parts) + sum(df.height for df in steps.values())
    yield Output(common.export_files(run.cfg)["croissant"], common.dumps(doc), rows)


EXPORTERS: dict[str, Exporter] = {
    "llamafactory": Exporter(
        "LLaMA-Factory sharegpt jsonl per part and its dataset_info.json",
        _file("llamafactory_info"),
        _per_part("llamafactory", lambda p: p.messages),
        _llamafactory_info,
    ),
    "ms_swift": Exporter(
        "ms-swift messages + images jsonl per part", _file("swift_sft"), _per_part("swift", lambda p: p.messages)
    ),
    "grpo": Exporter(
        "GRPO jsonl (TRL GRPOTrainer) per part",
        _file("grpo_sft"),
        _per_part("grpo", lambda p: common.jsonl(consumers.grpo_rows(p.rows))),
    ),
    "vlmevalkit": Exporter(
        "VLMEvalKit MCQ TSV per eval level and its circular copy",
        _file("vlmevalkit_eval"),
        _vlmevalkit_part,
        _vlmevalkit_circular,
    ),
    "lmms_eval": Exporter(
        "lmms-eval task folder: a task per eval level and family, groups, a circular task",
        lambda cfg: f"{common.export_files(cfg)['lmms_eval_dir']}/{lmms.TEMPLATE}",
        end=_lmms_eval,
    ),
    "visualprocessbench": Exporter(
        "VisualProcessBench jsonl of the T13 step track per eval level and SFT (none "
        "when the release has no step files)",
        _file("visualprocessbench_eval"),
        end=_visualprocessbench,
    ),
    "hf_card": Exporter("Hugging Face dataset card and its parquet configs", _file("card"), end=_card),
    "croissant": Exporter(
        "Croissant metadata of the release tables", _file("croissant"), end=_croissant, reads_release=True
    ),
}


def export_outputs(run: Run) -> Iterator[tuple[str, Output]]:
    """Every export's files as (export name, Output), one at a time: a part's rows and texts are held only while its
    own files are made (the eval levels' rows until the `end` hooks over all of them are done), never all at once."""
    for part in run.parts:
        p = PartRows(part, common.model_rows(part.df, run.cfg), run.cfg)
        for name, ex in EXPORTERS.items():
            if ex.part is not None:
                yield from ((name, out) for out in ex.part(p))
        if part.split == "eval":
            run.eval_parts.append((part, p.rows))
        del p
    for name, ex in EXPORTERS.items():
        if ex.end is not None:
            if ex.reads_release:
                run.raise_leaks()
            yield from ((name, out) for out in ex.end(run))


def write_exports(
    release_dir: Path, eval_df: pl.DataFrame, sft_df: pl.DataFrame, cfg: Settings, checksums: bool = True
) -> dict[str, dict]:
    """Write every export into the release folder (and re-write checksums.sha256); returns {export: {"files",
    "rows"}}. A text with a path or identity leak is not written, and the call raises once the others are (the
    release stage writes into a staging folder that a failed step discards)."""
    release_dir = Path(release_dir)
    tables = {"eval": eval_df, "sft": sft_df}
    report: dict[str, dict] = {name: {"files": [], "rows": 0} for name in EXPORTERS}
    run = Run(tables, common.parts(tables, cfg), release_dir, cfg)
    last: list = [None, None, []]  # (text, kind, problems) of the last text checked
    for name, out in export_outputs(run):
        if isinstance(out.data, str):
            # one text written to several files (LLaMA-Factory and ms-swift write a part's one `messages` text, one
            # after the other) is checked once, where it is made; every file of it is refused when it leaks
            kind = facing.text_kind(out.rel, cfg)
            if last[0] is not out.data or last[1] != kind:
                last[:] = [out.data, kind, find_path_leaks(out.data) + facing.text_problems(out.rel, out.data, cfg)]
            if found := last[2]:
                run.leaks[out.rel] = found
                continue
            io.atomic_write_text(release_dir / out.rel, out.data)
        else:
            if out.facing:
                facing.check_table(out.rel, out.data)
            io.write_parquet(release_dir / out.rel, out.data)
        report[name]["files"].append(out.rel)
        report[name]["rows"] += out.rows
    run.raise_leaks()
    if checksums:
        writers.write_checksums(release_dir, cfg)
    return {name: {"files": sorted(r["files"]), "rows": r["rows"]} for name, r in report.items()}


def files_written(report: dict[str, dict]) -> list[str]:
    """Every release-relative file of an export report, sorted."""
    return sorted(f for r in report.values() for f in r["files"])


def run_exports(cfg: Settings, release_dir: Path, checksums: bool = True) -> dict[str, dict]:
    """Exports of the release already written in release_dir."""
    tables = read_tables(release_dir, cfg, levels=True)
    return write_exports(release_dir, tables["eval"], tables["sft"], cfg, checksums=checksums)
