"""`processbench eval` against a real local OpenAI-compatible server (tests/eval_server.py, 127.0.0.1 port 0) that
checks every request against the release (images decodable, as many as the item has, the release's pixels in its
order, the release's prompt, the API key) and injects 429 + Retry-After, 500, malformed JSON, stalls past the timeout,
dropped connections and final refusals. Small builds: the session's demo release, a dozen items' images."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from eval_server import FakeOpenAI

from assets.cli import main as cli
from pipeline.settings.config import load_settings
from pipeline.evaluate.items import load_items

REPO = Path(__file__).resolve().parent.parent
LIMIT = 12
SECRET = "sk-test-Zq81-never-written"
MODEL = "test-model"


@pytest.fixture(scope="module")
def cfg():
    return load_settings()


@pytest.fixture(scope="module")
def chosen(demo_release, cfg):
    """The first LIMIT eval items (all levels, by item id): what `--limit LIMIT` asks."""
    return load_items(demo_release, cfg, limit=LIMIT)


@pytest.fixture(scope="module")
def images(demo_release, demo_samples, chosen, cfg, tmp_path_factory) -> Path:
    """What `processbench reconstruct --out` writes, for the chosen items only."""
    from pipeline.frames.reconstruct import reconstruct

    out = tmp_path_factory.mktemp("reconstructed")
    report = reconstruct(
        demo_release, dict(demo_samples), cfg, out, sources=sorted(demo_samples), item_ids={it.item_id for it in chosen}
    )
    assert sum(s["ok"] for s in report["sources"].values()) == LIMIT, report
    return out


def _eval(release, images, server, out, *extra, env_key=True) -> int:
    args = [
        "eval",
        "--release",
        str(release),
        "--images",
        str(images),
        "--base-url",
        server.base_url,
        "--model",
        MODEL,
        "--out",
        str(out),
        "--limit",
        str(LIMIT),
        "--timeout",
        "1",
        "--backoff",
        "0.01",
        "--retries",
        "3",
        "--no-progress",
        *map(str, extra),
    ]
    return cli(args)


def _preds(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]


def _faults(chosen) -> dict[str, list[str]]:
    ids = [it.item_id for it in chosen]
    # ids[0] is the preflight: it answers at once; the others fail first in every way the client retries
    return {ids[1]: ["429"], ids[2]: ["500", "500"], ids[3]: ["bad_json"], ids[4]: ["stall"], ids[5]: ["drop"]}


def test_every_item_answered_through_faults_and_report_equals_score(
    demo_release, images, chosen, tmp_path, monkeypatch
):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    out = tmp_path / "run"
    ids = [it.item_id for it in chosen]
    with FakeOpenAI(demo_release, MODEL, api_key=SECRET, faults=_faults(chosen)) as server:
        assert _eval(demo_release, images, server, out, "--concurrency", 4) == 0
        assert server.problems == []
        preds = _preds(out)
        assert [p["item_id"] for p in preds] == sorted(ids)
        assert all(p["error"] is None and "<ANSWER>" in p["response"] for p in preds)
        attempts = {p["item_id"]: p["attempts"] for p in preds}
        assert attempts == {i: 1 + len(_faults(chosen).get(i, [])) for i in ids}
        t = server.times[ids[1]]  # 429 with Retry-After: 1 -> the retry waits at least 1 s (backoff alone: 10 ms)
        assert t[1] - t[0] >= 0.95
        summary = json.loads((out / "run_summary.json").read_text())
        assert summary["complete"] and summary["retries"] == 6 and summary["answered"] == LIMIT
        assert summary["tokens_out"] == 12 * LIMIT

        # the report is `processbench score`'s own on the same predictions, byte for byte
        assert (
            cli(
                [
                    "score",
                    "--release",
                    str(demo_release),
                    "--predictions",
                    str(out / "predictions.jsonl"),
                    "--out",
                    str(tmp_path / "score"),
                ]
            )
            == 0
        )
        for name in ("metrics.json", "metrics.md", "per_item.jsonl"):
            assert (out / name).read_bytes() == (tmp_path / "score" / name).read_bytes(), name

        # the same command again: nothing asked, the same bytes
        asked = len(server.asked)
        before = (out / "predictions.jsonl").read_bytes()
        assert _eval(demo_release, images, server, out, "--concurrency", 4) == 0
        assert len(server.asked) == asked
        assert (out / "predictions.jsonl").read_bytes() == before

    # the API key is sent, never written
    for path in out.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path

    # a fresh run (new folder, new server, same faults) answers the same: every field but the latency
    fresh = tmp_path / "fresh"
    with FakeOpenAI(demo_release, MODEL, api_key=SECRET, faults=_faults(chosen)) as server:
        assert _eval(demo_release, images, server, fresh, "--concurrency", 3) == 0
    strip = [{k: v for k, v in p.items() if k != "latency_s"} for p in _preds(fresh)]
    assert strip == [{k: v for k, v in p.items() if k != "latency_s"} for p in _preds(out)]


@pytest.mark.parametrize("concurrency", [4, 6])
def test_in_flight_bound(demo_release, images, tmp_path, concurrency):
    """Requests wait until `concurrency` are in flight at once (the first time), so the maximum the server saw is
    exactly the bound: never above it, and reached (the 6 case shows the server's counter sees more than 4)."""
    with FakeOpenAI(demo_release, MODEL, wait_for_in_flight=concurrency) as server:
        assert _eval(demo_release, images, server, tmp_path / "run", "--concurrency", concurrency, "--timeout", 60) == 0
        assert server.max_in_flight == concurrency
        assert server.problems == []


def _spawn_eval(release, images, server, out, stdout) -> subprocess.Popen:
    """`processbench eval` in a process of its own (to be killed or interrupted), without an API key."""
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"} | {"PYTHONHASHSEED": "0"}
    cmd = [
        sys.executable,
        "-m",
        "assets.cli",
        "eval",
        "--release",
        str(release),
        "--images",
        str(images),
        "--base-url",
        server.base_url,
        "--model",
        MODEL,
        "--out",
        str(out),
        "--limit",
        str(LIMIT),
        "--concurrency",
        "2",
        "--no-progress",
    ]
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=stdout, stderr=subprocess.DEVNULL, text=True)


def test_killed_run_resumes_without_asking_again(demo_release, images, chosen, tmp_path):
    out = tmp_path / "run"
    with FakeOpenAI(demo_release, MODEL, hold_after=5) as server:
        proc = _spawn_eval(demo_release, images, server, out, stdout=subprocess.DEVNULL)
        store = out / "responses.jsonl"
        deadline = time.monotonic() + 120
        while not (store.is_file() and store.read_bytes().count(b"\n") >= 5):
            assert proc.poll() is None, "the run ended before it was killed"
            assert time.monotonic() < deadline, "5 answers never reached the store"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        kept = {json.loads(line)["item_id"] for line in store.read_text().splitlines()}
        assert len(kept) == 5 and not (out / "predictions.jsonl").exists()
        server.release()
        first_run = len(server.asked)
        assert _eval(demo_release, images, server, out, "--concurrency", 2) == 0
        asked_again = set(server.asked[first_run:])
        assert not asked_again & kept
        assert asked_again == {it.item_id for it in chosen} - kept
        assert all(p["error"] is None for p in _preds(out))


def test_ctrl_c_keeps_the_answers_and_says_how_to_resume(demo_release, images, chosen, tmp_path):
    out = tmp_path / "run"
    with FakeOpenAI(demo_release, MODEL, hold_after=3) as server:
        proc = _spawn_eval(demo_release, images, server, out, stdout=subprocess.PIPE)
        store = out / "responses.jsonl"
        deadline = time.monotonic() + 120
        while not (store.is_file() and store.read_bytes().count(b"\n") >= 3):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        stdout, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert "run the same command again to resume" in stdout
    rows = _preds(out)
    assert len(rows) == LIMIT and sum(r["error"] is None for r in rows) == 3
    assert {r["error"] for r in rows if r["error"] is not None} == {"not run"}


def test_final_failure_is_recorded_and_retried_next_run(demo_release, images, chosen, tmp_path, capsys):
    out = tmp_path / "run"
    bad = chosen[3].item_id
    with FakeOpenAI(demo_release, MODEL, faults={bad: ["400"]}) as server:
        assert _eval(demo_release, images, server, out) == 1  # incomplete
        rows = {p["item_id"]: p for p in _preds(out)}
        assert rows[bad]["response"] is None and "HTTP 400" in rows[bad]["error"]
        assert rows[bad]["attempts"] == 1  # a 400 is final: not retried
        assert sum(p["error"] is None for p in rows.values()) == LIMIT - 1
        err = capsys.readouterr()
        assert f"FAILED {bad}" in err.out and "INCOMPLETE" in err.out
        metrics = json.loads((out / "metrics.json").read_text())
        assert metrics["predictions"]["missing"] >= 0  # scored all the same (the failed item counts wrong)
        n = len(server.asked)
        assert _eval(demo_release, images, server, out) == 0
        assert server.asked[n:] == [bad]


def test_preflight_stops_the_run_with_the_reason(demo_release, images, chosen, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    first = chosen[0].item_id
    with FakeOpenAI(demo_release, MODEL, faults={first: ["400"] * 9}) as server:
        assert _eval(demo_release, images, server, tmp_path / "a", "--concurrency", 8) == 2
        assert server.asked == [first]  # nothing else was sent
    assert "text-only model" in capsys.readouterr().err
    with FakeOpenAI(demo_release, MODEL, api_key=SECRET) as server:  # no key in the environment
        assert _eval(demo_release, images, server, tmp_path / "b") == 2
    assert "OPENAI_API_KEY (it is not set)" in capsys.readouterr().err
    with FakeOpenAI(demo_release, MODEL) as server:
        url = server.base_url
    rc = cli(
        [
            "eval",
            "--release",
            str(demo_release),
            "--images",
            str(images),
            "--base-url",
            url,
            "--model",
            MODEL,
            "--out",
            str(tmp_path / "c"),
            "--limit",
            "2",
            "--retries",
            "0",
            "--no-progress",
        ]
    )
    assert rc == 2 and "cannot reach" in capsys.readouterr().err


def test_images_that_differ_from_the_release_are_not_sent(demo_release, images, chosen, tmp_path):
    import shutil

    copy = tmp_path / "images"
    shutil.copytree(images, copy)
    victim = chosen[2]
    src = copy / victim.images[0]
    other = copy / chosen[5].images[0]
    src.write_bytes(other.read_bytes())  # a decodable PNG, the wrong pixels
    (copy / chosen[6].images[0]).unlink()
    with FakeOpenAI(demo_release, MODEL) as server:
        assert _eval(demo_release, copy, server, tmp_path / "run") == 1
        assert server.problems == [] and victim.item_id not in server.asked
    rows = {p["item_id"]: p for p in _preds(tmp_path / "run")}
    assert "differs from the release" in rows[victim.item_id]["error"]
    assert "missing" in rows[chosen[6].item_id]["error"]
    assert rows[victim.item_id]["attempts"] == 0


def test_images_takes_the_reconstruct_folder_or_its_images_folder(demo_release, images, tmp_path, capsys):
    """Issue 40: one convention for every command that reads the images (pipeline/frames/reconstruct.py
    images_folder): `reconstruct --out`'s folder (the other tests) or its images/ folder; else one line."""
    with FakeOpenAI(demo_release, MODEL) as server:
        assert _eval(demo_release, images / "images", server, tmp_path / "run") == 0
        assert len(set(server.asked)) == LIMIT
        (tmp_path / "empty").mkdir()
        capsys.readouterr()
        assert _eval(demo_release, tmp_path / "empty", server, tmp_path / "run2") == 2
    (line,) = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert "expected the folder `processbench reconstruct --out` wrote" in line


@pytest.mark.parametrize("families", ["T5", "T8", "T9", "T10"])  # five frames, labelled frames, a composite, REASSEMBLE
def test_upstream_reconstructs_on_the_fly(demo_release, demo_samples, tmp_path, cfg, families):
    out = tmp_path / "run"
    ups = [f"--upstream={slug}={path}" for slug, path in sorted(demo_samples.items())]
    want = load_items(demo_release, cfg, families=families, limit=2)
    with FakeOpenAI(demo_release, MODEL) as server:
        rc = cli(
            [
                "eval",
                "--release",
                str(demo_release),
                *ups,
                "--base-url",
                server.base_url,
                "--model",
                MODEL,
                "--out",
                str(out),
                "--families",
                families,
                "--limit",
                "2",
                "--no-progress",
            ]
        )
        assert rc == 0 and server.problems == []
        assert sorted(server.asked) == [it.item_id for it in want]
    pngs = sorted(p.name for p in (out / "reconstructed" / "images").glob("*.png"))
    assert pngs == sorted(Path(ref).name for it in want for ref in it.images)
    assert (out / "reconstructed" / "reconstruction_report.json").is_file()


def test_items_cover_every_level_and_refuse_unknown_selections(demo_release, cfg):
    import polars as pl

    every = load_items(demo_release, cfg)
    files = sorted((demo_release / "splits").glob("processbench_eval*.parquet"))
    assert len(files) > 1  # the demo has out-of-distribution levels
    assert [it.item_id for it in every] == sorted(i for f in files for i in pl.read_parquet(f)["item_id"].to_list())
    assert {it.level for it in load_items(demo_release, cfg, levels="L2")} == {"L2"}
    assert {it.task_id for it in load_items(demo_release, cfg, families="T8,T9")} == {"T8", "T9"}
    for kw, msg in (
        ({"levels": "L9"}, "no eval level"),
        ({"families": "T99"}, "unknown task"),
        ({"sources": "nowhere"}, "no eval items of"),
    ):
        with pytest.raises(ValueError, match=msg):
            load_items(demo_release, cfg, **kw)


def test_image_max_side_downscales_after_the_hash_check(images, chosen, cfg):
    import base64

    import cv2
    import numpy as np

    from pipeline.evaluate.images import load_item_images
    from pipeline.frames.reconstruct import images_folder

    item, images = chosen[0], images_folder(images, cfg)
    full = load_item_images(item, images)
    small = load_item_images(item, images, max_side=64)
    decode = [
        cv2.imdecode(np.frombuffer(base64.b64decode(u.split(",", 1)[1]), np.uint8), cv2.IMREAD_COLOR) for u in small
    ]
    assert len(small) == len(full) == len(item.images)
    assert all(max(img.shape[:2]) == 64 for img in decode)
    assert load_item_images(item, images, max_side=100000) == full  # never upscaled, sent as stored


def test_a_changed_request_parameter_asks_again(demo_release, images, chosen, tmp_path):
    out = tmp_path / "run"
    with FakeOpenAI(demo_release, MODEL) as server:
        assert _eval(demo_release, images, server, out, "--limit", 2) == 0
        assert _eval(demo_release, images, server, out, "--limit", 2, "--max-tokens", 64) == 0
        assert len(server.asked) == 4  # the same two items, asked again under the new key
        assert _eval(demo_release, images, server, out, "--limit", 2) == 0
        assert len(server.asked) == 4  # both answers are kept: the first parameters need nothing
    keys = {(json.loads(x)["item_id"], json.loads(x)["request_hash"]) for x in (out / "responses.jsonl").open()}
    assert len(keys) == 4


def test_circular_asks_every_rotation_and_scores_it_as_score_circular(
    demo_release, images, chosen, cfg, tmp_path, monkeypatch
):
    """`eval --circular`: one request per option rotation of each item (ids <item_id>.c<k>, the item's images, the
    rotated options in the prompt), then `score --circular`'s report. The server answers A to everything: an answer
    habit that CircularEval must expose (circular accuracy 0, the same option text never chosen twice)."""
    from pipeline.scoring.circular import COPY_SEP, circular_rows

    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    out = tmp_path / "circ"
    copies = load_items(demo_release, cfg, limit=LIMIT, circular=True)
    rows = _chosen_rows(demo_release, chosen)
    assert len(copies) == circular_rows(rows).height == sum(int(n) for n in rows["num_choices"])
    assert {c.item_id.split(COPY_SEP)[0] for c in copies} == {it.item_id for it in chosen}
    first = {c.item_id: c for c in copies}
    for it in chosen:  # copy 0 is the item as the release shows it; copy 1 shows other options first
        assert first[f"{it.item_id}{COPY_SEP}0"].prompt == it.prompt
        assert first[f"{it.item_id}{COPY_SEP}1"].prompt != it.prompt
        assert first[f"{it.item_id}{COPY_SEP}1"].images == it.images
    with FakeOpenAI(demo_release, MODEL, api_key=SECRET, check_pixels=False) as server:
        assert _eval(demo_release, images, server, out, "--circular") == 0
    preds = _preds(out)
    assert sorted(p["item_id"] for p in preds) == sorted(first)
    report = json.loads((out / "circular.json").read_text())
    assert report["circular_accuracy"] == 0.0 and report["position_consistency"] == 0.0


def _chosen_rows(release, chosen):
    import polars as pl

    ids = {it.item_id for it in chosen}
    return pl.concat(
        [pl.read_parquet(f) for f in sorted((release / "splits").glob("processbench_eval*.parquet"))],
        how="vertical_relaxed",
    ).filter(pl.col("item_id").is_in(sorted(ids)))
