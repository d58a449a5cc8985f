"""Benchmark the split selection: the public rule vs ours, per source and family, with runtimes.

    .venv/bin/python bench/bench_split.py                     # synthetic release-scale pool (real group counts/quotas)
    .venv/bin/python bench/bench_split.py --sources reassemble
    .venv/bin/python bench/bench_split.py --items ITEMS.parquet  # a real items table (source, unit_id|split_group_id,
                                                                   task_id, answer, num_choices)

The synthetic pool: per source the public release's group count and per-family item quotas, spread unevenly over
groups (lognormal group sizes × gamma family affinities, some families absent from a group), with answer letters
balanced per (source, family) by a seeded shuffle, as the items stage does. Seeded: the same pool every run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.settings.config import load_settings
from pipeline.core.seeding import rng as np_rng
from pipeline.release.schema import CHOICE_LETTERS as LETTERS
from pipeline.split import family_sort_key, leaked_groups, load_policy, make_pool, our_rule, public_rule, split_items


def release_shape() -> tuple[dict[str, int], dict[str, dict[str, int]], dict[str, int]]:
    """Groups per source (bench/public_release.yaml), items per (source, family) and options per family (the task
    configs at release scale), each source's families in task order."""
    groups = yaml.safe_load((Path(__file__).with_name("public_release.yaml")).read_text())["groups"]
    tasks = load_settings(scale="release").tasks
    order = sorted(tasks, key=family_sort_key)
    quotas = {s: {t: int(tasks[t].quota[s]) for t in order if s in tasks[t].quota} for s in groups}
    return groups, quotas, {t: int(tasks[t].num_choices) for t in order}


def synthetic_pool(seed: int = 7, sources=None) -> pl.DataFrame:
    groups, quotas, choices = release_shape()
    rows = {"source": [], "split_group_id": [], "task_id": [], "answer": [], "num_choices": []}
    for slug in sources or groups:
        n = groups[slug]
        r = np_rng(seed, "bench-split", slug)
        gids = [f"{slug}_g{i:05d}" for i in range(n)]
        size = r.lognormal(0.0, 0.8, n)
        fams = list(quotas[slug])
        primary = r.integers(0, len(fams), n)  # every group holds at least one item of its primary family
        for f_i, (fam, quota) in enumerate(quotas[slug].items()):
            base = (primary == f_i).astype(np.int64)
            present = (r.random(n) < 0.75) | (base > 0)
            w = size * r.gamma(0.8, 1.0, n) * present
            per_group = base + r.multinomial(quota - int(base.sum()), w / w.sum())
            k = choices[fam]
            letters = np.array([LETTERS[i % k] for i in range(quota)])
            r.shuffle(letters)
            g_of_item = np.repeat(np.arange(n), per_group)
            rows["source"] += [slug] * quota
            rows["split_group_id"] += [gids[g] for g in g_of_item]
            rows["task_id"] += [fam] * quota
            rows["answer"] += letters.tolist()
            rows["num_choices"] += [k] * quota
    return pl.DataFrame(
        rows,
        schema={
            "source": pl.String,
            "split_group_id": pl.String,
            "task_id": pl.String,
            "answer": pl.String,
            "num_choices": pl.Int64,
        },
    )


def fmt(x):
    return "   -  " if x is None else f"{x * 100:6.2f}"


def run(df: pl.DataFrame, policy: dict, seed: int) -> None:
    if "split_group_id" not in df.columns:
        df = df.with_columns(pl.col("unit_id").alias("split_group_id"))
    total_t = total_c = 0.0
    for slug in sorted(df["source"].unique().to_list()):
        sub = df.filter(pl.col("source") == slug)
        pool = make_pool(sub, policy, slug)
        t, c = time.perf_counter(), time.process_time()
        pub = public_rule(pool, policy)
        t_pub, c_pub = time.perf_counter() - t, time.process_time() - c
        t, c = time.perf_counter(), time.process_time()
        ours = our_rule(pool, policy, seed, baseline=pub)
        t_ours, c_ours = time.perf_counter() - t, time.process_time() - c
        total_t += t_pub + t_ours
        total_c += c_pub + c_ours
        tot = pool.counts.sum(0)
        print(
            f"\n== {slug}: {pool.n} groups, {int(tot.sum())} items, eval groups {pool.n_eval} "
            f"(public {int(pub.mask.sum())}, ours {int(ours.mask.sum())}); method {ours.method}"
        )
        print(f"   objective J (shares):  public {pub.share:.6f}   ours {ours.share:.6f}")
        print(f"   objective L (letters): public {pub.letters:.6f}   ours {ours.letters:.6f}")
        print(f"   runtime (wall / cpu): public {t_pub:.2f} / {c_pub:.2f} s, ours {t_ours:.2f} / {c_ours:.2f} s")
        print(
            f"   {'family':6} {'items':>6} {'target':>7} | {'eval share %':>14} {'':>7} | "
            f"{'majority letter %':>18} {'':>7} {'random':>6}"
        )
        print(f"   {'':6} {'':>6} {'':>7} | {'public':>7} {'ours':>7}    | {'public':>7} {'ours':>7}")
        Lp = pool.letters[:, pub.mask, :].sum(1) if pool.letters is not None else None
        Lo = pool.letters[:, ours.mask, :].sum(1) if pool.letters is not None else None
        ep, eo = pool.counts[pub.mask].sum(0), pool.counts[ours.mask].sum(0)
        for t_, fam in enumerate(pool.families):
            mp = Lp[:, t_].max() / Lp[:, t_].sum() if Lp is not None and Lp[:, t_].sum() else None
            mo = Lo[:, t_].max() / Lo[:, t_].sum() if Lo is not None and Lo[:, t_].sum() else None
            print(
                f"   {fam:6} {int(tot[t_]):6d} {pool.target[t_]:7.1f} | "
                f"{fmt(ep[t_] / tot[t_])} {fmt(eo[t_] / tot[t_])}"
                f"    | {fmt(mp)} {fmt(mo)}    {100 / pool.num_choices[t_]:6.2f}"
            )
        print(
            f"   items  {int(tot.sum()):6d} {pool.target_total:7.1f} | {fmt(ep.sum() / tot.sum())} "
            f"{fmt(eo.sum() / tot.sum())}"
        )
        dev_p = np.abs(ep / tot - pool.eval_ratio).max()
        dev_o = np.abs(eo / tot - pool.eval_ratio).max()
        print(f"   max |share − {pool.eval_ratio}|: public {dev_p * 100:.3f} pts, ours {dev_o * 100:.3f} pts")
    print(f"\ntotal selection runtime: wall {total_t:.1f} s, cpu {total_c:.1f} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", help="items parquet or jsonl (default: the synthetic release-scale pool)")
    ap.add_argument("--sources", help="comma-separated slugs (default: all)")
    ap.add_argument("--config", help="split config YAML (default: configs/split.yaml)")
    ap.add_argument("--pool-seed", type=int, default=7)
    ap.add_argument(
        "--full", action="store_true", help="also time split_items (groups, both rules, summary) end to end"
    )
    args = ap.parse_args()
    policy, seed = load_policy(Path(args.config) if args.config else None)
    chosen = [s for s in (args.sources or "").split(",") if s]
    if args.items:
        p = Path(args.items)
        df = pl.read_parquet(p) if p.suffix == ".parquet" else pl.read_ndjson(p, infer_schema_length=None)
        if "source_slug" in df.columns:  # a release table: `source` holds display names there
            df = df.with_columns(pl.col("source_slug").alias("source"))
        if chosen:
            df = df.filter(pl.col("source").is_in(chosen))
    else:
        df = synthetic_pool(args.pool_seed, chosen or None)
    fams = sorted(df["task_id"].unique().to_list(), key=family_sort_key)
    print(f"pool: {df.height} items, sources {sorted(df['source'].unique().to_list())}, families {fams}; seed {seed}")
    run(df, policy, seed)
    if args.full:
        items = df if "unit_id" in df.columns else df.with_columns(pl.col("split_group_id").alias("unit_id"))
        t, c = time.perf_counter(), time.process_time()
        out, summary = split_items(items, None, policy, seed)
        print(
            f"split_items (both rules, summary) on the whole pool: wall {time.perf_counter() - t:.1f} s, "
            f"cpu {time.process_time() - c:.1f} s; eval {summary['eval_items']} / sft {summary['sft_items']} items, "
            f"leaked groups {len(leaked_groups(out))}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
