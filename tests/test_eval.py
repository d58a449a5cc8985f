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
from pipeline.evaluate.run import summary_text

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
    from pipeline.reconstruct import reconstruct

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
        assert summary["tokens_out"] == 12 * (LIMIT + len(server.probes))  # the probe costs tokens too

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

        assert server.probes == ["text"]  # one plain probe before the first item
        assert all(p["outcome"] == "answered" and p["model_id"] == MODEL for p in preds)
        # the same command again: nothing asked (not even a probe: the server reports no fingerprint), the same bytes
        asked = len(server.asked)
        before = (out / "predictions.jsonl").read_bytes()
        assert _eval(demo_release, images, server, out, "--concurrency", 4) == 0
        assert len(server.asked) == asked and server.probes == ["text"]
        assert (out / "predictions.jsonl").read_bytes() == before

    # the API key is sent, never written
    for path in out.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path

    # a fresh run (new folder, new server, same faults) answers the same: every field but the latency
    fresh = tmp_path / "fresh"
    with FakeOpenAI(demo_release, MODEL, api_key=SECRET, faults=_faults(chosen)) as server:
        assert _eval(demo_release, images, server, fresh, "--concurrency", 3) == 0
    strip = [{k: v for k, v in p.items() if k not in ("latency_s", "host")} for p in _preds(fresh)]
    assert strip == [{k: v for k, v in p.items() if k not in ("latency_s", "host")} for p in _preds(out)]


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
        deadline = time.monotonic() + 600  # a bound for a loaded machine, not a wait: the loop ends at 3 answers
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


def test_a_400_on_the_first_item_and_on_another_fails_those_items_only(demo_release, images, chosen, tmp_path, capsys):
    """A 400 on the first item is no proof that the server rejects images: the probes say it takes a plain request and
    one image, so that item is failed with the server's message and every other item is asked; a 413 on another item
    the same. Exit code 1 (incomplete); the next run asks only those two."""
    out = tmp_path / "run"
    ids = [it.item_id for it in chosen]
    with FakeOpenAI(demo_release, MODEL, faults={ids[0]: ["400"], ids[5]: ["413"]}) as server:
        assert _eval(demo_release, images, server, out) == 1
        assert sorted(server.asked) == sorted(ids) and server.problems == []
        assert server.probes == ["text", "text", "image"]  # the start, then the two probes after the first failure
        rows = {p["item_id"]: p for p in _preds(out)}
        assert rows[ids[0]]["outcome"] == "failed" and "does not accept images" in rows[ids[0]]["error"]
        assert rows[ids[5]]["outcome"] == "failed" and "HTTP 413: request entity too large" in rows[ids[5]]["error"]
        assert all(rows[i]["outcome"] == "answered" for i in ids if i not in (ids[0], ids[5]))
        summary = json.loads((out / "run_summary.json").read_text())
        assert summary["outcomes"]["failed"] == 2 and not summary["complete"] and summary["stopped"] is None
        assert "INCOMPLETE" in capsys.readouterr().out
        n = len(server.asked)
        assert _eval(demo_release, images, server, out) == 0
        assert sorted(server.asked[n:]) == sorted([ids[0], ids[5]])


def test_failures_no_item_can_pass_stop_the_run_and_say_which(
    demo_release, images, chosen, tmp_path, capsys, monkeypatch
):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    ids = [it.item_id for it in chosen]
    # a text-only server: every item 400, and so is the probe with one small image (the plain one passes)
    every = {i: ["400"] * 9 for i in ids}
    with FakeOpenAI(demo_release, MODEL, faults=every, probe_faults={"image": "400"}) as server:
        assert _eval(demo_release, images, server, tmp_path / "a", "--concurrency", 8) == 2
        assert server.asked == [ids[0]]  # nothing else was sent
    err = capsys.readouterr()
    assert "rejects images at all" in err.err and "STOPPED" in err.out
    summary = json.loads((tmp_path / "a" / "run_summary.json").read_text())  # what there was is written
    assert summary["outcomes"]["failed"] == 1 and summary["outcomes"]["missing"] == LIMIT - 1
    with FakeOpenAI(demo_release, MODEL, api_key=SECRET) as server:  # no key in the environment
        assert _eval(demo_release, images, server, tmp_path / "b") == 2
        assert server.asked == []
    assert "OPENAI_API_KEY (it is not set)" in capsys.readouterr().err
    with FakeOpenAI(demo_release, "another-model") as server:  # --model is not what the server serves
        assert _eval(demo_release, images, server, tmp_path / "u") == 2
        assert server.asked == []
    assert "plain text request" in capsys.readouterr().err
    with FakeOpenAI(demo_release, MODEL) as server:
        gone = server  # stopped: nothing listens at its address any more
    rc = _eval(demo_release, images, gone, tmp_path / "c", "--limit", 2, "--retries", 0)
    assert rc == 2 and "cannot reach" in capsys.readouterr().err


def test_a_server_that_stops_answering_midway_stops_the_run(demo_release, images, chosen, tmp_path, capsys):
    """After the first answers every request fails (a crashed backend: 500 to everything, probes included): after
    fail_streak failures in a row the probes fail too, and the run stops there instead of spending every remaining
    item's retries; the answers so far are kept."""
    ids = [it.item_id for it in chosen]
    faults = {i: ["500"] * 99 for i in ids[3:]}
    with FakeOpenAI(demo_release, MODEL, faults=faults, probe_faults={"text": "500"}, probe_ok_first=1) as server:
        assert _eval(demo_release, images, server, tmp_path / "run", "--concurrency", 1, "--retries", 0) == 2
        assert server.asked == ids[:11]  # 3 answered, 8 failed in a row: the probe, then the stop
    assert "STOPPED" in capsys.readouterr().out
    rows = {p["item_id"]: p for p in _preds(tmp_path / "run")}
    assert [rows[i]["outcome"] for i in ids[:3]] == ["answered"] * 3 and rows[ids[11]]["outcome"] == "missing"


def test_outcomes_are_named_kept_and_asked_again_only_on_request(demo_release, images, chosen, tmp_path):
    ids = [it.item_id for it in chosen]
    faults = {
        ids[1]: ["refusal"],
        ids[2]: ["refusal_field"],
        ids[3]: ["empty"],
        ids[4]: ["length"],
        ids[6]: ["surrogate"],
    }
    out = tmp_path / "run"
    with FakeOpenAI(demo_release, MODEL, faults=faults) as server:
        assert _eval(demo_release, images, server, out) == 0  # the server answered every item: complete
        rows = {p["item_id"]: p for p in _preds(out)}
        want = {ids[1]: "refused", ids[2]: "refused", ids[3]: "empty", ids[4]: "truncated", ids[6]: "answered"}
        assert {i: rows[i]["outcome"] for i in want} == want
        assert rows[ids[1]]["finish_reason"] == "content_filter" and rows[ids[4]]["finish_reason"] == "length"
        assert rows[ids[2]]["response"] == "I can't help with that."
        # a lone surrogate (valid JSON, not UTF-8) made storable, usage counts that are strings dropped
        assert "<ANSWER>A</ANSWER>" in rows[ids[6]]["response"] and "\ud800" not in rows[ids[6]]["response"]
        assert rows[ids[6]]["usage"] is None
        m = json.loads((out / "metrics.json").read_text())
        o = m["overall"]["outcomes"]
        assert (o["refused"], o["empty"], o["truncated"]) == (2, 1, 1)
        assert o["failed"] == 0 and o["server_answered"] == LIMIT and o["missing"] == m["overall"]["n"] - LIMIT
        per = {r["item_id"]: r for r in map(json.loads, (out / "per_item.jsonl").read_text().splitlines())}
        assert per[ids[2]]["correct"] == 0.0 and per[ids[2]]["outcome"] == "refused"
        assert "answered accuracy" in (out / "metrics.md").read_text()
        n = len(server.asked)
        assert _eval(demo_release, images, server, out) == 0
        assert len(server.asked) == n  # kept: none asked again
        assert _eval(demo_release, images, server, out, "--retry-refused") == 0
        assert sorted(server.asked[n:]) == sorted([ids[1], ids[2], ids[3], ids[4]])
    assert all(p["outcome"] == "answered" for p in _preds(out))


def test_endless_and_oversized_bodies_fail_their_item_in_bounded_memory(demo_release, images, chosen, tmp_path):
    """A chunked body without end, a Content-Length of 300 MB streamed, a body dripping one byte at a time: each item
    fails with the reason, the others are answered, the store holds nothing past the cap, and the run's peak memory
    (RSS of its own process) stays under a few hundred MB."""
    ids = [it.item_id for it in chosen]
    out = tmp_path / "run"
    faults = {ids[1]: ["endless"], ids[2]: ["huge"], ids[3]: ["drip"]}
    code = (  # VmHWM: the peak RSS of this process's own memory (ru_maxrss would count the forking parent's)
        "import sys\n"
        "from assets.cli import main\n"
        "rc = main(sys.argv[1:])\n"
        "print('PEAK_KB', [x.split()[1] for x in open('/proc/self/status') if x.startswith('VmHWM')][0])\n"
        "sys.exit(rc)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    with FakeOpenAI(demo_release, MODEL, faults=faults) as server:
        cmd = [
            sys.executable,
            "-c",
            code,
            "eval",
            "--release",
            str(demo_release),
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
            "--max-tokens",
            "64",
            "--timeout",
            "3",
            "--retries",
            "0",
            "--no-progress",
        ]
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stderr[-2000:]
    peak_mb = int(proc.stdout.split("PEAK_KB")[1].split()[0]) / 1024
    assert peak_mb < 400, peak_mb  # 268 MB measured on the demo release, of which ~170 MB are the imports
    rows = {p["item_id"]: p for p in _preds(out)}
    cap = 64 * 32 + 65536  # ClientOptions.body_cap() at --max-tokens 64
    assert "over the cap" in rows[ids[1]]["error"] and "announced" in rows[ids[2]]["error"]
    assert "no answer within 3s" in rows[ids[3]]["error"]
    assert all(rows[i]["outcome"] == "answered" for i in ids if i not in ids[1:4])
    assert max(len(line) for line in (out / "responses.jsonl").read_bytes().splitlines()) < cap


def test_same_model_name_elsewhere_shares_no_answer(demo_release, images, chosen, tmp_path):
    """Two endpoints serving the same --model name (another host, another checkpoint), and one endpoint whose
    system_fingerprint changed: no answer of one is served as another's."""
    out = tmp_path / "run"
    with FakeOpenAI(demo_release, MODEL, fingerprint="fp_a") as a:
        assert _eval(demo_release, images, a, out, "--limit", 3) == 0
        assert _eval(demo_release, images, a, out, "--limit", 3) == 0
        assert len(a.asked) == 3 and a.probes == ["text", "text"]  # a stored fingerprint: checked by a probe
        a.fingerprint = "fp_b"  # the server was rebuilt under the same address
        assert _eval(demo_release, images, a, out, "--limit", 3) == 0
        assert len(a.asked) == 6
    with FakeOpenAI(demo_release, MODEL, models=[{"id": MODEL, "root": "/other/checkpoint"}]) as b:
        assert _eval(demo_release, images, b, out, "--limit", 3) == 0
        assert len(b.asked) == 3  # another host: asked again
    rows = _preds(out)
    assert {r["system_fingerprint"] for r in rows} == {None} and {r["host"] for r in rows} == {b.base_url[7:-3]}
    idents = {json.loads(x)["identity_key"] for x in (out / "responses.jsonl").read_text().splitlines()}
    assert len(idents) == 2


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
    """Issue 40: one convention for every command that reads the images (pipeline/reconstruct.py
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

    every = load_items(demo_release, cfg, tracks="mcq")
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
    from pipeline.reconstruct import images_folder

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


@pytest.fixture(scope="module")
def step_images(demo_release, demo_samples, cfg, tmp_path_factory) -> Path:
    """The images of every step eval item (what `processbench reconstruct --out` writes for them)."""
    from pipeline.reconstruct import reconstruct

    steps = load_items(demo_release, cfg, tracks="steps")
    assert steps, "the demo release has step eval items"
    out = tmp_path_factory.mktemp("step_images")
    report = reconstruct(
        demo_release, dict(demo_samples), cfg, out, sources=sorted(demo_samples), item_ids={it.item_id for it in steps}
    )
    assert sum(s["ok"] for s in report["sources"].values()) == len(steps), report
    return out


@pytest.mark.parametrize("mode", ["gold", "plus"])
def test_step_track_sent_with_its_prompt_and_images_and_scored(demo_release, step_images, cfg, tmp_path, mode):
    """Every step eval item asked with the release's own step prompt, each image at its <image> tag (the server checks
    the text, the number and the pixels of the images); answers parsed by the scorer's parser: a server answering
    the gold steps scores macro-F1 1.0, one answering + to every step scores the all-correct baseline."""
    out = tmp_path / mode
    steps = load_items(demo_release, cfg, tracks="steps")
    with FakeOpenAI(demo_release, MODEL, steps=mode) as server:
        rc = cli(
            [
                "eval", "--release", str(demo_release), "--images", str(step_images), "--base-url", server.base_url,
                "--model", MODEL, "--out", str(out), "--tracks", "steps", "--no-progress",
            ]
        )  # fmt: skip
        assert rc == 0 and server.problems == []
        assert sorted(server.asked) == sorted(it.item_id for it in steps)
    assert not (out / "predictions.jsonl").exists()
    rows = [json.loads(x) for x in (out / "step_predictions.jsonl").read_text().splitlines()]
    assert len(rows) == len(steps) and all(r["outcome"] == "answered" and "<STEPS>" in r["prediction"] for r in rows)
    m = json.loads((out / "metrics.json").read_text())["steps"]
    o = m["overall"]
    assert m["predictions"]["missing"] == 0 and m["predictions"]["outcomes"]["answered"] == len(steps)
    if mode == "gold":
        assert o["macro_f1"] == 1.0
    else:
        assert o["macro_f1"] == o["baselines"]["all_correct"]["macro_f1"] < 1.0
    assert "## Step track" in (out / "metrics.md").read_text()


def test_compare_gives_the_paired_difference_and_interval_computed_by_hand(
    demo_release, demo_samples, cfg, tmp_path, capsys
):
    """Two runs of servers answering from fixed tables; `compare` gives, for the pair, the accuracy difference on the
    items both answered and its paired split-group bootstrap interval, equal to a computation by hand here: resample
    the groups with the score config's seed and count, take the percentiles."""
    import numpy as np

    from pipeline.reconstruct import reconstruct

    pick = ["--families", "T2", "--limit", "16"]  # 16 items of 8 split groups: enough for an interval
    chosen = load_items(demo_release, cfg, families="T2", limit=16, tracks="mcq")
    images = tmp_path / "images"
    reconstruct(demo_release, dict(demo_samples), cfg, images, sources=sorted(demo_samples),
                item_ids={it.item_id for it in chosen})  # fmt: skip
    rows = {r["item_id"]: r for r in _chosen_rows(demo_release, chosen).iter_rows(named=True)}
    ids = sorted(rows)

    def wrong(r):
        return next(c for c in "ABCDEF"[: int(r["num_choices"])] if c != r["answer"])

    table_a = {i: rows[i]["answer"] if k % 4 != 3 else wrong(rows[i]) for k, i in enumerate(ids)}  # 3 in 4 right
    table_b = {i: rows[i]["answer"] if k % 2 == 0 else wrong(rows[i]) for k, i in enumerate(ids)}  # 1 in 2 right
    faults = {ids[7]: ["400"]}  # run b fails one item: the pair leaves it out
    for name, table, f in (("a", table_a, {}), ("b", table_b, faults)):
        with FakeOpenAI(demo_release, MODEL, table=table, faults=f) as server:
            assert _eval(demo_release, images, server, tmp_path / name, *pick) == (1 if f else 0)
    assert cli(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "cmp")]) == 0
    rep = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    pair = rep["pairs"][0]["overall"]

    both = [i for i in ids if i != ids[7]]
    ca = {i: float(table_a[i] == rows[i]["answer"]) for i in both}
    cb = {i: float(table_b[i] == rows[i]["answer"]) for i in both}
    groups = sorted({rows[i]["split_group_id"] for i in both})
    sums = np.array(
        [
            [sum(c[i] for i in both if rows[i]["split_group_id"] == g) for c in (ca, cb)]
            + [sum(rows[i]["split_group_id"] == g for i in both)]
            for g in groups
        ],
        dtype=float,
    )
    sc = cfg.exports.score
    assert len(groups) >= sc.min_ci_groups, "the chosen items need enough split groups for an interval"
    draws = np.random.default_rng(sc.seed).integers(0, len(groups), size=(sc.bootstrap_samples, len(groups)))
    tot = sums[draws].sum(axis=1)
    diffs = (tot[:, 0] - tot[:, 1]) / tot[:, 2]
    lo, hi = (round(float(np.quantile(diffs, q)), 4) for q in ((1 - sc.ci) / 2, 1 - (1 - sc.ci) / 2))
    assert pair["n"] == len(both) and pair["n_groups"] == len(groups)
    assert pair["difference"] == round((sum(ca.values()) - sum(cb.values())) / len(both), 4)
    assert pair["ci95"] == [lo, hi]
    assert (tmp_path / "cmp" / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "Paired differences" in md and "image-free best" in md

    # another release's run is refused unless asked; a folder that is no run gets one line
    other = tmp_path / "other"
    import shutil

    shutil.copytree(tmp_path / "b", other)
    m = json.loads((other / "metrics.json").read_text())
    m["release"] = "0123456789abcdef"
    (other / "metrics.json").write_text(json.dumps(m))
    assert cli(["compare", str(tmp_path / "a"), str(other), "--out", str(tmp_path / "c2")]) == 2
    assert (
        cli(["compare", str(tmp_path / "a"), str(other), "--out", str(tmp_path / "c2"), "--allow-mixed-releases"]) == 0
    )
    (tmp_path / "empty").mkdir()
    assert cli(["compare", str(tmp_path / "a"), str(tmp_path / "empty"), "--out", str(tmp_path / "c3")]) == 2


def test_answers_carry_over_to_a_rebuilt_release(demo_samples, demo_release, cfg, tmp_path):
    """An eval run on the demo build, then the same --out on a rebuild whose only change is one template's wording
    (T5's question; the build's copy of the work folder runs only the steps after it): the server is asked only the
    items the change touched (new uid, new prompt), the others' answers are reused and the report says how many."""
    import shutil

    import dagster as dg

    from assets.fingerprint import REPO as CODE
    from assets.run import rebuild
    from assets.settings import BuildSettings
    from pipeline.reconstruct import reconstruct

    configs = tmp_path / "configs"
    shutil.copytree(CODE / "configs", configs)
    t5 = configs / "tasks" / "T5.yaml"
    t5.write_text(t5.read_text().replace("is the NOW frame?", "is the NOW image?"))
    work, second = tmp_path / "work", tmp_path / "release2"
    shutil.copytree(demo_release.parent / "work", work)
    settings = BuildSettings(
        config_dir=str(configs),
        scale="demo",
        upstream={k: str(v) for k, v in demo_samples.items()},
        work_dir=str(work),
        release_dir=str(second),
    )
    with dg.DagsterInstance.ephemeral() as instance:
        result = rebuild(settings, instance=instance, log=lambda m: None, executor="in_process")
    assert result["failed_checks"] == [] and not [s for s in result["steps"] if s.startswith(("ingest_", "labels_"))]

    pick = {"families": "T1,T5", "sources": "gm100"}
    first_items = load_items(demo_release, cfg, tracks="mcq", **pick)
    second_items = load_items(second, cfg, tracks="mcq", **pick)
    images = tmp_path / "images"
    for rel, its in ((demo_release, first_items), (second, second_items)):
        reconstruct(rel, {"gm100": demo_samples["gm100"]}, cfg, images, sources=["gm100"],
                    item_ids={it.item_id for it in its})  # fmt: skip
    old = {it.item_uid: it for it in first_items}
    changed = sorted(it.item_id for it in second_items if it.item_uid not in old)
    kept = [it for it in second_items if it.item_uid in old]
    assert changed and kept and {it.task_id for it in second_items if it.item_id in changed} == {"T5"}
    assert all(old[it.item_uid].prompt == it.prompt for it in kept)

    out = tmp_path / "run"
    args = ["--tracks", "mcq", "--families", pick["families"], "--sources", pick["sources"], "--limit", "1000"]
    # one endpoint answers both runs (its host and model are part of the store's key); it knows both releases' items
    with FakeOpenAI(demo_release, MODEL, also=[second]) as server:
        assert _eval(demo_release, images, server, out, *args) == 0
        assert sorted(server.asked) == sorted(it.item_id for it in first_items)
        n = len(server.asked)
        assert _eval(second, images, server, out, *args) == 0
        assert sorted(server.asked[n:]) == changed and server.problems == []
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["from_store"] == summary["reused_from_other_release"] == len(kept)
    assert "answered for another release" in summary_text(summary)
    rows = _preds(out)
    assert {r["release"] for r in rows} == {summary["release"]} != {None}
    assert {r["item_uid"] for r in rows} == {it.item_uid for it in second_items}
    stored = [json.loads(x) for x in (out / "responses.jsonl").read_text().splitlines()]
    assert all(r["item_uid"] and r["release"] for r in stored)
    m = json.loads((out / "metrics.json").read_text())
    assert m["release"] == summary["release"]
