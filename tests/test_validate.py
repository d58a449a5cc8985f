"""Release validator: a valid release passes; each defect class is caught; the path-leak scanner."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from factories import build, make_cfg
from pipeline.release import writers
from pipeline.core import io
from pipeline.release.identity import mcq_uid
from pipeline.publish.validate import find_path_leaks, validate_release

FILES = make_cfg().release.files.model_dump()


@pytest.fixture()
def release(tmp_path) -> Path:
    build(tmp_path)
    return tmp_path


def _refresh(root: Path) -> None:
    writers.write_checksums(root, make_cfg())


def _rewrite_split(root: Path, split: str, df: pl.DataFrame) -> None:
    io.write_parquet(root / FILES[f"{split}_parquet"], df)
    io.write_jsonl(root / FILES[f"{split}_jsonl"], df)
    _refresh(root)


def _edit_json(root: Path, key: str, fn) -> None:
    path = root / FILES[key]
    obj = json.loads(path.read_text())
    fn(obj)
    io.write_json(path, obj)
    _refresh(root)


def _has(problems: list[str], *needles: str) -> bool:
    return any(all(n in p for n in needles) for p in problems)


def test_valid_release_has_no_problems(release):
    assert validate_release(release, make_cfg()) == []


def test_tampered_checksum(release):
    path = release / FILES["checksums"]
    lines = path.read_text().splitlines()
    lines[0] = ("0" if lines[0][0] != "0" else "1") + lines[0][1:]
    path.write_text("\n".join(lines) + "\n")
    assert _has(validate_release(release, make_cfg()), "checksum mismatch")


def test_file_changed_after_checksums(release):
    with open(release / FILES["split_groups_sft"], "a") as fh:
        fh.write("rh20t/extra\n")
    problems = validate_release(release, make_cfg())
    assert _has(problems, "checksum mismatch", "split_groups_sft")
    assert _has(problems, "split_groups_sft", "groups listed")


def test_unlisted_file(release):
    (release / "metadata" / "notes.txt").write_text("hello\n")
    assert _has(validate_release(release, make_cfg()), "notes.txt is not covered")


def test_dropped_file(release):
    (release / FILES["task_distribution"]).unlink()
    problems = validate_release(release, make_cfg())
    assert _has(problems, "missing file", "task_distribution.csv")
    assert _has(problems, "lists metadata/task_distribution.csv, which does not exist")


def test_step_files_are_all_there_or_none(release):
    """A release without any T13 step file has no step track (valid); one with only some of them is not."""
    assert not _has(validate_release(release, make_cfg()), "missing file", "steps")
    (release / FILES["steps_eval_parquet"]).write_bytes(b"")
    _refresh(release)
    problems = validate_release(release, make_cfg())
    for key in ("steps_eval_jsonl", "steps_sft_parquet", "steps_sft_jsonl", "steps_manifest"):
        assert _has(problems, "missing file", FILES[key], key)
    assert not _has(problems, "missing file", "(steps_eval_parquet)")


def test_leaked_group(release):
    ev = pl.read_parquet(release / FILES["eval_parquet"])
    sft = pl.read_parquet(release / FILES["sft_parquet"])
    group = ev["split_group_id"][0]
    sft = sft.with_columns(
        split_group_id=pl.when(pl.col("item_id") == "pb_v2_sft_000001")
        .then(pl.lit(group))
        .otherwise(pl.col("split_group_id"))
    )
    _rewrite_split(release, "sft", sft)
    problems = validate_release(release, make_cfg())
    assert _has(problems, "split_group_id values on both splits")


def test_leaked_group_in_lists(release):
    ev_groups = (release / FILES["split_groups_eval"]).read_text()
    path = release / FILES["split_groups_sft"]
    path.write_text("\n".join(sorted(set(path.read_text().split() + ev_groups.split()))) + "\n")
    _refresh(release)
    assert _has(validate_release(release, make_cfg()), "split group lists share")


@pytest.mark.parametrize("where", ["document", "cell"])
def test_path_leak(release, where):
    if where == "document":
        path = release / FILES["reconstruction"]
        path.write_text(path.read_text() + "Frames were cached in /home/alice/x\n")
        _refresh(release)
        target = FILES["reconstruction"]
    else:
        ev = pl.read_parquet(release / FILES["eval_parquet"])
        ev = ev.with_columns(question=pl.col("question") + " see /home/alice/x")
        _rewrite_split(release, "eval", ev)
        target = FILES["eval_parquet"]
    problems = validate_release(release, make_cfg())
    assert _has(problems, target, "/home/alice/x")


def test_mismatched_counts(release):
    _edit_json(release, "eval_manifest", lambda m: m.update(num_items=m["num_items"] + 1))
    _edit_json(release, "split_summary", lambda s: s["sources"]["gm100"].update(eval_groups=7))
    path = release / FILES["task_distribution"]
    path.write_text(path.read_text().replace("T1,Phase Recognition,4,", "T1,Phase Recognition,5,"))
    _refresh(release)
    problems = validate_release(release, make_cfg())
    assert _has(problems, "eval_manifest.json", "num_items")
    assert _has(problems, "split_summary.json", "sources.gm100.eval_groups")
    assert _has(problems, "task_distribution.csv", "sum of eval_n")


def test_dropped_rows_break_counts(release):
    ev = pl.read_parquet(release / FILES["eval_parquet"]).head(8)
    _rewrite_split(release, "eval", ev)
    problems = validate_release(release, make_cfg())
    assert _has(problems, "split_summary.json", "eval_items")
    assert _has(problems, "eval_manifest.json", "num_items")
    assert _has(problems, "task_distribution.csv")


def test_parquet_jsonl_mismatch(release):
    path = release / FILES["sft_jsonl"]
    lines = path.read_text().splitlines()
    row = json.loads(lines[3])
    row["question"] = "changed?"
    lines[3] = json.dumps(row, ensure_ascii=False, separators=(",", ":"))
    path.write_text("\n".join(lines) + "\n")
    _refresh(release)
    assert _has(validate_release(release, make_cfg()), "processdata_sft.jsonl:4", "differs")


def test_schema_mismatch(release):
    ev = pl.read_parquet(release / FILES["eval_parquet"]).drop("licence")
    io.write_parquet(release / FILES["eval_parquet"], ev)
    _refresh(release)
    assert _has(validate_release(release, make_cfg()), "schema differs")


@pytest.mark.parametrize(
    "change, needle",
    [
        (dict(answer=pl.lit("E")), "answer is not a letter within num_choices"),
        (dict(sft_target=pl.lit("<ANSWER>Z</ANSWER>")), "sft_target does not match answer"),
        (dict(choice_F=pl.lit("extra")), "choices not non-null exactly up to num_choices"),
        (dict(item_id=pl.lit("pb_v2_eval_1")), "item_id"),
        (dict(visual_ref=pl.lit("gm100/episode/x/camera_top/frames[000001]")), "visual_ref"),
        (dict(task_meta_public=pl.lit(True)), "task_meta_public"),
    ],
)
def test_row_defects(release, change, needle):
    ev = pl.read_parquet(release / FILES["eval_parquet"])
    ev = ev.with_columns(
        **{k: pl.when(pl.col("task_id") == "T1").then(v).otherwise(pl.col(k)) for k, v in change.items()}
    )
    _rewrite_split(release, "eval", ev)
    assert _has(validate_release(release, make_cfg()), needle)


def test_wall_clock_in_summary(release):
    _edit_json(release, "split_summary", lambda s: s.update(created_at="2026-05-01T10:00:00"))
    assert _has(validate_release(release, make_cfg()), "created_at")


def test_edited_schema_doc(release):
    path = release / FILES["schema"]
    path.write_text(path.read_text().replace("Option A.", "Option A (edited)."))
    _refresh(release)
    assert _has(validate_release(release, make_cfg()), "schema.md", "differs")


# ---------------------------------------------------------------- find_path_leaks


@pytest.mark.parametrize(
    "text",
    [
        "/home/alice/x",
        "see /root/.cache/a.mp4",
        '"file":"/tmp/pb/x.jpg"',
        "cd /work/main && make",
        "(/Users/bob/data)",
        "C:\\Users\\bob\\x.parquet",
        "C:\\\\Users\\\\bob",
        "D:/datasets/gm100",
        "file:///srv/x",
        "~/datasets/gm100",
        "\\\\nas\\share\\gm100",
        "/data/gm100-cobotmagic-lerobot",
        "/mnt/x",
        "(C:\\x)",
        '"e:/x"',
    ],
)
def test_find_path_leaks_positive(text):
    assert find_path_leaks(text), text


@pytest.mark.parametrize(
    "text",
    [
        "gm100/episode/task_00001__episode_000007/camera_top/frames[000122]",
        "<ANSWER>A</ANSWER>",
        "A: toward the left side\nB: right",
        "Left/Right/Up/Down",
        "T_progress and/or T_binary",
        "https://huggingface.co/datasets/ProcessBench-2026/RoboProcessBench",
        "splits/processbench_eval.parquet",
        "metadata/split_groups_eval.txt",
        "the upstream root of each source",
        "1/num_choices",
        "Yes — contact established",
        "gm100/rooted/x",
        "a/home/b",
        "http://example.org/data/x",
        '"reconstruction_key_json":"{\\"camera\\":\\"cam\\",\\"frame_indices\\":[5]}"',
        "abC:\\x",
        "\u00e9:\\x",
        "1:/x",
    ],
)
def test_find_path_leaks_negative(text):
    assert find_path_leaks(text) == [], text


def test_find_path_leaks_identity_tokens():
    assert find_path_leaks("built by alice on lab-gpu-7", extra_tokens=["lab-gpu-7"]) == ["user/host name 'lab-gpu-7'"]
    assert find_path_leaks("alicea", extra_tokens=["alice"]) == []


# ---------------------------------------------------------------- what lies in the folder (issue 14, item 10)
@pytest.mark.parametrize(
    "name, needle",
    [
        ("metadata/.alice_notes", "stray dot-file"),  # a stray dot-file with a user's name in it
        ("splits/.processbench_eval.parquet.x1y2.tmp", "temp file of an interrupted write"),  # a killed atomic write
        (".DS_Store", "stray dot-file"),
    ],
)
def test_dot_files_are_invalid_with_their_name(release, name, needle):
    (release / name).write_bytes(b"x")
    problems = validate_release(release, make_cfg())
    assert _has(problems, name, needle), problems


def test_a_dot_folder_is_invalid(release):
    (release / ".cache").mkdir()
    (release / ".cache" / "x.json").write_text("{}")
    problems = validate_release(release, make_cfg())
    assert _has(problems, ".cache", "stray dot-file") and not _has(problems, "x.json")


def test_non_utf8_text_is_invalid_not_a_traceback(release):
    for key in ("checksums", "split_groups_eval", "eval_jsonl", "task_distribution", "schema"):
        path = release / FILES[key]
        path.write_bytes(path.read_bytes() + b"\xff\xfe")
    problems = validate_release(release, make_cfg())
    for key in ("checksums", "split_groups_eval", "eval_jsonl", "task_distribution", "schema"):
        assert _has(problems, FILES[key], "not UTF-8 text (byte 0xff"), (key, problems)


def test_unknown_manifest_key_is_invalid(release):
    _edit_json(release, "eval_manifest", lambda m: m.update(built_by="alice"))
    assert _has(validate_release(release, make_cfg()), "eval_manifest.json", "unknown key 'built_by'")


def test_symlinked_release_file_is_invalid(release, tmp_path_factory):
    outside = tmp_path_factory.mktemp("elsewhere") / "schema.md"
    target = release / FILES["schema"]
    outside.write_bytes(target.read_bytes())  # same bytes: the checksum still matches
    target.unlink()
    target.symlink_to(outside)
    problems = validate_release(release, make_cfg())
    assert _has(problems, FILES["schema"], "symbolic link"), problems


def test_file_name_naming_this_machine_is_invalid(release):
    import getpass

    user = getpass.getuser()
    if len(user) < 4 or user in ("root", "user", "runner"):
        user = None
    name = f"notes_{user}.txt" if user else "notes_~/x.txt".replace("/", "_")
    (release / "metadata" / name).write_text("x\n")
    problems = validate_release(release, make_cfg())
    assert _has(problems, name, "not covered")  # every stray file fails, named
    if user:
        assert _has(problems, name, "file name")


def test_path_scan_reads_every_piece_of_a_file(tmp_path, monkeypatch):
    """The path scan reads a file in pieces cut at line ends: a path in any piece, of a text file or of a parquet
    file's rows, is found, and one found in several pieces is reported once."""
    from pipeline.release import scan as release_scan

    monkeypatch.setattr(release_scan, "SCAN_BYTES", 64)
    monkeypatch.setattr(release_scan, "SCAN_ROWS", 3)
    lines = [json.dumps({"i": i, "t": "x" * 20}) for i in range(40)]
    lines[29] = json.dumps({"i": 29, "t": "see /home/alice/data.h5"})
    lines[35] = json.dumps({"i": 35, "t": "see /home/alice/data.h5"})
    lines[20] = json.dumps({"i": 20, "t": "/srv/cache/frames " + "y" * 300})  # a line longer than one read
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n" + json.dumps({"tail": "C:\\Users\\bob\\x"}))
    pl.DataFrame({"t": ["clean"] * 10 + ["/mnt/scratch/run7/frames"] + ["clean"] * 5}).write_parquet(
        tmp_path / "b.parquet"
    )
    rel, leaks = release_scan._file_leaks((str(tmp_path), "a.jsonl"))
    assert rel == "a.jsonl" and sum("/home/alice/data.h5" in x for x in leaks) == 1, leaks
    assert any("Windows path" in x for x in leaks), leaks  # in the last piece, which has no line end
    assert any("/srv/cache/frames" in x for x in leaks), leaks
    _, leaks = release_scan._file_leaks((str(tmp_path), "b.parquet"))
    assert len(leaks) == 1 and "/mnt/scratch/run7/frames" in leaks[0]


def test_a_duplicate_key_in_a_jsonl_line_is_refused(release):
    """A line with "answer" twice, the last one right: json.loads kept the last and the line passed; a reader that
    keeps the first sees another answer."""
    path = release / FILES["sft_jsonl"]
    lines = path.read_text(encoding="utf-8").split("\n")
    row = json.loads(lines[3])
    lines[3] = '{"answer":"Z",' + lines[3][1:]
    path.write_text("\n".join(lines), encoding="utf-8")
    _refresh(release)
    assert row["answer"] != "Z"
    assert _has(validate_release(release, make_cfg()), "processdata_sft.jsonl:4", "duplicate key 'answer'")


def test_line_separators_the_writer_keeps_inside_strings_are_accepted(release):
    """U+2028 / U+2029 / U+0085 inside a question, written by the project's own writer: str.splitlines cut the line
    there and the validator flagged the project's own file."""
    df = pl.read_parquet(release / FILES["sft_parquet"])
    df = df.with_columns(
        pl.when(pl.int_range(pl.len()) == 2)
        .then(pl.col("question") + " a\u2028b\u2029c\x85d")
        .otherwise(pl.col("question"))
        .alias("question")
    )
    # the writer derives each row's item_uid from what it holds (pipeline/release/identity.py)
    df = df.with_columns(pl.Series("item_uid", [mcq_uid(r, "default") for r in df.iter_rows(named=True)]))
    _rewrite_split(release, "sft", df)
    assert "\u2028" in (release / FILES["sft_jsonl"]).read_text(encoding="utf-8")
    assert validate_release(release, make_cfg()) == []


def test_a_deeply_nested_metadata_file_is_a_problem_not_a_crash(release):
    path = release / FILES["split_summary"]
    path.write_text("[" * 100_000 + "]" * 100_000)
    _refresh(release)
    assert _has(validate_release(release, make_cfg()), "unreadable JSON", "nested too deep")


@pytest.mark.parametrize("char", ["\x1b[2J", "\u200b", "e\u0301"])
def test_a_released_unit_id_with_control_characters_is_refused(release, char):
    """Ingest refuses unit ids with control or invisible characters or not in NFC; one edited into a release, with
    every reference made from it again (so nothing else disagrees), is refused by the validator, naming the id
    escaped."""
    from pipeline.release.schema import reconstruction_key_json, source_episode_ref, visual_ref

    ev = pl.read_parquet(release / FILES["eval_parquet"])
    rows = ev.to_dicts()
    r = rows[0]
    r["source_unit_id"] += char
    frames = json.loads(r["frame_indices_json"])
    key = (r["source_slug"], r["source_unit_type"], r["source_unit_id"])
    r["visual_ref"] = visual_ref(*key, r["camera"], frames)
    r["source_episode_ref"] = source_episode_ref(*key)
    r["reconstruction_key_json"] = reconstruction_key_json(
        r["source_slug"], r["source_task_id"], *key[1:], r["camera"], frames
    )
    _rewrite_split(release, "eval", pl.DataFrame(rows, schema=ev.schema))
    problems = validate_release(release, make_cfg())
    assert _has(problems, "processbench_eval.parquet", "source_unit_id", ascii(r["source_unit_id"])), problems
    assert not _has(problems, "visual_ref") and not _has(problems, "source_episode_ref")
