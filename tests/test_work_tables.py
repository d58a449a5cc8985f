"""Work tables that prove themselves (pipeline/core/work_tables.py): a table a step keeps for a later run is checked against
the sha256 and row count recorded when it was written. A cut or edited per-family candidates table, or an edited
items table of the last selection, is built again (never trusted, never fatal); a no-op build checks the published
release against its checksums and publishes it again when a file was damaged."""

from __future__ import annotations

import shutil

import polars as pl
import pytest

from assets.run import plan
from assets.settings import BuildSettings
from assets.tables import QUESTION_TEXT
from pipeline import stages
from pipeline.core import work_tables
from pipeline.core.digests import hidden_view
from pipeline.core.io import write_parquet


def _settings(samples, work, release):
    return BuildSettings(
        scale="demo", upstream={k: str(v) for k, v in samples.items()}, work_dir=str(work), release_dir=str(release)
    )


def test_a_table_that_is_not_what_its_record_says_is_not_used(tmp_path):
    path = tmp_path / "t.parquet"
    df = pl.DataFrame({"a": list(range(100)), "b": [str(i) for i in range(100)]})
    work_tables.write_checked(path, df)
    assert work_tables.read_checked(path, "test").equals(df)
    good = path.read_bytes()
    path.write_bytes(good[: len(good) // 2])  # cut
    assert work_tables.read_checked(path, "test") is None
    assert "not a readable table" in work_tables.check(path, work_tables.read_record(path))
    write_parquet(path, df.with_columns(pl.when(pl.col("a") == 7).then(pl.lit("edited")).otherwise("b").alias("b")))
    assert work_tables.read_checked(path, "test") is None  # readable, same rows, other bytes
    assert "100 rows where 100 were written" in work_tables.check(path, work_tables.read_record(path))
    path.write_bytes(good)
    work_tables.check_path(path).unlink()  # a run cut between the table and its record
    assert work_tables.read_checked(path, "test") is None
    assert work_tables.read_checked(tmp_path / "absent.parquet", "test") is None


@pytest.mark.parametrize("damage", ["truncated", "edited"])
def test_a_damaged_family_part_is_generated_again(demo_samples, demo_release, tmp_path, damage):
    slug = "gm100"
    work = tmp_path / "work"
    shutil.copytree(
        demo_release.parent / "work",
        work,
        ignore=shutil.ignore_patterns("frame_cache", "items", "split", "_fingerprints"),
    )
    # as the candidates step sees the settings: the question text hidden (assets/tables.py Step.hides)
    cfg = hidden_view(_settings(demo_samples, work, tmp_path / "release").config(), QUESTION_TEXT)
    assert stages.run_candidates(cfg, slug)["families_generated"] == []  # every part read back
    pool_file = work / "candidates" / f"{slug}.parquet"
    pool = pl.read_parquet(pool_file)
    part = sorted((work / "candidates" / slug).glob("T5.*.parquet"))[0]
    if damage == "truncated":
        part.write_bytes(part.read_bytes()[:100])
    else:  # readable, one row's answer changed: shipped as it was before the records
        df = pl.read_parquet(part)
        col = "answer_text" if "answer_text" in df.columns else df.columns[-1]
        write_parquet(
            part,
            df.with_columns(
                pl.when(pl.int_range(pl.len()) == 0).then(pl.lit("edited")).otherwise(pl.col(col)).alias(col)
            ),
        )
    assert stages.run_candidates(cfg, slug)["families_generated"] == ["T5"]
    assert pl.read_parquet(pool_file).equals(pool)
    assert work_tables.read_checked(part, "test") is not None  # written again, with its record


def test_a_no_op_build_publishes_a_damaged_release_again(demo_samples, demo_release, tmp_path, monkeypatch):
    from pathlib import Path

    import dagster as dg

    from upstream_adapters import content_hash

    from assets.run import rebuild
    from pipeline.publish.validate import validate_release

    work, release = tmp_path / "work", tmp_path / "release"
    shutil.copytree(demo_release.parent / "work", work, ignore=shutil.ignore_patterns("frame_cache"))
    shutil.copytree(demo_release, release)
    settings = _settings(demo_samples, work, release)
    assert plan(settings) == []
    # planted: a file the release step's tables do not cover (an export), cut
    victim = sorted(
        p
        for p in release.rglob("*.jsonl")
        if "export" in p.as_posix() or "levels" in p.as_posix() or p.parent != release
    ) or sorted(release.rglob("*.jsonl"))
    victim = victim[0]
    good = victim.read_bytes()
    victim.write_bytes(good[: len(good) // 2])
    assert plan(settings) == ["release"]
    lines = []
    monkeypatch.setattr(content_hash, "RACY_S", 0.0)  # the files just written count as settled
    with dg.DagsterInstance.ephemeral() as instance:
        out = rebuild(settings, instance=instance, log=lines.append, executor="in_process")
    assert out["published"] and out["steps"] == ["release"]
    assert any("differs from its checksums" in line and victim.name in line for line in lines)
    assert (release / victim.relative_to(release)).read_bytes() == good
    assert validate_release(release, settings.config(), leaks=False) == []
    reads = []
    real = content_hash._hash_file
    monkeypatch.setattr(content_hash, "_hash_file", lambda p: reads.append(Path(p)) or real(p))
    assert plan(settings) == []
    # the release step stored the hashes of the release it published: the no-op check reads none of its bytes
    assert not [p for p in reads if release.resolve() in p.resolve().parents]


def test_a_no_op_plan_reads_no_byte_yet_sees_an_edit_that_keeps_size_and_mtime(
    demo_samples, demo_release, tmp_path, monkeypatch
):
    """The no-op check trusts a file's hash while its identity (inode, size, mtime, ctime) is the one it had when read
    whole (upstream_adapters/content_hash.py): a second plan reads no byte of the corpora, the work tables or the
    release. A release file edited in place with its size kept and its mtime set back still has another ctime: read
    again, found damaged, published again."""
    import os
    from pathlib import Path

    from upstream_adapters import content_hash

    work, release = tmp_path / "work", tmp_path / "release"
    shutil.copytree(demo_release.parent / "work", work, ignore=shutil.ignore_patterns("frame_cache"))
    shutil.copytree(demo_release, release)
    monkeypatch.setattr(content_hash, "RACY_S", 0.0)  # the copies are new: trusted at once, not 2 s from now
    settings = _settings(demo_samples, work, release)
    assert plan(settings) == []  # reads the copies whole, once, and stores their hashes
    reads = []
    real = content_hash._hash_file
    monkeypatch.setattr(content_hash, "_hash_file", lambda p: reads.append(Path(p)) or real(p))
    assert plan(settings) == []
    assert reads == []
    victim = max((p for p in release.rglob("*") if p.is_file() and p.name != "checksums.sha256"), key=os.path.getsize)
    st = victim.stat()
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01  # planted: one bit, size kept
    victim.write_bytes(bytes(data))
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the mtime set back
    assert (victim.stat().st_size, victim.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    assert plan(settings) == ["release"]
    assert [p.resolve() for p in reads] == [victim.resolve()]


def test_a_step_never_reads_a_table_changed_since_its_step_wrote_it(demo_samples, demo_release, tmp_path):
    """A run of one step (the UI materializes a selection) on an input edited after its step wrote it: the step fails
    naming the table and its writer, and the next build runs the writer again."""
    from assets.fingerprint import DamagedInput, damaged_inputs, run_step
    from assets.tables import all_steps, tables_by_name

    work = tmp_path / "work"
    shutil.copytree(demo_release.parent / "work", work, ignore=shutil.ignore_patterns("frame_cache"))
    settings = _settings(demo_samples, work, demo_release)
    cfg = settings.config()
    steps = all_steps(cfg)
    candidates = next(s for s in steps if s.name == "candidates_aist")
    assert damaged_inputs(candidates, cfg, tables_by_name(steps)) == {}  # as written: read without complaint
    arms = work / "labels" / "aist" / "arms.parquet"
    df = pl.read_parquet(arms)
    write_parquet(arms, df.head(df.height - 1))  # readable, one row gone
    with pytest.raises(
        DamagedInput,
        match=rf"labels/aist/arms\.parquet \(labels_aist: edited: {df.height - 1} rows "
        rf"where {df.height} were written",
    ):
        run_step(candidates, cfg, tables_by_name(steps))
    assert plan(settings)[:2] == ["labels_aist", "candidates_aist"]


def test_a_step_record_holds_row_counts_and_a_cut_table_is_refused(tmp_path):
    """A step's record (work/_fingerprints/<step>.json) holds the sha256 and the row count of every table it wrote;
    a reader of a table cut after its step wrote it is refused, naming the table, its writer and the rows it lost."""
    from assets.fingerprint import DamagedInput, recorded, run_step
    from assets.tables import Step, Table
    from pipeline.settings.config import load_settings

    cfg = load_settings().with_values({"build.work_dir": str(tmp_path / "work")})
    table = Table(key=("t", "a"), path="t/a.parquet", description="a test table", schema_of={"a": pl.Int64})
    write = Step(
        name="writer",
        group="g",
        run=lambda c: write_parquet(table.file(c), pl.DataFrame({"a": list(range(50))})) or {},
        writes=(table,),
        reads=(),
        config=(),
        description="writes t/a",
    )
    read = Step(
        name="reader",
        group="g",
        run=lambda c: {"rows": pl.read_parquet(table.file(c)).height},
        writes=(),
        reads=(table.name,),
        config=(),
        description="reads t/a",
    )
    tables = {table.name: table}
    run_step(write, cfg, tables)
    assert recorded(cfg, write)["rows"] == {"t/a": 50}
    assert run_step(read, cfg, tables)[0] == {"rows": 50}
    write_parquet(table.file(cfg), pl.DataFrame({"a": list(range(40))}))  # readable, ten rows gone
    with pytest.raises(DamagedInput, match=r"t/a\.parquet \(writer: edited: 40 rows where 50 were written"):
        run_step(read, cfg, tables)
    assert recorded(cfg, write) is None  # the writer runs again in the next build
