"""`processbench` — the jobs a user runs without the Dagster UI.

    processbench build [--scale demo|release] [--upstream gm100=PATH ...] [--sources gm100,aist]
                       [--executor in_process|multiprocess|dask] [--dask-address tcp://HOST:8786] [--force]
    processbench samples --scale demo|release --out DIR [--sources ...] [--seed N]
    processbench ingest --source SLUG --root PATH --out DIR
    processbench split --items POOL.jsonl --out DIR [--config FILE]
    processbench validate DIR
    processbench reconstruct --release DIR --upstream gm100=PATH ... [--out DIR]
    processbench dev [--host 127.0.0.1] [--port 3000]
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import time
import uuid
from pathlib import Path

from tqdm import tqdm

from pipeline.config import load_config, path_in_repo


class UsageError(SystemExit):
    """A mistake on the command line: message on stderr, exit code 2 (as argparse does)."""

    def __init__(self, message: str):
        print(f"processbench: error: {message}", file=sys.stderr)
        super().__init__(2)


def _upstream(pairs: list[str] | None) -> dict[str, str]:
    """--upstream SLUG=PATH pairs; an unknown slug is an error (never silently ignored: the build would fall back
    to the sample corpus)."""
    from upstream_adapters import ADAPTERS

    out = {}
    for pair in pairs or []:
        slug, sep, path = pair.partition("=")
        if not sep or not slug or not path:
            raise UsageError(f"--upstream expects SLUG=PATH, got {pair!r}")
        if slug not in ADAPTERS:
            raise UsageError(f"--upstream names unknown source {slug!r}; known: {', '.join(sorted(ADAPTERS))}")
        out[slug] = str(Path(path).resolve())
    return out


def _sources(arg: str | None, cfg: dict) -> list[str]:
    chosen = [s for s in (arg or "").split(",") if s] or list(cfg["build"]["sources"])
    unknown = sorted(set(chosen) - set(cfg["sources"]))
    if unknown:
        raise UsageError(f"unknown source(s) {unknown}; known: {sorted(cfg['sources'])}")
    return chosen


def _encoder_limits(cfg: dict) -> dict:
    samples = cfg["build"]["samples"]
    return {"encoder_timeout_s": samples["encoder_timeout_s"], "encoder_attempts": samples["encoder_attempts"]}


def cmd_samples(args) -> int:
    cfg = load_config(scale=args.scale)
    out = Path(args.out)
    seed = cfg["build"]["samples"]["seed"] if args.seed is None else args.seed
    for slug in tqdm(_sources(args.sources, cfg), desc=f"samples ({args.scale})", unit="source"):
        t = time.time()
        _write_samples(slug, out / slug, args.scale, seed, cfg["sources"][slug].get("adapter", {}),
                       _encoder_limits(cfg))
        tqdm.write(f"{slug}: written to {out / slug} in {time.time() - t:.1f}s")
    return 0


def cmd_build(args) -> int:
    from pipeline import publish
    from pipeline.publish import LockError
    from pipeline.stages import missing_corpus

    from .run import BuildFailed, GraphMismatch, rebuild, settings_from  # Dagster is the orchestration shell

    upstream = _upstream(args.upstream)
    cfg = load_config(Path(args.config_dir) if args.config_dir else None, upstream=upstream, scale=args.scale)
    chosen = _sources(args.sources, cfg)
    unused = sorted(set(upstream) - set(chosen))
    if unused:
        raise UsageError(f"--upstream names source(s) {unused} that this build does not read (--sources "
                         f"{','.join(chosen)})")
    missing = [m for slug in chosen if (not args.samples or slug in upstream) and (m := missing_corpus(cfg, slug))]
    if missing:  # said before any folder is made
        for m in missing:
            print(f"processbench: error: {m}", file=sys.stderr)
        return 2
    settings = settings_from(config_dir=args.config_dir or "", scale=args.scale or "", upstream=upstream,
                             release_dir=args.release_dir or "", work_dir=args.work_dir or "", sources=chosen)
    release = settings.config()["build"]["release_dir"]
    before = publish.current_version(settings.config())  # what the CLI says comes from what happened to the link
    use_repo_dagster_home()
    t = time.time()
    token = uuid.uuid4().hex
    try:
        # the lock before the samples: a second `make rebuild` never rewrites the corpora this build reads
        with publish.build_lock(settings.config(), token) as cleaned:
            for what in cleaned:
                tqdm.write(f"[build] {what} (left by an interrupted build)")
            if args.samples:  # generate the default sample corpora first (what `make rebuild` does)
                scale, seed = cfg["build"]["scale"], cfg["build"]["samples"]["seed"]
                for slug in tqdm(chosen, desc=f"samples ({scale})", unit="source"):
                    if slug not in upstream:
                        _ensure_samples(slug, cfg["sources"][slug]["root"], scale, seed, cfg["sources"][slug],
                                        _encoder_limits(cfg))
            missing = [m for slug in chosen if (m := missing_corpus(cfg, slug))]
            if missing:
                for m in missing:
                    print(f"processbench: error: {m}", file=sys.stderr)
                return 2
            result = rebuild(settings, log=lambda m: tqdm.write(m), executor=args.executor, token=token,
                             max_concurrent=args.max_concurrent, dask_address=args.dask_address, force=args.force)
    except (LockError, publish.ReleaseFolderError) as exc:
        print(f"build not started: {exc}", file=sys.stderr)
        return 3
    except GraphMismatch as exc:
        print(f"processbench: error: {exc}", file=sys.stderr)
        return 2
    except BuildFailed as exc:
        print(f"build failed: {exc}", file=sys.stderr)
        after = publish.current_version(settings.config())
        if after != before:
            print(f"release published -> {release} (version {after}) before the build failed", file=sys.stderr)
        else:
            held = f"version {after}" if after else "the last good release, if any"
            print(f"release NOT published: {release} is unchanged ({held})", file=sys.stderr)
        return 1
    for warning in result["warnings"]:
        print(f"check warning: {warning}", file=sys.stderr)
    for failed in result["failed_checks"]:
        print(f"check failed: {failed}", file=sys.stderr)
    after = publish.current_version(settings.config())
    what = f"published (version {after})" if after != before else "unchanged (up to date)"
    print(f"build done in {time.time() - t:.1f}s ({len(result['steps'])} step(s) run, run id {result['run_id']}): "
          f"release {what} -> {release}")
    return 1 if result["failed_checks"] else 0


def _ensure_samples(slug: str, root: Path, scale: str, seed: int, src_cfg: dict, limits: dict) -> None:
    """Write the sample corpus of `slug` unless the one there is the generator's own output for this seed and code
    (its record beside the corpus names them and the corpus's content fingerprint: pipeline/provenance.py)."""
    from pipeline import provenance

    # with the options the record was written with (REASSEMBLE's only_split changes what its fingerprint lists)
    if provenance.sample_record_matches(slug, root, scale, seed, src_cfg.get("adapter", {})):
        return
    _write_samples(slug, root, scale, seed, src_cfg.get("adapter", {}), limits)


def _write_samples(slug: str, root: Path, scale: str, seed: int, options: dict, limits: dict) -> None:
    """(Re)write a corpus from scratch (a half-written one is never reused) and record what wrote it. `limits`: the
    encoder's timeout and attempts (build.samples)."""
    from pipeline import provenance
    from upstream_adapters import write_samples

    provenance.forget_sample_record(slug, root)
    shutil.rmtree(root, ignore_errors=True)
    write_samples(slug, root, scale=scale, seed=seed, **limits)
    provenance.write_sample_record(slug, root, scale, seed, options)


def use_repo_dagster_home() -> Path:
    """Runs are recorded in DAGSTER_HOME; unset, the repository's .dagster_home (what `make dev` shows)."""
    import os

    home = Path(os.environ.get("DAGSTER_HOME") or path_in_repo(".dagster_home"))
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists():
        (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    os.environ["DAGSTER_HOME"] = str(home)
    return home


def cmd_ingest(args) -> int:
    from pipeline.ingest import command

    args.progress = lambda it: tqdm(it, desc=f"ingest {args.source}", unit="unit")
    return command(args)


def cmd_split(args) -> int:
    from pipeline.split import split_pool_file

    summary = split_pool_file(Path(args.items), Path(args.out), Path(args.config) if args.config else None)
    for slug, s in sorted(summary.get("sources", {}).items()):
        print(f"{slug}: {s.get('eval_groups')} eval / {s.get('sft_groups')} sft groups, "
              f"{s.get('eval')} eval / {s.get('sft')} sft items")
    print(f"written: {args.out}/eval.jsonl, sft.jsonl, split_summary.json")
    return 0


def cmd_validate(args) -> int:
    from pipeline.validate import validate_release

    problems = validate_release(Path(args.dir))
    for p in problems:
        print(f"INVALID: {p}")
    print(f"{args.dir}: {'valid' if not problems else f'{len(problems)} problem(s)'}")
    return 1 if problems else 0


def cmd_reconstruct(args) -> int:
    from pipeline.frames.reconstruct import reconstruct

    upstream = _upstream(args.upstream)
    if not upstream:
        raise SystemExit("give at least one --upstream SLUG=PATH")
    cfg = load_config(upstream=upstream)
    report = reconstruct(Path(args.release), {s: cfg["sources"][s]["root"] for s in upstream}, cfg, Path(args.out),
                         sources=sorted(upstream))
    bad = 0
    for slug, r in sorted(report.get("sources", report).items()):
        print(f"{slug}: {r}")
        bad += int(r.get("missing", 0)) + int(r.get("differs", 0)) if isinstance(r, dict) else 0
    return 1 if bad else 0


def cmd_dev(args) -> int:
    """Run `dagster dev` as a child that stops with us (see `supervise` and docs/running.md)."""
    import os

    cmd = [str(Path(sys.executable).with_name("dagster")), "dev", "-m", "assets.definitions",
           "-h", args.host, "-p", str(args.port)]
    pid_file = path_in_repo(".dagster_dev.pid")
    pid_file.write_text(f"{os.getpid()}\n")
    try:
        return supervise(cmd)
    finally:
        pid_file.unlink(missing_ok=True)


def supervise(cmd: list[str], poll_s: float = 0.5, grace_s: float = 10.0) -> int:
    """Run `cmd` as a child and stop it (SIGTERM) when we get SIGINT/SIGTERM or when our parent dies. A `dagster
    dev` started in the background from a non-interactive shell ignores SIGINT and SIGTERM, and `make` killed by
    SIGTERM dies without passing the signal on, leaving its recipe running: so we watch the parent too. The child
    runs in a session of its own, and once it has exited whatever it started and left (the UI's processes, a run
    in flight) is stopped too: SIGTERM to its process group, SIGKILL after `grace_s`."""
    import os
    import signal
    import subprocess

    parent = os.getppid()
    child = subprocess.Popen(cmd, start_new_session=True)
    stopping = []

    def stop(signum, _frame=None):
        stopping.append(signum)
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while True:
        try:
            rc = child.wait(timeout=poll_s)
            _stop_group(child.pid, grace_s)
            return 0 if stopping else rc
        except subprocess.TimeoutExpired:
            if os.getppid() != parent and not stopping:  # reparented: whoever started us is gone
                stop(signal.SIGTERM)


def _stop_group(pgid: int, grace_s: float) -> None:
    """SIGTERM to every process left in group `pgid`, SIGKILL to those still there after `grace_s`."""
    import os
    import signal

    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.time() + wait
        while time.time() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


def cmd_validity(args) -> int:
    from pipeline.validity import command  # logic lives in pipeline/validity/

    return command(args)


def cmd_score(args) -> int:
    from pipeline.score import main as score_main  # logic lives in pipeline/score.py
    return score_main(["--release", args.release, "--predictions", args.predictions, "--out", args.out])


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    p = argparse.ArgumentParser(prog="processbench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)

    b = sub.add_parser("build", help="materialize every asset through Dagster and write the release")
    b.add_argument("--scale", choices=["demo", "release"])
    b.add_argument("--upstream", action="append", metavar="SLUG=PATH", help="read this source from PATH (repeatable)")
    b.add_argument("--sources", help="comma-separated subset of sources")
    b.add_argument("--samples", action="store_true", help="generate the sample corpora first when missing")
    b.add_argument("--release-dir")
    b.add_argument("--work-dir")
    b.add_argument("--executor", choices=["in_process", "multiprocess", "dask"],
                   help="the engine of the one run (default: configs/build.yaml executor.engine)")
    b.add_argument("--max-concurrent", type=int, help="steps at a time (multiprocess) / local Dask workers; 0 = cores")
    b.add_argument("--dask-address", help="scheduler address of an existing Dask cluster (default: a local one)")
    b.add_argument("--config-dir", help="read the configuration from this folder instead of configs/")
    b.add_argument("--force", action="store_true", help="run every step even when its inputs are unchanged")
    b.set_defaults(func=cmd_build)

    s = sub.add_parser("samples", help="write the sample upstream corpora, one folder per source slug")
    s.add_argument("--scale", choices=["demo", "release"], default="demo")
    s.add_argument("--out", required=True)
    s.add_argument("--sources")
    s.add_argument("--seed", type=int)
    s.set_defaults(func=cmd_samples)

    from pipeline.ingest import OPTIONS_HELP, IngestHelpFormatter

    i = sub.add_parser("ingest", help="run one adapter over a root and write the IR tables + quarantine",
                       epilog=OPTIONS_HELP, formatter_class=IngestHelpFormatter)
    i.add_argument("--source", required=True)
    i.add_argument("--option", action="append", metavar="KEY=VALUE",
                   help="adapter option (repeatable; YAML value), over the build's configured options")
    i.add_argument("--root", required=True)
    i.add_argument("--out", required=True)
    i.set_defaults(func=cmd_ingest)

    sp = sub.add_parser("split", help="split any item pool (jsonl with source, task_id, split_group_id)")
    sp.add_argument("--items", required=True)
    sp.add_argument("--out", required=True)
    sp.add_argument("--config")
    sp.set_defaults(func=cmd_split)

    v = sub.add_parser("validate", help="check a release folder against its schema, manifests and checksums")
    v.add_argument("dir")
    v.set_defaults(func=cmd_validate)

    va = sub.add_parser("validity", help="audit a release: text-only baselines, shared images, T8/T9 gaps")
    va.add_argument("--release", required=True)
    va.add_argument("--work-dir", required=True, help="the build's work folder (frame cache, IR)")
    va.set_defaults(func=cmd_validity)

    r = sub.add_parser("reconstruct", help="rebuild and verify every item's frames from upstream data")
    r.add_argument("--release", required=True)
    r.add_argument("--upstream", action="append", metavar="SLUG=PATH")
    r.add_argument("--out", default="build/reconstructed")
    r.set_defaults(func=cmd_reconstruct)

    sc = sub.add_parser("score", help="score predictions (jsonl item_id, response) against the eval split")
    for opt in ("--release", "--predictions", "--out"):
        sc.add_argument(opt, required=True)
    sc.set_defaults(func=cmd_score)

    d = sub.add_parser("dev", help="start the Dagster UI (stops cleanly on Ctrl-C or SIGTERM)")
    d.add_argument("--host", default="127.0.0.1")
    d.add_argument("--port", type=int, default=3000)
    d.set_defaults(func=cmd_dev)

    args = p.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
