"""`processbench` — the jobs a user runs without the Dagster UI.

processbench build [--scale demo|release] [--upstream gm100=PATH ...] [--sources gm100,aist]
                   [--executor in_process|multiprocess|dask] [--dask-address tcp://HOST:8786] [--force]
                   [--verify]
processbench samples --scale demo|release --out DIR [--sources ...] [--seed N]
processbench ingest --source SLUG --root PATH --out DIR
processbench split --items POOL.jsonl --out DIR [--config FILE]
processbench validate DIR
processbench diff OLD NEW [--out DIR]
processbench validity --release DIR [--work-dir DIR] [--human FILE ... [--drop-unknown]]
processbench review --release DIR --images DIR --out DIR [--per-cell 100] [--prefill FILE ...]
processbench reconstruct --release DIR --upstream gm100=PATH ... [--out DIR]
processbench eval --release DIR (--images DIR | --upstream gm100=PATH ...) --base-url URL --model NAME --out DIR
processbench compare RUN_DIR RUN_DIR ... --out DIR
processbench score --release DIR --predictions FILE [--step-predictions FILE] --out DIR
processbench dev [--host 127.0.0.1] [--port 3000]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import argparse
import logging
import shutil
import sys
import time
import uuid
from pathlib import Path

from pipeline.settings.config import load_settings, path_in_repo

if TYPE_CHECKING:
    from pipeline.settings.root import Settings, Source


class UsageError(SystemExit):
    """A mistake on the command line: message on stderr, exit code 2 (as argparse does)."""

    def __init__(self, message: str):
        print(f"processbench: error: {message}", file=sys.stderr)
        super().__init__(2)


def _variants(pairs: list[str] | None) -> dict[str, str]:
    """--variant TASK=NAME pairs (the names are checked when the templates are read: pipeline.settings.config)."""
    out = {}
    for pair in pairs or []:
        task, sep, name = pair.partition("=")
        if not sep or not task or not name:
            raise UsageError(f"--variant expects TASK=NAME (e.g. T7=public), got {pair!r}")
        out[task] = name
    return out


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


def _sources(arg: str | None, cfg: Settings) -> list[str]:
    chosen = [s for s in (arg or "").split(",") if s] or list(cfg.build.sources)
    unknown = sorted(set(chosen) - set(cfg.sources))
    if unknown:
        raise UsageError(f"unknown source(s) {unknown}; known: {sorted(cfg.sources)}")
    return chosen


def _encoder_limits(cfg: Settings) -> dict:
    samples = cfg.build.samples
    return {"encoder_timeout_s": samples.encoder_timeout_s, "encoder_attempts": samples.encoder_attempts}


def cmd_samples(args) -> int:
    cfg = load_settings(scale=args.scale)
    out = Path(args.out)
    seed = cfg.build.samples.seed if args.seed is None else args.seed
    sources = _sources(args.sources, cfg)
    factor = _units_factor(args.units_factor, args.scale, sources, seed)
    from tqdm import tqdm  # here, not at the top: a build that writes no corpus never imports it

    for slug in tqdm(sources, desc=f"samples ({args.scale})", unit="source"):
        t = time.time()
        options, limits = cfg.sources[slug].adapter.options(), _encoder_limits(cfg)
        _write_samples(slug, out / slug, args.scale, seed, options, limits, units_factor=factor)
        tqdm.write(f"{slug}: written to {out / slug} in {time.time() - t:.1f}s")
    return 0


def _units_factor(value: str, scale: str, sources: list[str], seed: int) -> int | float:
    """--units-factor checked before any corpus is written: a number the release scale takes, leaving every source
    units (the plans say, nothing is encoded)."""
    from upstream_adapters import sample_units
    from upstream_adapters.samples.common import units_factor

    try:
        factor = units_factor(value)
        if factor != 1 and scale != "release":
            raise ValueError(f"units factor {factor:g} applies to --scale release only, not {scale}")
        for slug in sources if factor != 1 else ():
            sample_units(slug, seed, factor)
    except ValueError as exc:
        raise UsageError(f"--units-factor: {exc}") from None
    return factor


def cmd_build(args) -> int:
    from pipeline import publish
    from pipeline.publish import LockError
    from pipeline.source_help import missing_corpus

    from . import run  # Dagster, the orchestration shell, only when a step has to run (assets/run.py)
    from .fingerprint import use_hash_store
    from .options import BuildOptions

    upstream = _upstream(args.upstream)
    variants = _variants(args.variant)
    cfg = load_settings(
        Path(args.config_dir) if args.config_dir else None, upstream=upstream, scale=args.scale, variants=variants
    )
    chosen = _sources(args.sources, cfg)
    unused = sorted(set(upstream) - set(chosen))
    if unused:
        raise UsageError(
            f"--upstream names source(s) {unused} that this build does not read (--sources {','.join(chosen)})"
        )
    missing = [m for slug in chosen if (not args.samples or slug in upstream) and (m := missing_corpus(cfg, slug))]
    if missing:  # said before any folder is made
        for m in missing:
            print(f"processbench: error: {m}", file=sys.stderr)
        return 2
    settings = BuildOptions(
        config_dir=args.config_dir or "",
        scale=args.scale or "",
        upstream=upstream or {},
        release_dir=args.release_dir or "",
        work_dir=args.work_dir or "",
        sources=chosen or [],
        variants=variants,
    )
    build_cfg = settings.config()
    release = build_cfg.build.release_dir
    before = publish.current_version(build_cfg)  # what the CLI says comes from what happened to the link
    use_repo_dagster_home()
    t = time.time()
    token = uuid.uuid4().hex
    try:
        # the lock before the samples: a second `make rebuild` never rewrites the corpora this build reads
        with publish.build_lock(build_cfg, token) as cleaned:
            for what in cleaned:
                print(f"[build] {what} (left by an interrupted build)", flush=True)
            # the sample check below and the planner read the upstream files' content hashes from the work folder
            use_hash_store(build_cfg, verify=args.verify)
            if args.samples:  # generate the default sample corpora first (what `make rebuild` does)
                scale, seed = cfg.build.scale, cfg.build.samples.seed
                from tqdm import tqdm  # only when corpora are written: no bar, no import (the no-op build's start)

                for slug in tqdm(chosen, desc=f"samples ({scale})", unit="source"):
                    if slug not in upstream:
                        _ensure_samples(
                            slug, cfg.sources[slug].root, scale, seed, cfg.sources[slug], _encoder_limits(cfg)
                        )
            missing = [m for slug in chosen if (m := missing_corpus(cfg, slug))]
            if missing:
                for m in missing:
                    print(f"processbench: error: {m}", file=sys.stderr)
                return 2
            result = run.rebuild(
                settings,
                log=lambda m: print(m, flush=True),  # no progress bar is open by now
                executor=args.executor,
                token=token,
                max_concurrent=args.max_concurrent,
                dask_address=args.dask_address,
                force=args.force,
                verify=args.verify,
                cfg=build_cfg,
            )
    except (LockError, publish.ReleaseFolderError) as exc:
        print(f"build not started: {exc}", file=sys.stderr)
        return 3
    except run.GraphMismatch as exc:
        print(f"processbench: error: {exc}", file=sys.stderr)
        return 2
    except run.BuildFailed as exc:
        print(f"build failed: {exc}", file=sys.stderr)
        after = publish.current_version(build_cfg)
        if after != before:
            print(
                f"release published -> {Path(release).absolute()} (version {after}) before the build failed",
                file=sys.stderr,
            )
        else:
            held = f"version {after}" if after else "the last good release, if any"
            print(f"release NOT published: {Path(release).absolute()} is unchanged ({held})", file=sys.stderr)
        return 1
    for text in result["warnings"] + result["failed_checks"]:  # `check warning: ...` / `check failed: ...`, in words
        print(text, file=sys.stderr)
    roots = {slug: str(cfg.sources[slug].root) for slug in chosen}
    _report(Path(release).absolute(), result, time.time() - t, roots, build_cfg)
    return 1 if result["failed_checks"] else 0


def _report(release: Path, result: dict, seconds: float, roots: dict[str, str], cfg: Settings) -> None:
    """The end of a build: what the release holds, where it is, and what to run next."""
    from pipeline.build_report import counts_text, next_commands

    what = "published" if result["published"] else "unchanged (every step up to date)"
    print(f"build done in {seconds:.1f}s ({len(result['steps'])} step(s) run, run id {result['run_id']})")
    if (release / "splits").is_dir():
        print(f"\nitems per source and split / eval level:\n{counts_text(release)}\n")
    print(f"release {what}: {release}")
    from pipeline.release.identity import stated_fingerprint

    if fingerprint := stated_fingerprint(release, cfg):
        print(f"release fingerprint: {fingerprint}")
    print("next:\n" + "\n".join(f"  {c}" for c in next_commands(release, roots)))


def _ensure_samples(slug: str, root: Path, scale: str, seed: int, src_cfg: Source, limits: dict) -> None:
    """Write the sample corpus of `slug` unless the one there is the generator's own output for this seed and code
    (its record beside the corpus names them and the corpus's content fingerprint: pipeline/publish/provenance.py). The
    fingerprint is computed with the adapter options the record was written with (`_write_samples`): without them
    an adapter that filters units (REASSEMBLE's only_split) lists other units, and its corpus is written again."""
    from pipeline.publish import provenance

    options = src_cfg.adapter.options()
    if provenance.sample_record_matches(slug, root, scale, seed, options):
        return
    _write_samples(slug, root, scale, seed, options, limits)


def _write_samples(
    slug: str, root: Path, scale: str, seed: int, options: dict, limits: dict, units_factor: int | float = 1
) -> None:
    """(Re)write a corpus from scratch (a half-written one is never reused) and record what wrote it. `limits`: the
    encoder's timeout and attempts (build.samples); `units_factor`: K times the release scale's units."""
    from pipeline.publish import provenance
    from upstream_adapters import write_samples

    provenance.forget_sample_record(slug, root)
    shutil.rmtree(root, ignore_errors=True)
    write_samples(slug, root, scale=scale, seed=seed, units_factor=units_factor, **limits)
    provenance.write_sample_record(slug, root, scale, seed, options, units_factor)


# the instance of the repository's .dagster_home: no telemetry, and step processes' own console loggers at INFO (their
# default is DEBUG: a `STEP_WORKER_STARTED` line per step on the terminal); INFO messages still reach the event log
DAGSTER_YAML = "telemetry:\n  enabled: false\npython_logs:\n  python_log_level: INFO\n"


def _quiet_step_processes(path: Path) -> None:
    """Add python_logs.python_log_level to a .dagster_home/dagster.yaml written before it was set."""
    import yaml

    conf = yaml.safe_load(path.read_text()) or {}
    if isinstance(conf, dict) and "python_log_level" not in (conf.get("python_logs") or {}):
        conf.setdefault("python_logs", {})["python_log_level"] = "INFO"
        path.write_text(yaml.safe_dump(conf, sort_keys=False))


def use_repo_dagster_home() -> Path:
    """Runs are recorded in DAGSTER_HOME; unset, the repository's .dagster_home (what `make dev` shows)."""
    import os

    home = Path(os.environ.get("DAGSTER_HOME") or path_in_repo(".dagster_home"))
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists():
        (home / "dagster.yaml").write_text(DAGSTER_YAML)
    elif home.resolve() == path_in_repo(".dagster_home").resolve():
        _quiet_step_processes(home / "dagster.yaml")
    os.environ["DAGSTER_HOME"] = str(home)
    return home


def cmd_ingest(args) -> int:
    from pipeline.ingest.run import command

    from tqdm import tqdm

    args.progress = lambda it: tqdm(it, desc=f"ingest {args.source}", unit="unit")
    return command(args)


def cmd_split(args) -> int:
    from pipeline.split import split_pool_file

    summary = split_pool_file(Path(args.items), Path(args.out), Path(args.config) if args.config else None)
    for slug, s in sorted(summary.get("sources", {}).items()):
        print(
            f"{slug}: {s.get('eval_groups')} eval / {s.get('sft_groups')} sft groups, "
            f"{s.get('eval')} eval / {s.get('sft')} sft items"
        )
    print(f"written: {args.out}/eval.jsonl, sft.jsonl, split_summary.json")
    return 0


def cmd_validate(args) -> int:
    from pipeline.release import writers
    from pipeline.publish.validate import not_a_release, validate_release

    root = Path(args.dir)
    if problem := (
        not_a_release(root, writers.file_names(load_settings()))
        if root.is_dir()
        else f"{root.absolute()} is not a folder"
    ):
        print(f"processbench: error: {problem}", file=sys.stderr)
        return 2
    problems = validate_release(root)
    for p in problems:
        print(f"INVALID: {p}")
    print(f"{args.dir}: {'valid' if not problems else f'{len(problems)} problem(s)'}")
    return 1 if problems else 0


def cmd_diff(args) -> int:
    from pipeline.release.diff import command  # logic lives in pipeline/release/diff.py

    return command(args)


def cmd_reconstruct(args) -> int:
    from pipeline.reconstruct import reconstruct, reconstruct_summary
    from pipeline.release.identity import release_fingerprint

    upstream = _upstream(args.upstream)
    if not upstream:
        raise SystemExit("give at least one --upstream SLUG=PATH")
    cfg = load_settings(upstream=upstream)
    out = Path(args.out).resolve()
    fingerprint = release_fingerprint(Path(args.release), cfg)  # ReleaseIdentityError: one line (main)
    report = reconstruct(
        Path(args.release),
        {s: cfg.sources[s].root for s in upstream},
        cfg,
        out,
        sources=sorted(upstream),
        progress=True,
        fingerprint=fingerprint,
    )
    print(reconstruct_summary(report, out, cfg))
    bad = sum(int(r["missing"]) + int(r["differs"]) for r in report["sources"].values())
    return 1 if bad else 0


def cmd_dev(args) -> int:
    """Run `dg dev` (what superseded `dagster dev`; the project is pyproject.toml's [tool.dg]) as a child that stops
    with us (see assets/supervise.py and docs/running.md). Its virtual environment is named as the active one, so dg does not
    warn that the project's .venv is not activated."""
    import os

    from assets.supervise import supervise

    cmd = [str(Path(sys.executable).with_name("dg")), "dev", "-h", args.host, "-p", str(args.port)]
    pid_file = path_in_repo(".dagster_dev.pid")
    pid_file.write_text(f"{os.getpid()}\n")
    use_repo_dagster_home()
    try:
        return supervise(cmd, env={**os.environ, "VIRTUAL_ENV": sys.prefix}, cwd=path_in_repo("."))
    finally:
        pid_file.unlink(missing_ok=True)


def cmd_validity(args) -> int:
    from pipeline.validity import command  # logic lives in pipeline/validity/

    return command(args)


def cmd_review(args) -> int:
    from pipeline.review import command  # logic lives in pipeline/review.py

    return command(args)


def cmd_score(args) -> int:
    if not args.predictions and (args.circular or not args.step_predictions):
        raise UsageError(
            "--circular needs --predictions"
            if args.circular
            else "give --predictions (multiple choice), --step-predictions (T13 steps) or both"
        )
    if args.circular:  # predictions for the rotated copies: pipeline/scoring/circular.py
        from pipeline.scoring.circular import main as circular_main

        return circular_main(["--release", args.release, "--predictions", args.predictions, "--out", args.out])
    from pipeline.scoring.mcq import main as score_main  # logic lives in pipeline/scoring/mcq.py

    return score_main(
        [
            "--release",
            args.release,
            "--out",
            args.out,
            *(["--predictions", args.predictions] if args.predictions else []),
            *(["--step-predictions", args.step_predictions] if args.step_predictions else []),
            *(["--levels", args.levels] if args.levels else []),
        ]
    )


def cmd_eval(args) -> int:
    """Thin shell over pipeline/evaluate/ (docs/evaluation.md)."""
    from pipeline.evaluate.options import ClientOptions
    from pipeline.evaluate.run import EvalOptions, run_eval, summary_text

    if bool(args.images) == bool(args.upstream):
        raise UsageError("give either --images DIR (what `processbench reconstruct --out` wrote) or --upstream")
    for name in ("concurrency", "retries", "max_tokens", "limit", "image_max_side"):
        if getattr(args, name) is not None and getattr(args, name) < (0 if name in ("retries", "limit") else 1):
            raise UsageError(f"--{name.replace('_', '-')} must be a positive number")
    if not args.timeout > 0:
        raise UsageError("--timeout must be a positive number of seconds")
    upstream = _upstream(args.upstream)
    cfg = load_settings(upstream=upstream)
    client = ClientOptions(
        base_url=args.base_url,
        model=args.model,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        seed=args.seed,
        timeout_s=args.timeout,
        retries=args.retries,
        concurrency=args.concurrency,
        backoff_s=args.backoff,
    )
    opts = EvalOptions(
        release=Path(args.release),
        out=Path(args.out),
        client=client,
        images=Path(args.images) if args.images else None,
        upstream={s: cfg.sources[s].root for s in upstream},
        levels=args.levels,
        families=args.families,
        sources=args.sources,
        tracks=args.tracks,
        limit=args.limit,
        image_max_side=args.image_max_side,
        api_key_env=args.api_key_env,
        progress=not args.no_progress,
        circular=args.circular,
        retry_refused=args.retry_refused,
    )
    try:
        summary = run_eval(opts, cfg)
    except (ValueError, FileNotFoundError) as exc:
        print(f"processbench eval: error: {exc}", file=sys.stderr)
        return 2
    print(summary_text(summary))
    if summary["stopped"]:
        print(f"processbench eval: stopped: {summary['stopped']}", file=sys.stderr)
    print(f"report: {Path(args.out) / 'metrics.md'}; answers: {', '.join(summary['predictions'].values())}")
    if summary["stopped"]:
        return 2
    return 0 if summary["complete"] else 130 if summary["interrupted"] else 1


def cmd_compare(args) -> int:
    """Thin shell over pipeline/scoring/compare.py."""
    from pipeline.scoring.compare import RunError, compare, write_report

    try:
        rep = compare([Path(d) for d in args.runs], load_settings(), args.allow_mixed_releases)
    except RunError as exc:
        print(f"processbench compare: {exc}", file=sys.stderr)
        return 2
    written = write_report(rep, Path(args.out))
    for p in rep["pairs"]:
        d = p["overall"]
        ci = "n/e" if d["ci95"] is None else f"[{d['ci95'][0]:.4f}, {d['ci95'][1]:.4f}]"
        diff = "–" if d["difference"] is None else f"{d['difference']:+.4f}"
        print(f"{p['a']} - {p['b']}: {diff} (95% CI {ci}) on {d['n']} items both answered")
    print(f"written: {', '.join(str(w) for w in written)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """Every subcommand and option, each with its help text (tests/test_cli.py checks that none lacks one)."""
    p = argparse.ArgumentParser(
        prog="processbench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="cmd", required=True)

    b = sub.add_parser("build", help="materialize every asset through Dagster and write the release")
    b.add_argument(
        "--scale",
        choices=["demo", "release"],
        help="demo (small, minutes) or release (the real unit counts and quotas); default: configs/build.yaml",
    )
    b.add_argument("--upstream", action="append", metavar="SLUG=PATH", help="read this source from PATH (repeatable)")
    b.add_argument("--sources", help="comma-separated subset of sources")
    b.add_argument("--samples", action="store_true", help="generate the sample corpora first when missing")
    b.add_argument("--release-dir", help="where the release is published (default: release/)")
    b.add_argument("--work-dir", help="intermediate tables and the frame cache (default: build/work/)")
    b.add_argument(
        "--executor",
        choices=["in_process", "multiprocess", "dask"],
        help="the engine of the one run (default: configs/build.yaml executor.engine)",
    )
    b.add_argument("--max-concurrent", type=int, help="steps at a time (multiprocess) / local Dask workers; 0 = cores")
    b.add_argument("--dask-address", help="scheduler address of an existing Dask cluster (default: a local one)")
    b.add_argument("--config-dir", help="read the configuration from this folder instead of configs/")
    b.add_argument(
        "--variant",
        action="append",
        metavar="TASK=NAME",
        help="build TASK from its template's variant NAME (a key of its `variants`, or default) instead "
        "of the one the file names, e.g. T7=public (repeatable)",
    )
    b.add_argument("--force", action="store_true", help="run every step even when its inputs are unchanged")
    b.add_argument(
        "--verify",
        action="store_true",
        help="read every upstream file again instead of trusting its cached content hash",
    )
    b.set_defaults(func=cmd_build)

    s = sub.add_parser("samples", help="write the sample upstream corpora, one folder per source slug")
    s.add_argument(
        "--scale",
        choices=["demo", "release"],
        default="demo",
        help="demo (a few units per source) or release (the real unit counts); default demo",
    )
    s.add_argument("--out", required=True, help="folder that gets one sub-folder per source (created)")
    s.add_argument("--sources", help="comma-separated subset of sources (default: every source of the build)")
    s.add_argument("--seed", type=int, help="generator seed (default: configs/build.yaml build.samples.seed)")
    s.add_argument(
        "--units-factor",
        default="1",
        metavar="K",
        help="with --scale release: K times the release scale's units per source (GM-100 episodes per task, RH20T "
        "scenes, REASSEMBLE recordings, AIST episodes per task; the quotas stay), K an integer >= 1 or a fraction in "
        "(0, 1] (rounded half up), for the cost curve (bench/bench_cost_curve.py)",
    )
    s.set_defaults(func=cmd_samples)

    from pipeline.source_help import OPTIONS_HELP, IngestHelpFormatter

    i = sub.add_parser(
        "ingest",
        help="run one adapter over a root and write the IR tables + quarantine",
        epilog=OPTIONS_HELP,
        formatter_class=IngestHelpFormatter,
    )
    i.add_argument("--source", required=True, help="source slug (a key of configs/sources.yaml)")
    i.add_argument(
        "--option",
        action="append",
        metavar="KEY=VALUE",
        help="adapter option (repeatable; YAML value), over the build's configured options",
    )
    i.add_argument("--root", required=True, help="the source's root folder (its real layout: docs/upstream-formats.md)")
    i.add_argument("--out", required=True, help="folder for the IR tables and the quarantine (parquet)")
    i.set_defaults(func=cmd_ingest)

    sp = sub.add_parser("split", help="split any item pool (jsonl with source, task_id, split_group_id)")
    sp.add_argument("--items", required=True, help="the item pool (jsonl: source, task_id, split_group_id, ...)")
    sp.add_argument("--out", required=True, help="folder for eval.jsonl, sft.jsonl and split_summary.json")
    sp.add_argument("--config", help="split policy YAML (default: configs/split.yaml)")
    sp.set_defaults(func=cmd_split)

    v = sub.add_parser("validate", help="check a release folder against its schema, manifests and checksums")
    v.add_argument("dir", help="the release folder (release/ by default)")
    v.set_defaults(func=cmd_validate)

    df = sub.add_parser(
        "diff", help="what changed between two releases, by item_uid: items, comparable cells, provenance"
    )
    df.add_argument("old", help="the older release folder")
    df.add_argument("new", help="the newer release folder")
    df.add_argument("--out", help="also write diff.md and diff.json into this folder")
    df.set_defaults(func=cmd_diff)

    va = sub.add_parser("validity", help="audit a release: text-only baselines, shared images, T8/T9 gaps")
    va.add_argument("--release", required=True, help="the release folder")
    va.add_argument("--work-dir", help="the build's work folder (frame cache, IR): run the audit")
    va.add_argument(
        "--human",
        nargs="+",
        metavar="FILE",
        help="verdict files exported from `processbench review` pages: merged into the report by item uid",
    )
    va.add_argument(
        "--drop-unknown",
        action="store_true",
        help="with --human: leave out (and count) verdicts on items not in this release, instead of refusing",
    )
    va.set_defaults(func=cmd_validity)

    rv = sub.add_parser(
        "review", help="human check: one HTML page per source and family (per source for T13) with sampled eval items"
    )
    rv.add_argument("--release", required=True, help="the release folder whose eval items are sampled")
    rv.add_argument("--images", required=True, help="the folder `processbench reconstruct --out` wrote, or its images/")
    rv.add_argument("--out", required=True, help="where the HTML pages go (open index.html from disk)")
    rv.add_argument("--per-cell", type=int, default=100, help="items per (source, family) page (default 100)")
    rv.add_argument("--seed", type=int, help="sampling seed (default: build.release_seed)")
    rv.add_argument(
        "--prefill",
        nargs="+",
        metavar="FILE",
        help="verdict files of an earlier build: pre-fill each annotator's verdicts on the unchanged items (same uid)",
    )
    rv.set_defaults(func=cmd_review)

    r = sub.add_parser("reconstruct", help="rebuild and verify every item's frames from upstream data")
    r.add_argument("--release", required=True, help="the release folder whose items' images are rebuilt")
    r.add_argument(
        "--upstream", action="append", metavar="SLUG=PATH", help="your copy of a source (repeatable; at least one)"
    )
    r.add_argument("--out", default="build/reconstructed", help="where the images go (default build/reconstructed)")
    r.set_defaults(func=cmd_reconstruct)

    sc = sub.add_parser("score", help="score predictions (jsonl item_id, response) against every eval level")
    for opt, what in (("--release", "the release folder"), ("--out", "folder for the report (metrics, plot)")):
        sc.add_argument(opt, required=True, help=what)
    sc.add_argument("--predictions", help="jsonl with item_id and response per eval item")
    sc.add_argument(
        "--step-predictions",
        help="jsonl with item_id and prediction (a list of 1 / -1, or the model's "
        "text with <STEPS>+,-,...</STEPS>) per step eval item (the T13 step track)",
    )
    sc.add_argument(
        "--circular",
        action="store_true",
        help="the predictions answer the CircularEval copies (item_id.c<k>): report circular accuracy "
        "and position consistency beside plain accuracy",
    )
    sc.add_argument("--levels", help="comma-separated eval levels to score, e.g. L2,L3 (default: every level)")
    sc.set_defaults(func=cmd_score)

    _add_eval_parser(sub)

    cp = sub.add_parser(
        "compare", help="several eval runs of one release side by side: accuracies, baselines, paired differences"
    )
    cp.add_argument("runs", nargs="+", metavar="RUN_DIR", help="folders `processbench eval --out` wrote")
    cp.add_argument("--out", required=True, help="folder for compare.md, compare.json and compare.png")
    cp.add_argument(
        "--allow-mixed-releases",
        action="store_true",
        help="compare runs of different releases (release fingerprints) on the items they share (by item_uid)",
    )
    cp.set_defaults(func=cmd_compare)

    d = sub.add_parser("dev", help="start the Dagster UI (stops cleanly on Ctrl-C or SIGTERM)")
    d.add_argument("--host", default="127.0.0.1", help="interface the UI listens on (default 127.0.0.1)")
    d.add_argument("--port", type=int, default=3000, help="port of the UI (default 3000)")
    d.set_defaults(func=cmd_dev)
    return p


def _add_eval_parser(sub) -> None:
    """`processbench eval`: its many client options apart, so build_parser stays one screen of subcommands."""
    from pipeline.evaluate.options import ClientOptions

    dflt = ClientOptions()
    e = sub.add_parser(
        "eval", help="ask an OpenAI-compatible endpoint every eval item, store, score (docs/evaluation.md)"
    )
    e.add_argument("--release", required=True, help="the release folder whose eval items are asked")
    e.add_argument("--images", help="the folder `processbench reconstruct --out` wrote, or its images/")
    e.add_argument(
        "--upstream",
        action="append",
        metavar="SLUG=PATH",
        help="instead of --images: reconstruct (and hash-verify) the frames on the fly (repeatable)",
    )
    e.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8000/v1 (vLLM, SGLang, LMDeploy)")
    e.add_argument("--model", required=True, help="the model name the endpoint serves")
    e.add_argument("--out", required=True, help="responses, predictions.jsonl and the report land here")
    e.add_argument("--concurrency", type=int, default=dflt.concurrency, help="requests in flight at most")
    e.add_argument("--levels", help="comma-separated eval levels (default: every level of the release)")
    e.add_argument(
        "--tracks",
        help="mcq (multiple choice, T1-T12), steps (the T13 step track) or both, comma-separated (default both)",
    )
    e.add_argument("--families", help="comma-separated task ids or names (default: all)")
    e.add_argument("--sources", help="comma-separated source slugs (default: all)")
    e.add_argument("--limit", type=int, help="the first N selected items (by item id)")
    e.add_argument("--max-tokens", type=int, default=dflt.max_tokens, help="completion tokens per answer at most")
    e.add_argument("--temperature", type=float, default=dflt.temperature, help="sampling temperature")
    e.add_argument("--seed", type=int, default=dflt.seed, help="sampling seed sent with every request")
    e.add_argument("--timeout", type=float, default=dflt.timeout_s, help="seconds per request")
    e.add_argument("--retries", type=int, default=dflt.retries, help="retries per item after the first attempt")
    e.add_argument("--backoff", type=float, default=dflt.backoff_s, help="first retry delay in seconds (doubles)")
    e.add_argument("--image-max-side", type=int, help="downscale images whose longer side exceeds PX")
    e.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key")
    e.add_argument("--no-progress", action="store_true", help="no progress bar")
    e.add_argument(
        "--retry-refused",
        action="store_true",
        help="ask refused, truncated and empty answers again (kept and scored as they are otherwise)",
    )
    e.add_argument(
        "--circular",
        action="store_true",
        help="ask every option rotation of each item (MMBench CircularEval, ids <item_id>.c<k>) and "
        "report circular accuracy and position consistency (as `score --circular`)",
    )
    e.set_defaults(func=cmd_eval)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    from pipeline.core.errors import EXPLAINED

    try:
        return args.func(args)
    except EXPLAINED as exc:  # a failure the project explains: its one line, no trace
        print(f"processbench: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
