"""Item and release identity (pipeline/release/identity.py) on hand-made rows and releases: each field of an item's
identity changes its uid and no other field does; the uid of a release row is the uid of what it holds, whatever
else the release holds; the fingerprint is the sha256 of the covered checksum lines; the reader refuses what is not a
readable release of this format in one line; the validator recomputes each uid and the fingerprint."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess

import polars as pl
import pytest

from factories import build, make_cfg, make_items, make_step_row, make_units
from pipeline.core.io import compact_json
from pipeline.release import identity, writers
from pipeline.release.identity import ReleaseIdentityError, mcq_uid, read_identity, step_uid

KEY = {
    "camera": "camera_top",
    "frame_indices": [30, 5, 17],
    "source": "gm100",
    "source_task_id": "task_00001",
    "source_unit_id": "task_00001__episode_000003",
    "source_unit_type": "episode",
}


def mcq_row(**over) -> dict:
    row = {
        "item_id": "pb_v2_eval_000007",
        "split": "eval",
        "eval_level": "L1",
        "split_group_id": "gm100/task_00001__episode_000003",
        "source": "GM-100",
        "source_slug": "gm100",
        "task_id": "T8",
        "task_name": "Temporal Ordering",
        "question": "In which order were the frames X, Y, Z taken?",
        "choice_A": "XYZ",
        "choice_B": "YZX",
        "choice_C": "ZXY",
        "choice_D": None,
        "choice_E": None,
        "choice_F": None,
        "num_choices": 3,
        "answer": "B",
        "answer_text": "YZX",
        "reconstruction_key_json": compact_json(KEY),
        "display_labels_json": '["X","Y","Z"]',
        "render_spec_json": '{"kind":"labelled_frames","size":null}',
        "image_hashes_json": '["' + "a" * 64 + '"]',
        "licence": "MIT",
        "builder_version": "processbench_build_v2",
        "prompt_version": "mcqa_letters_v3",
        "arm_type": "single_right",
    }
    return row | over


def _key(**over) -> str:
    return compact_json(KEY | over)


IDENTITY_EDITS = {
    "family": {"task_id": "T9"},
    "source": {"reconstruction_key_json": _key(source="rh20t")},
    "source task": {"reconstruction_key_json": _key(source_task_id="task_00002")},
    "unit": {"reconstruction_key_json": _key(source_unit_id="task_00001__episode_000004")},
    "unit type": {"reconstruction_key_json": _key(source_unit_type="recording")},
    "camera": {"reconstruction_key_json": _key(camera="camera_wrist_left")},
    "a frame": {"reconstruction_key_json": _key(frame_indices=[30, 5, 18])},
    "frame order": {"reconstruction_key_json": _key(frame_indices=[5, 30, 17])},
    "display labels": {"display_labels_json": '["Y","X","Z"]'},
    "no display labels": {"display_labels_json": None},
    "question": {"question": "In which order were the frames X, Y and Z taken?"},
    "an option": {"choice_C": "ZYX"},
    "option order": {"choice_A": "YZX", "choice_B": "XYZ", "answer": "A"},
    "answer": {"answer": "C", "answer_text": "ZXY"},
    "one more option": {"choice_D": "XZY", "num_choices": 4},
}
UNRELATED_EDITS = {
    "item_id": {"item_id": "pb_v2_sft_000001"},
    "split": {"split": "sft", "eval_level": None},
    "eval level": {"eval_level": "L2"},
    "split group": {"split_group_id": "gm100/other"},
    "image hashes": {"image_hashes_json": '["' + "b" * 64 + '"]'},
    "render spec": {"render_spec_json": '{"kind":"labelled_frames","size":[320,240]}'},
    "licence": {"licence": "CC-BY-4.0"},
    "versions": {"builder_version": "x", "prompt_version": "y"},
    "names": {"source": "GM100", "task_name": "Order"},
    "answer text": {"answer_text": "irrelevant"},
    "an option past num_choices": {"choice_E": "stray"},
}


@pytest.mark.parametrize("what", IDENTITY_EDITS)
def test_each_identity_field_changes_the_uid(what):
    assert mcq_uid(mcq_row(**IDENTITY_EDITS[what]), "default") != mcq_uid(mcq_row(), "default")


@pytest.mark.parametrize("what", UNRELATED_EDITS)
def test_no_other_field_changes_the_uid(what):
    assert mcq_uid(mcq_row(**UNRELATED_EDITS[what]), "default") == mcq_uid(mcq_row(), "default")


def test_the_variant_and_the_derivation_version_change_the_uid(monkeypatch):
    base = mcq_uid(mcq_row(), "default")
    assert mcq_uid(mcq_row(), "public") != base
    assert re.fullmatch(r"[0-9a-f]{32}", base)
    monkeypatch.setattr(identity, "UID_VERSION", identity.UID_VERSION + 1)
    assert mcq_uid(mcq_row(), "default") != base


STEP_EDITS = {
    "a sentence": {"steps": ["The arm waves."]},
    "a label": {"correctness": [1, -1, -1]},
    "an error kind": {"kinds": [None, "contact_flipped", None]},
}


def _step(**kw) -> dict:
    args = {"correctness": [1, -1, 1], "kinds": [None, "swapped_frames", None]} | kw
    if "steps" in args:
        args["steps"] = args["steps"] + list(make_step_row(1, [1, 1, 1])["response"]["steps"][1:])
    return make_step_row(1, **args)


@pytest.mark.parametrize("what", STEP_EDITS)
def test_each_step_field_changes_the_step_uid(what):
    assert step_uid(_step(**STEP_EDITS[what]), "default") != step_uid(_step(), "default")


def test_step_uid_covers_frames_goal_and_variant_not_position_or_images():
    row = _step()
    base = step_uid(row, "default")
    keys = json.loads(row["step_reconstruction_keys_json"])
    keys[1]["frame_indices"] = [7]
    assert step_uid(row | {"step_reconstruction_keys_json": compact_json(keys)}, "default") != base
    assert step_uid(row | {"question": "Insert the peg."}, "default") != base
    assert step_uid(row, "public") != base
    for same in (
        {"item_id": "pb_v2_steps_sft_000009", "split": "sft", "eval_level": None, "split_group_id": "g"},
        {"image": ["images/x_0.png"], "image_hashes_json": "[]", "prompt": "another wording", "licence": "MIT"},
    ):
        assert step_uid(row | same, "default") == base
    assert row["item_uid"] == base  # the factory's rows carry the uid of what they hold


def test_release_rows_carry_the_uid_of_what_they_hold_whatever_else_the_release_holds():
    cfg = make_cfg()
    items = make_items()
    ev, sft = writers.release_tables(items, make_units(), cfg)
    every = pl.concat([ev, sft])
    assert every["item_uid"].n_unique() == every.height
    for r in every.iter_rows(named=True):
        assert r["item_uid"] == mcq_uid(r, "default")
    # fewer items (a source left out), another id prefix: the remaining items keep their uids, not their ids
    fewer_cfg = cfg.with_values({"release.item_id_prefix": "other"})
    ev2, sft2 = writers.release_tables(items.filter(pl.col("source") != "gm100"), make_units(), fewer_cfg)
    again = pl.concat([ev2, sft2])
    before = dict(zip(every["item_uid"], every["source_slug"]))
    assert set(again["item_uid"]) == {u for u, s in before.items() if s != "gm100"}
    assert not set(again["item_id"]) & set(every["item_id"])


# ------------------------------------------------------------------------------------------------ fingerprint


def test_the_fingerprint_is_the_sha256_of_the_covered_checksum_lines():
    sums = {"b/x.parquet": "1" * 64, "README.md": "2" * 64, "a.json": "3" * 64, "checksums.sha256": "4" * 64}
    excluded = ["README.md", "checksums.sha256"]
    fp = identity.fingerprint_of(sums, excluded)
    assert fp == hashlib.sha256(f"{'3' * 64}  a.json\n{'1' * 64}  b/x.parquet\n".encode()).hexdigest()
    assert identity.fingerprint_of(sums | {"README.md": "5" * 64}, excluded) == fp
    assert identity.fingerprint_of(sums | {"a.json": "5" * 64}, excluded) != fp
    assert identity.fingerprint_of(sums | {"c.txt": "5" * 64}, excluded) != fp


def test_the_reader_gives_the_stated_fingerprint_and_every_uid(identified_release):
    out, cfg, fp = identified_release
    ident = read_identity(out, cfg)
    assert ident.fingerprint == fp == identity.release_fingerprint(out, cfg)
    assert json.loads((out / "metadata" / "provenance.json").read_text())["release_fingerprint"] == fp
    rows = pl.concat(
        [pl.read_parquet(out / f) for f in ("splits/processbench_eval.parquet", "splits/processdata_sft.parquet")]
    )
    assert ident.uids() == dict(zip(rows["item_id"], rows["item_uid"]))
    # the shell recipe of the docs and the card: the checksum file without the lines of the excluded files
    pattern = "|".join(re.escape(x) for x in identity.excluded_files(cfg))
    shell = subprocess.run(
        f"grep -v -E '  ({pattern})$' checksums.sha256 | sha256sum", shell=True, cwd=out, capture_output=True, text=True
    )
    assert shell.stdout.split()[0] == fp


def _refused(read, path, cfg, *words: str) -> None:
    """`read(path, cfg)` raises ReleaseIdentityError: one line holding every word."""
    with pytest.raises(ReleaseIdentityError) as e:
        read(path, cfg)
    msg = str(e.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


def test_the_reader_refuses_a_folder_that_is_not_a_release_or_of_an_older_format(identified_release, tmp_path):
    out, cfg, _ = identified_release
    _refused(read_identity, tmp_path / "nowhere", cfg, "nowhere", "not a folder")
    (tmp_path / "empty").mkdir()
    _refused(read_identity, tmp_path / "empty", cfg, "empty", "not a ProcessBench release")
    old = tmp_path / "old"
    build(old, cfg)  # the writers alone: no identity stated (a release of an older format)
    writers.write_checksums(old, cfg)
    _refused(read_identity, old, cfg, str(old), "older format", "release_fingerprint")
    # rows without item_uid, the identity stated over them: an older format too
    pq = old / "splits" / "processbench_eval.parquet"
    pl.read_parquet(pq).drop("item_uid").write_parquet(pq)
    identity.stamp_release(old, cfg)
    writers.write_checksums(old, cfg)
    _refused(read_identity, old, cfg, "older format", "item_uid", "processbench_eval.parquet")


def test_the_reader_refuses_a_truncated_or_foreign_file(identified_release):
    out, cfg, _ = identified_release
    pq, prov, sums = (
        out / "splits" / "processdata_sft.parquet",
        out / "metadata" / "provenance.json",
        out / "checksums.sha256",
    )
    data, text = pq.read_bytes(), prov.read_text()
    pq.write_bytes(data[: len(data) // 2])
    _refused(read_identity, out, cfg, "processdata_sft.parquet", "truncated")
    assert identity.release_fingerprint(out, cfg)  # the fingerprint alone reads no item file
    pq.write_bytes(data)
    prov.write_text(text[: len(text) // 2])
    _refused(read_identity, out, cfg, "provenance.json", "unreadable")
    # another release's provenance
    prov.write_text(json.dumps(json.loads(text) | {"release_fingerprint": "0" * 64}))
    _refused(identity.release_fingerprint, out, cfg, "release_fingerprint", "checksums.sha256")
    prov.write_text(text)
    sums.write_text(sums.read_text()[:-30])
    _refused(read_identity, out, cfg, "checksums.sha256")


def test_the_validator_recomputes_each_uid_and_the_fingerprint(identified_release):
    from pipeline.publish.validate import validate_release

    out, cfg, _ = identified_release
    pq = out / "splits" / "processbench_eval.parquet"
    df = pl.read_parquet(pq)
    # a question edited, parquet and jsonl agreeing, checksums rewritten: the uid and the fingerprint give it away
    edited = df.with_columns(
        pl.when(pl.int_range(pl.len()) == 0)
        .then(pl.lit("other question"))
        .otherwise(pl.col("question"))
        .alias("question")
    )
    edited.write_parquet(pq)
    from pipeline.core import io

    (out / "splits" / "processbench_eval.jsonl").write_bytes(io.jsonl_bytes(edited))
    writers.write_checksums(out, cfg)
    problems = validate_release(out, cfg, leaks=False)
    assert any("item_uid is not the identity" in p and df["item_id"][0] in p for p in problems), problems
    assert any("release_fingerprint is not the sha256" in p for p in problems), problems


def test_a_uid_on_two_rows_and_a_provenance_of_another_identity_are_refused(identified_release):
    from pipeline.core import io
    from pipeline.publish.validate import validate_release

    out, cfg, _ = identified_release
    pq = out / "splits" / "processdata_sft.parquet"
    df = pl.read_parquet(pq)
    twice = df.with_columns(
        pl.when(pl.int_range(pl.len()) == 1)
        .then(pl.lit(df["item_uid"][0]))
        .otherwise(pl.col("item_uid"))
        .alias("item_uid")
    )
    twice.write_parquet(pq)
    (out / "splits" / "processdata_sft.jsonl").write_bytes(io.jsonl_bytes(twice))
    prov = out / "metadata" / "provenance.json"
    identity.stamp_release(out, cfg)  # the fingerprint stated again over the edited rows
    writers.write_checksums(out, cfg)
    problems = validate_release(out, cfg, leaks=False)
    assert any(f"is also the uid of {df['item_id'][0]}" in p for p in problems), problems
    assert not any("release_fingerprint is not the sha256" in p for p in problems), problems
    _refused(read_identity, out, cfg, "item_uid", "2 rows")
    edit = {"item_uid_version": 0, "release_fingerprint_excludes": ["README.md"]}
    prov.write_text(json.dumps(json.loads(prov.read_text()) | edit))
    writers.write_checksums(out, cfg)
    problems = validate_release(out, cfg, leaks=False)
    assert any("item_uid_version 0" in p for p in problems), problems
    assert any("release_fingerprint_excludes is not" in p for p in problems), problems
    _refused(read_identity, out, cfg, "older format", "item_uid version 0")


def test_reconstruct_and_validity_refuse_a_release_without_identity_in_one_line(tmp_path, capsys):
    from assets.cli import main

    cfg = make_cfg()
    old = tmp_path / "old"
    build(old, cfg)  # the writers alone: a release of an older format
    writers.write_checksums(old, cfg)
    rc = main(["reconstruct", "--release", str(old), "--upstream", f"gm100={tmp_path}", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and "older format" in err and str(old) in err, err
    assert not (tmp_path / "o").exists()  # nothing rebuilt for a release it cannot name
    rc = main(["validity", "--release", str(old), "--human", str(tmp_path / "verdicts.json")])
    out = capsys.readouterr().out.strip()
    assert rc == 2 and "\n" not in out and "older format" in out, out


def test_a_validity_report_of_another_release_is_refused(identified_release):
    from pipeline.publish.validate import validate_release

    out, cfg, fp = identified_release
    report = out / "metadata" / "validity_report.json"
    report.write_text(json.dumps({"cells": [], "release_fingerprint": "0" * 64}))
    writers.write_checksums(out, cfg)
    assert identity.release_fingerprint(out, cfg) == fp  # the report is not covered: the release is still itself
    assert any("release_fingerprint '000" in p and fp in p for p in validate_release(out, cfg, leaks=False))
    report.write_text(json.dumps({"cells": [], "release_fingerprint": fp}))  # the report of this release
    writers.write_checksums(out, cfg)
    assert not any("release_fingerprint" in p for p in validate_release(out, cfg, leaks=False))
