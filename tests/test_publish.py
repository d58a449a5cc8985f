"""Publishing the release (issue 14): file modes, temp-file cleanup, the build lock, the staging swap and its
recovery, the CLI's refusal of unknown sources and missing corpora, provenance. No demo build here: the functions are
tested directly (the end-to-end publish gate is in tests/test_publish_build.py)."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import stat
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import polars as pl
import pytest

from factories import hold_build_lock
from pipeline import publish
from pipeline.publish import provenance
from pipeline.core import io
from pipeline.settings.config import load_settings
from pipeline.settings.root import Settings
from pipeline.settings import paths


def _folders(tmp_path: Path) -> dict:
    return {"build.work_dir": str(tmp_path / "work"), "build.release_dir": str(tmp_path / "out" / "release")}


def _cfg(tmp_path: Path) -> Settings:
    return load_settings().with_values(_folders(tmp_path))


# ------------------------------------------------------------------------------------------ modes and temp files
def test_atomic_writes_respect_the_umask_not_0600(tmp_path):
    old = os.umask(0o022)
    try:
        io.atomic_write_text(tmp_path / "a.json", "{}\n")
        io.write_parquet(tmp_path / "b.parquet", pl.DataFrame({"x": [1]}))
    finally:
        os.umask(old)
    for name in ("a.json", "b.parquet"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644, name


def test_clean_temp_files_removes_only_leftovers_of_atomic_writes(tmp_path):
    (tmp_path / "ir").mkdir()
    left = tmp_path / "ir" / ".units.parquet.k3j2h1.tmp"
    left.write_bytes(b"half")
    keep = [tmp_path / "ir" / "units.parquet", tmp_path / "notes.tmp", tmp_path / ".keep"]
    for p in keep:
        p.write_bytes(b"x")
    assert io.clean_temp_files(tmp_path) == [left]
    assert all(p.exists() for p in keep) and not left.exists()


# ------------------------------------------------------------------------------------------ the lock
@contextmanager
def _held(cfg: Settings, token: str = "first"):
    """Another process holds the build lock of `cfg` for the body."""
    ctx = mp.get_context("spawn")
    ready, stop = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=hold_build_lock, args=(cfg, token, ready, stop))
    holder.start()
    try:
        assert ready.wait(30)
        yield holder
    finally:
        stop.set()
        holder.join(30)


def test_a_second_build_gets_a_lock_error_naming_the_holder(tmp_path):
    cfg = _cfg(tmp_path)
    ctx = mp.get_context("spawn")
    ready, stop = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=hold_build_lock, args=(cfg, "first", ready, stop))
    holder.start()
    try:
        assert ready.wait(30)
        with pytest.raises(publish.LockError, match=rf"pid {holder.pid} .* since 20\d\d-"):
            with publish.build_lock(cfg, "second"):
                pass
        with publish.build_lock(cfg, "first") as cleaned:  # the holder's own run (its token) goes on
            assert cleaned == []
    finally:
        stop.set()
        holder.join(30)
    with publish.build_lock(cfg, "third"):  # released when the holder is done
        info = publish.holder(publish.lock_files(cfg)[0])
        assert info["pid"] == os.getpid() and info["token"] == "third"


def test_a_lock_left_by_a_killed_build_is_taken_over(tmp_path):
    cfg = _cfg(tmp_path)
    code = (
        "import sys, time, json; sys.path.insert(0, %r); from pipeline import publish; "
        "from pipeline.settings.config import load_settings; cfg = load_settings().with_values(json.loads(sys.argv[1])); "
        "cm = publish.build_lock(cfg, 'dead'); cm.__enter__(); "
        "print('held', flush=True); time.sleep(60)" % str(Path(__file__).resolve().parent.parent)
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, json.dumps(_folders(tmp_path))], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "held"
    proc.kill()  # kill -9: no cleanup runs
    proc.wait()
    assert publish.holder(publish.lock_files(cfg)[0])["pid"] == proc.pid  # the stale holder is still named
    with publish.build_lock(cfg, "next"):
        assert publish.holder(publish.lock_files(cfg)[1])["token"] == "next"


def test_one_lock_per_release_folder_even_with_another_work_folder(tmp_path):
    cfg = _cfg(tmp_path)
    other = cfg.with_values({"build.work_dir": str(tmp_path / "work2")})
    with _held(cfg):
        with pytest.raises(publish.LockError, match=r"\.release\.lock"):
            with publish.build_lock(other, "second"):
                pass


# ------------------------------------------------------------------------------------------ staging and swap
def _release(root: Path, text: str) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "a.txt").write_text(text)


def test_publish_swaps_the_staging_folder_in(tmp_path):
    cfg = _cfg(tmp_path)
    _release(paths.release_dir(cfg), "old")
    staged = publish.staging_config(cfg)
    assert Path(staged.build.release_dir).name == ".release.staging"
    assert cfg.build.release_dir.endswith("release")  # the original is untouched
    _release(publish.staging_dir(cfg), "new")
    publish.publish(cfg)
    assert (paths.release_dir(cfg) / "a.txt").read_text() == "new"
    assert sorted(p.name for p in paths.release_dir(cfg).parent.iterdir()) == [".release.versions", "release"]
    assert os.readlink(paths.release_dir(cfg)) == ".release.versions/1" and publish.current_version(cfg) == "1"


def test_a_crash_mid_swap_gives_back_the_last_good_release(tmp_path):
    cfg = _cfg(tmp_path)
    _release(paths.release_dir(cfg), "good")
    _release(publish.staging_dir(cfg), "new")
    os.rename(paths.release_dir(cfg), publish.previous_dir(cfg))  # killed between the two renames
    (paths.release_dir(cfg).parent / "x").mkdir()
    (Path(cfg.build.work_dir) / "ir").mkdir(parents=True)
    (Path(cfg.build.work_dir) / "ir" / ".units.parquet.abc.tmp").write_bytes(b"")
    with publish.build_lock(cfg, "next") as cleaned:
        assert any("restored the last good release" in c for c in cleaned)
        assert any("unpublished .release.staging" in c for c in cleaned)
        assert any(".units.parquet.abc.tmp" in c for c in cleaned)
    assert (paths.release_dir(cfg) / "a.txt").read_text() == "good"
    assert not publish.staging_dir(cfg).exists() and not publish.previous_dir(cfg).exists()
    assert not list(Path(cfg.build.work_dir).rglob("*.tmp"))


def test_publish_is_one_rename_of_a_link_and_keeps_one_version_back(tmp_path):
    """Each publish is a new immutable version folder and one rename of the release link over the old one: a reader
    that resolved the old link finishes on the old version (kept), and at no moment is there no release."""
    cfg = _cfg(tmp_path)
    rel = paths.release_dir(cfg)
    for n, text in enumerate(["v1", "v2", "v3"], start=1):
        _release(publish.staging_dir(cfg), text)
        publish.publish(cfg)
        assert (rel / "a.txt").read_text() == text and publish.current_version(cfg) == str(n)
    assert sorted(p.name for p in publish.versions_dir(cfg).iterdir()) == ["2", "3"]  # current + the one before

    seen, stop = [], mp.get_context("spawn").Event()
    watcher = mp.get_context("spawn").Process(target=_watch, args=(str(rel / "a.txt"), stop, str(tmp_path / "w")))
    watcher.start()
    try:
        for n in range(30):  # publish while a reader polls the release: it must always find one
            _release(publish.staging_dir(cfg), f"r{n}")
            publish.publish(cfg)
    finally:
        stop.set()
        watcher.join(60)
    seen = json.loads((tmp_path / "w").read_text())
    assert seen["missing"] == 0 and seen["reads"] > 0, seen


def _watch(path: str, stop, out: str) -> None:
    reads = missing = 0
    while not stop.is_set() or reads == 0:
        try:
            Path(path).read_text()
            reads += 1
        except FileNotFoundError:
            missing += 1
    Path(out).write_text(json.dumps({"reads": reads, "missing": missing}))


def test_a_real_release_folder_from_before_versions_is_exchanged_in_one_step(tmp_path):
    cfg = _cfg(tmp_path)
    rel = paths.release_dir(cfg)
    _release(rel, "old")  # a real folder, as published before versions
    os.chmod(rel / "a.txt", 0o444)
    os.chmod(rel, 0o555)  # read-only: the second build used to crash on it
    try:
        _release(publish.staging_dir(cfg), "new")
        publish.publish(cfg)
        assert rel.is_symlink() and (rel / "a.txt").read_text() == "new"
        _release(publish.staging_dir(cfg), "newer")
        publish.publish(cfg)
        assert (rel / "a.txt").read_text() == "newer"
        with publish.build_lock(cfg, "next"):
            pass
    finally:
        for p in rel.parent.rglob("*"):
            if p.is_dir() and not p.is_symlink():
                os.chmod(p, 0o755)


def test_release_folders_that_cannot_be_published_are_refused_up_front(tmp_path):
    cfg = _cfg(tmp_path)
    rel = paths.release_dir(cfg)
    target = tmp_path / "served" / "bench"
    _release(target, "served")
    rel.parent.mkdir(parents=True)
    rel.symlink_to(target)  # the user's own link: replacing it would leave what it serves stale
    with pytest.raises(
        publish.ReleaseFolderError,
        match=rf"symbolic link to .*bench.* set the release folder .* to "
        rf"{target}",
    ):
        with publish.build_lock(cfg, "a"):
            pass
    assert (target / "a.txt").read_text() == "served" and rel.is_symlink()
    root_cfg = cfg.with_values({"build.release_dir": "/proc"})  # a mount point
    with pytest.raises(publish.ReleaseFolderError, match="is a mount point"):
        publish.check_release_folder(root_cfg)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into any folder")
def test_an_unwritable_parent_is_refused_up_front(tmp_path):
    cfg = _cfg(tmp_path)
    paths.release_dir(cfg).parent.mkdir(parents=True)
    os.chmod(paths.release_dir(cfg).parent, 0o555)
    try:
        with pytest.raises(publish.ReleaseFolderError, match="is not writable"):
            publish.check_release_folder(cfg)
    finally:
        os.chmod(paths.release_dir(cfg).parent, 0o755)


# ------------------------------------------------------------------------------------------ the CLI
def test_an_unknown_upstream_slug_is_an_error(tmp_path, capsys):
    from assets.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["build", "--upstream", f"gm10={tmp_path}", "--release-dir", str(tmp_path / "r")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "'gm10'" in err and "gm100" in err and "aist" in err
    assert not (tmp_path / "r").exists()


def test_a_missing_corpus_stops_the_build_before_it_starts(tmp_path, capsys):
    from assets.cli import main

    rc = main(
        [
            "build",
            "--sources",
            "gm100",
            "--upstream",
            f"gm100={tmp_path / 'gm100-typo'}",
            "--work-dir",
            str(tmp_path / "w"),
            "--release-dir",
            str(tmp_path / "r"),
        ]
    )
    assert rc == 2
    err = capsys.readouterr().err
    # one line with the full path and a fix for real data: never a command writing samples beside the user's data
    assert err.count("\n") == 1 and f"no folder at {tmp_path / 'gm100-typo'} " in err
    assert "--upstream gm100=PATH" in err and "samples" not in err
    assert not (tmp_path / "r").exists() and not (tmp_path / "w").exists()


def test_a_mistyped_path_names_the_nearest_folder_and_the_closest_names(tmp_path):
    from pipeline import source_help
    from pipeline.settings.config import load_settings

    (tmp_path / "data" / "gm100-lerobot").mkdir(parents=True)
    cfg = load_settings(scale="demo", upstream={"gm100": str(tmp_path / "data" / "gm100-lerbot" / "x")})
    msg = source_help.missing_corpus(cfg, "gm100")
    assert f"nearest existing folder is {tmp_path / 'data'}," in msg
    assert f"did you mean {tmp_path / 'data' / 'gm100-lerobot'}?" in msg and "task_XXXXX" in msg


def test_make_rebuild_takes_the_lock_before_it_touches_the_samples(tmp_path, monkeypatch, capsys):
    """`processbench build --samples` (make rebuild) wrote the sample corpora before taking the lock: a second one
    deleted the first one's input mid-ingest. Now a build that cannot take the lock writes no sample."""
    from assets.cli import main

    cfg = _cfg(tmp_path)
    monkeypatch.setenv("PROCESSBENCH_ROOT_AIST", str(tmp_path / "samples" / "aist"))
    with _held(cfg):
        rc = main(
            [
                "build",
                "--samples",
                "--sources",
                "aist",
                "--work-dir",
                cfg.build.work_dir,
                "--release-dir",
                cfg.build.release_dir,
            ]
        )
    assert rc == 3 and "another build is running" in capsys.readouterr().err
    assert not (tmp_path / "samples").exists()


def test_make_rebuild_reuses_a_reassemble_corpus_it_wrote(tmp_path, monkeypatch):
    """`build --samples` regenerated REASSEMBLE's corpus on every run: the record was written with the adapter's
    options (only_split) and compared without them. Now a corpus the generator wrote is reused."""
    from assets import cli
    from pipeline.settings.config import load_settings

    cfg = load_settings(scale="demo")
    src, root = cfg.sources["reassemble"], tmp_path / "reassemble"
    limits = cli._encoder_limits(cfg)
    cli._write_samples("reassemble", root, "demo", 7, src.adapter.options(), limits)
    monkeypatch.setattr(cli, "_write_samples", lambda *a, **k: pytest.fail("the corpus was written again"))
    cli._ensure_samples("reassemble", root, "demo", 7, src, limits)


def test_the_ingest_step_fails_early_on_a_missing_corpus_and_says_what_to_do():
    from pipeline import stages
    from pipeline.settings.config import load_settings

    cfg = load_settings(scale="demo", upstream={"gm100": "/nonexistent/gm100"})
    with pytest.raises(stages.MissingCorpus, match=r"no folder at /nonexistent/gm100 .*--upstream gm100=PATH") as exc:
        stages.run_ingest(cfg, "gm100")
    assert "samples" not in str(exc.value)  # a user's path: nothing is written beside it
    cfg = load_settings(scale="demo").with_values(
        {"sources.gm100.root": stages.path_in_repo("build/samples/nowhere/gm100")}
    )
    with pytest.raises(stages.MissingCorpus, match=r"no corpus at build/samples/nowhere/gm100 .*make rebuild"):
        stages.run_ingest(cfg, "gm100")


# ------------------------------------------------------------------------------------------ provenance
def test_provenance_tells_sample_from_user_corpora_by_content(demo_samples, tmp_path):
    import shutil

    corpus = tmp_path / "samples" / "aist"
    shutil.copytree(demo_samples["aist"], corpus)
    assert provenance.corpus_record("aist", corpus)["origin"] == "user"  # no generator record: unknown content
    provenance.write_sample_record("aist", corpus, "demo", 7)
    rec = provenance.corpus_record("aist", corpus)
    assert rec["origin"] == "samples" and rec["samples"]["seed"] == 7 and rec["samples"]["scale"] == "demo"
    moved = tmp_path / "elsewhere" / "aist"  # the same content elsewhere (with its record): still samples
    shutil.copytree(corpus.parent, moved.parent)
    assert provenance.corpus_record("aist", moved) == rec
    victim = next(p for p in sorted(corpus.rglob("*")) if p.is_file() and p.stat().st_size > 0)
    victim.write_bytes(b"edited" + victim.read_bytes()[6:])  # edited content: a user corpus now
    edited = provenance.corpus_record("aist", corpus)
    assert edited["origin"] == "user" and edited["samples"] is None
    assert edited["corpus_fingerprint"] != rec["corpus_fingerprint"]
    assert str(tmp_path) not in json.dumps(rec)


def test_provenance_is_path_free_and_deterministic():
    from pipeline.settings.config import load_settings
    from pipeline.core.leaks import find_path_leaks

    a = load_settings(scale="demo")
    b = load_settings(scale="demo", upstream={"gm100": "/data/elsewhere/gm100"})
    b = b.with_values(
        {
            "build.release_dir": "/tmp/r",
            "build.work_dir": "/tmp/w",
            "build.executor.engine": "dask",
            "sources.gm100.ingest_shards": 8,
        }
    )  # nor how it runs
    corpora = {"gm100": {"origin": "user", "corpus_fingerprint": "f" * 64, "units_listed": 3, "samples": None}}
    text = provenance.provenance_json(a, corpora)
    assert text == provenance.provenance_json(b, corpora)  # where things lie changes nothing
    assert not find_path_leaks(text)
    doc = json.loads(text)
    assert doc["sources_built"] == a.build.sources and doc["scale"] == "demo"
    assert doc["sources"]["gm100"]["origin"] == "user" and doc["sources"]["aist"]["origin"] == "unknown"
    c = load_settings(scale="release")
    assert json.loads(provenance.provenance_json(c, corpora))["config_sha256"] != doc["config_sha256"]


# ------------------------------------------------------------------------------------------ make dev
def test_the_ui_stops_when_whoever_started_it_dies(tmp_path):
    """`make dev &` then `kill <make>`: make dies without passing SIGTERM on; the supervised child must stop too."""
    import signal

    repo = str(Path(__file__).resolve().parent.parent)
    supervisor = (
        f"import sys; sys.path.insert(0, {repo!r}); from assets.supervise import supervise; "
        "sys.exit(supervise(['sleep', '60']))"
    )
    # the "make": a process that starts the supervisor and then just sits there (until killed)
    make = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {supervisor!r}]); time.sleep(60)",
        ]
    )
    deadline = time.time() + 30
    sleeper = None
    while time.time() < deadline and sleeper is None:
        out = subprocess.run(["pgrep", "-f", "^sleep 60$"], capture_output=True, text=True).stdout.split()
        for pid in out:  # the sleep whose grandparent is our "make"
            sup = int(Path(f"/proc/{pid}/stat").read_text().split()[3])
            if int(Path(f"/proc/{sup}/stat").read_text().split()[3]) == make.pid:
                sleeper = int(pid)
        time.sleep(0.2)
    assert sleeper, "the supervised child did not start"
    make.send_signal(signal.SIGTERM)
    make.wait()
    deadline = time.time() + 10
    while (
        time.time() < deadline
        and Path(f"/proc/{sleeper}").exists()
        and Path(f"/proc/{sleeper}/stat").read_text().split()[2] != "Z"
    ):
        time.sleep(0.2)
    gone = not Path(f"/proc/{sleeper}").exists() or Path(f"/proc/{sleeper}/stat").read_text().split()[2] == "Z"
    assert gone, "the UI outlived the process that started it"


def test_stopping_the_ui_stops_what_it_started(tmp_path):
    """Stopping `processbench dev` could leave the UI's process tree or a run in flight: whatever the supervised child
    started and left behind (here a background `sleep` of a shell) is stopped with it."""
    import signal

    repo = str(Path(__file__).resolve().parent.parent)
    marker = tmp_path / "left.pid"
    supervisor = (
        f"import sys; sys.path.insert(0, {repo!r}); from assets.supervise import supervise; "
        f"sys.exit(supervise(['sh', '-c', 'sleep 120 & echo $! > {marker}; wait']))"
    )
    sup = subprocess.Popen([sys.executable, "-c", supervisor])
    deadline = time.time() + 30
    while time.time() < deadline and not (marker.exists() and marker.read_text().strip()):
        time.sleep(0.1)
    left = int(marker.read_text())
    alive = lambda: Path(f"/proc/{left}").exists() and Path(f"/proc/{left}/stat").read_text().split()[2] != "Z"
    try:
        sup.send_signal(signal.SIGTERM)
        assert sup.wait(30) == 0
        deadline = time.time() + 10
        while time.time() < deadline and alive():
            time.sleep(0.1)
        assert not alive(), "a process the UI started outlived it"
    finally:
        if alive():  # this test's own leftover, by its pid
            os.kill(left, signal.SIGKILL)


# ------------------------------------------------------------------------------------------ what the CLI says
@pytest.mark.parametrize("publishes", [True, False])
def test_the_cli_says_whether_a_failed_build_published(tmp_path, monkeypatch, capsys, publishes):
    """A build that fails says what happened to the release link: "published ... before the build failed" when the
    release step had swapped a new version in (the CLI once said "is unchanged" after a publish), "NOT published ...
    is unchanged (version N)" otherwise. The words come from the link's version before and after, not a guess."""
    from assets import run
    from assets.cli import main
    from factories import aist_root_with_bad_zip

    root, _ = aist_root_with_bad_zip(tmp_path / "up", None, None)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    cfg = _cfg(tmp_path)
    _release(publish.staging_dir(cfg), "v1")
    publish.publish(cfg)  # version 1 is served before the build

    def failing_rebuild(settings, **kw):
        if publishes:  # the release step published, then a later step of the run failed
            _release(publish.staging_dir(cfg), "v2")
            publish.publish(cfg)
        raise run.BuildFailed("step 'after_release' failed")

    monkeypatch.setattr(run, "rebuild", failing_rebuild)
    rc = main(
        [
            "build",
            "--sources",
            "aist",
            "--upstream",
            f"aist={root}",
            "--executor",
            "in_process",
            "--work-dir",
            str(tmp_path / "work"),
            "--release-dir",
            str(tmp_path / "out" / "release"),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 1 and "build failed: step 'after_release' failed" in err
    rel = paths.release_dir(cfg).absolute()
    if publishes:
        assert f"release published -> {rel} (version 2) before the build failed" in err and "NOT" not in err
        assert (rel / "a.txt").read_text() == "v2"
    else:
        assert f"release NOT published: {rel} is unchanged (version 1)" in err and "published ->" not in err
        assert (rel / "a.txt").read_text() == "v1"


def test_a_ui_run_beside_a_locked_terminal_build_is_refused(tmp_path, monkeypatch):
    """A run the UI launches (the build job with no CLI lock tag) while `processbench build` holds the folders' lock
    fails at its start, naming the holder, and touches neither folder (before, it was not refused)."""
    import dagster as dg

    from assets.definitions import build_job
    from assets.settings import BuildSettings

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    cfg = _cfg(tmp_path)
    _release(publish.staging_dir(cfg), "served")
    publish.publish(cfg)

    def beside() -> list[str]:
        return sorted(p.name for p in paths.release_dir(cfg).parent.iterdir() if p.suffix != ".lock")

    served = beside()
    settings = BuildSettings(
        scale="demo", sources=["aist"], work_dir=cfg.build.work_dir, release_dir=cfg.build.release_dir
    )
    with _held(cfg, "terminal") as holder, dg.DagsterInstance.ephemeral() as instance:
        res = dg.execute_job(
            dg.reconstructable(build_job),
            instance=instance,
            raise_on_error=False,
            run_config={
                "resources": {"build": {"config": settings.model_dump()}},
                "execution": {"config": {"in_process": {}}},
            },
        )
        assert not res.success
        text = " ".join(str(e.event_specific_data) for e in res.all_events if e.is_failure or e.is_run_failure)
        assert f"pid {holder.pid}" in text, text[:2000]
        assert not res.get_step_success_events()
    assert beside() == served  # no staging or version folder added: the run stopped before any step
    assert (paths.release_dir(cfg) / "a.txt").read_text() == "served"
