"""Per-unit isolation of metadata: one bad line of a list costs the unit it names, with the reason, never the source;
the unit it stood for is counted against the quarantine share."""

from __future__ import annotations

from pipeline.settings.config import load_settings
from pipeline.ingest.run import ingest_source, units_lost
from upstream_adapters.samples import reassemble as R

RECS = ["2025-01-09-13-57-17", "2025-01-09-14-01-02"]


def test_a_non_utf8_line_of_the_reassemble_split_list_costs_one_recording(tmp_path):
    """One non-UTF-8 byte in splits/test_split1.txt dropped the whole source (the list was one UnitError); now the
    line is a row naming the list, the line and what it shows, and the other recordings are read."""
    root = tmp_path / "reassemble"
    for seed, rec in enumerate(RECS):
        R.write_recording(root / "data" / f"{rec}.h5", R.RecSpec(rec), "tiny", seed=seed)
    (root / "splits").mkdir()
    (root / "splits" / "test_split1.txt").write_bytes("\n".join(RECS).encode() + b"\n2025-01-09-14-\xff9-00\n")
    res = ingest_source("reassemble", root, load_settings().sources["reassemble"].adapter.options())
    assert sorted(res.units["unit_id"].to_list()) == RECS
    (row,) = res.quarantine.to_dicts()
    assert row["unit_id"] == "*" and row["file"] == "splits/test_split1.txt"
    assert "line 3 of the split list is not UTF-8 text ('2025-01-09-14-\ufffd9-00')" in row["reason"]
    assert units_lost(res.quarantine) == 1


def test_a_bad_line_of_gm100_jsonl_costs_only_itself(tmp_path):
    """A non-UTF-8 line in meta/episodes.jsonl or meta/tasks.jsonl made the whole file unreadable (every episode of
    the task listed only by the file scan, every language null); now only that line is skipped."""
    from upstream_adapters.samples import gm100 as G

    root = tmp_path / "gm100"
    G.write(root, scale="tiny", seed=0)
    opts = load_settings().sources["gm100"].adapter.options()
    before = ingest_source("gm100", root, opts)
    for name in ("episodes.jsonl", "tasks.jsonl"):
        path = root / "task_00001" / "meta" / name
        path.write_bytes(path.read_bytes() + b'{"episode_index": 9, "task": "\xff"}\n')
    after = ingest_source("gm100", root, opts)
    assert after.units["unit_id"].to_list() == before.units["unit_id"].to_list()
    assert after.units["language"].to_list() == before.units["language"].to_list()
    assert after.units["language"].null_count() < after.units.height


def test_unit_ids_with_control_or_invisible_characters_are_refused_at_ingest(tmp_path):
    """A REASSEMBLE recording named with a zero-width space or an ANSI escape reached the released unit ids; now each
    is refused at ingest (one counted row, the id escaped) and the clean recordings are read."""
    from pipeline.ingest.run import unit_id_problem

    root = tmp_path / "reassemble"
    bad = [f"{RECS[1]}\u200b", f"{RECS[1]}\x1b[2J", f"{RECS[1]}e\u0301"]
    for seed, rec in enumerate([RECS[0], *bad]):
        R.write_recording(root / "data" / f"{rec}.h5", R.RecSpec(RECS[seed % 2]), "tiny", seed=seed)
    (root / "splits").mkdir()
    (root / "splits" / "test_split1.txt").write_text("\n".join([RECS[0], *bad]) + "\n")
    res = ingest_source("reassemble", root, load_settings().sources["reassemble"].adapter.options())
    assert res.units["unit_id"].to_list() == [RECS[0]]
    reasons = sorted(res.quarantine["reason"].to_list())
    assert len(reasons) == 3 and units_lost(res.quarantine) == 3
    assert any("U+200B" in r for r in reasons) and any("U+001B" in r for r in reasons)
    assert any("NFC" in r for r in reasons)
    assert all(q.isascii() and q.isprintable() for q in res.quarantine["unit_id"].to_list())
    assert unit_id_problem(RECS[0]) is None and unit_id_problem("task_0001 user") is None


def test_malformed_lines_of_gm100_episodes_jsonl_cost_no_good_episode(tmp_path):
    """Each kind of bad line (cut JSON, wrong types, a list, NaN, a key twice, NUL bytes, 5,000-deep nesting, an
    episode that is not there) beside good ones: every good episode is read, none is quarantined, and an episode the
    line names that has no files is `absent` (not downloaded), never a lost unit."""
    import shutil

    from upstream_adapters.samples import gm100 as G

    base = tmp_path / "base"
    G.write(base, scale="tiny", seed=0)
    opts = load_settings().sources["gm100"].adapter.options()
    before = ingest_source("gm100", base, opts)
    lines = [
        b'{"episode_index": 3,',
        b'{"episode_index": "3"}',
        b'{"episode_index": true}',
        b"[1,2]",
        b'{"episode_index": -1}',
        b'{"episode_index": NaN}',
        b'{"episode_index": 1.5}',
        b"\x00\x00",
        b'{"episode_index": 0, "episode_index": 1}',
        b"[" * 5000 + b"]" * 5000,
        b'{"episode_index": 99999}',
    ]
    for n, line in enumerate(lines):
        root = tmp_path / f"c{n}"
        shutil.copytree(base, root)
        path = root / "task_00001" / "meta" / "episodes.jsonl"
        path.write_bytes(path.read_bytes() + line + b"\n")
        res = ingest_source("gm100", root, opts)
        assert res.units["unit_id"].to_list() == before.units["unit_id"].to_list(), line[:40]
        assert units_lost(res.quarantine) == 0, (line[:40], res.quarantine.to_dicts())
        assert res.absent["unit_id"].to_list() == (["task_00001__episode_099999"] if b"99999" in line else [])
