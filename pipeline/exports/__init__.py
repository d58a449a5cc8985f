"""The release in its users' tools (issue 13): the Hugging Face card, Croissant, trainer / harness exports.

`write_exports(release_dir, eval_df, sft_df, cfg)` writes them from the two release tables; `run_exports(cfg,
release_dir)` reads the tables back from the release and writes the exports. Both re-write checksums.sha256 so every
new file is covered (checksums=False: the caller does, as the release stage does once at its end); both return the
release-relative files written (sorted)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from pipeline import io, writers
from pipeline.exports import card, common, consumers, croissant


def export_texts(tables: dict[str, pl.DataFrame], cfg: dict) -> dict[str, str]:
    """Every text export, by release-relative path (the card and Croissant excepted: see write_exports)."""
    xf = common.export_files(cfg)
    ev, sft = common.model_rows(tables["eval"], cfg), common.model_rows(tables["sft"], cfg)
    # LLaMA-Factory (sharegpt with OpenAI role tags) and ms-swift read the same `messages` + `images` rows.
    msg_ev = common.jsonl(consumers.messages_rows(ev))
    msg_sft = common.jsonl(consumers.messages_rows(sft))
    out = {
        xf["llamafactory_eval"]: msg_ev,
        xf["llamafactory_sft"]: msg_sft,
        xf["llamafactory_info"]: common.dumps(consumers.llamafactory_info(cfg)),
        xf["swift_eval"]: msg_ev,
        xf["swift_sft"]: msg_sft,
        xf["vlmevalkit_eval"]: consumers.vlmevalkit_tsv(ev, cfg),
        xf["grpo_eval"]: common.jsonl(consumers.grpo_rows(ev)),
        xf["grpo_sft"]: common.jsonl(consumers.grpo_rows(sft)),
    }
    for name, text in consumers.lmms_eval_files(ev, cfg).items():
        out[f"{xf['lmms_eval_dir']}/{name}"] = text
    return out


def write_exports(release_dir: Path, eval_df: pl.DataFrame, sft_df: pl.DataFrame, cfg: dict,
                  checksums: bool = True) -> list[str]:
    """Write every export into the release folder (and re-write checksums.sha256); returns the files written."""
    from pipeline.validate import find_path_leaks  # validate imports writers; keep the import local like writers

    release_dir = Path(release_dir)
    tables = {"eval": eval_df, "sft": sft_df}
    xf = common.export_files(cfg)
    texts = export_texts(tables, cfg)
    texts[xf["card"]] = card.card_markdown(tables, cfg)
    leaks = {rel: found for rel, t in texts.items() if (found := find_path_leaks(t))}
    if leaks:
        raise ValueError(f"path or identity leaks in exports: {leaks}")
    written = []
    for name, splits in card.config_tables(tables, cfg).items():
        if name == "default":
            continue
        for rel, df in splits.values():
            io.write_parquet(release_dir / rel, df)
            written.append(rel)
    for rel, text in sorted(texts.items()):
        io.atomic_write_text(release_dir / rel, text)
        written.append(rel)
    io.atomic_write_text(release_dir / xf["croissant"], common.dumps(croissant.croissant(tables, release_dir, cfg)))
    written.append(xf["croissant"])
    if checksums:
        writers.write_checksums(release_dir, cfg)
    return sorted(written)


def run_exports(cfg: dict, release_dir: Path, checksums: bool = True) -> list[str]:
    """Exports of the release already written in release_dir."""
    tables = common.read_tables(release_dir, cfg)
    return write_exports(release_dir, tables["eval"], tables["sft"], cfg, checksums=checksums)
