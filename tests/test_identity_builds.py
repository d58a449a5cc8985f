"""Item identity across builds: the session's demo build against a build that changes one thing (one source left out,
one template's wording, one family's template variant, the split seed). Every item the change does not touch keeps
its uid, every item it touches gets a new one, and `processbench diff` names exactly the cells whose items changed.

Each second build starts from a copy of the session build's work folder, so only the steps the change reaches run.
"What an item is" is judged here from the rows' own columns (frames, labels, question, options, answer, the family's
variant; for T13 the steps), never from the uid function."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from factories import build_demo
from pipeline.release.diff import diff_releases
from pipeline.release.identity import read_identity
from pipeline.release.schema import CHOICE_COLUMNS


def _rebuild(samples, base: Path, out: Path, **kw) -> Path:
    """A build of the demo with one change, from a copy of the base build's work folder."""
    shutil.copytree(base.parent / "work", out / "work", ignore=shutil.ignore_patterns(".build.lock"))
    return build_demo(samples, out, **kw)


def _items(release: Path) -> pl.DataFrame:
    """One row per item of both tracks: uid, cell (track, source, family, place) and what the item is."""
    ident = read_identity(release)
    variants = ident.provenance["template_variants"]
    place = {r["item_id"]: r for r in ident.items.iter_rows(named=True)}
    rows = []
    for rel in sorted(set(ident.items["file"])):
        for r in pl.read_parquet(release / rel).iter_rows(named=True):
            p = place[r["item_id"]]
            if p["track"] == "mcq":
                what = (
                    r["reconstruction_key_json"],
                    r["display_labels_json"],
                    r["question"],
                    tuple(r[c] for c in CHOICE_COLUMNS),
                    r["answer"],
                )
            else:
                what = (
                    r["question"],
                    tuple(r["response"]["steps"]),
                    tuple(r["response"]["process_correctness"]),
                    r["step_reconstruction_keys_json"],
                    r["step_error_kinds_json"],
                )
            rows.append(
                {
                    "item_uid": r["item_uid"],
                    "cell": (
                        p["track"],
                        r["source_slug"],
                        r["task_id"],
                        "sft" if r["split"] == "sft" else (r["eval_level"] or "eval"),
                    ),
                    "what": json.dumps([r["task_id"], variants[r["task_id"]], *what], default=list),
                }
            )
    return pl.DataFrame(rows)


def _check(old_release: Path, new_release: Path) -> tuple[pl.DataFrame, pl.DataFrame, dict]:
    """The uid of an item is the same in both builds exactly when the item is; the diff's changed cells are exactly
    the cells whose items changed. Returns both builds' items and the diff."""
    old, new = _items(old_release), _items(new_release)
    uid_of_old = dict(zip(old["what"], old["item_uid"]))
    uid_of_new = dict(zip(new["what"], new["item_uid"]))
    for what in set(uid_of_old) & set(uid_of_new):
        assert uid_of_old[what] == uid_of_new[what], f"an unchanged item got a new uid: {what[:200]}"
    assert not {uid_of_old[w] for w in set(uid_of_old) - set(uid_of_new)} & set(new["item_uid"])
    assert not {uid_of_new[w] for w in set(uid_of_new) - set(uid_of_old)} & set(old["item_uid"])

    def cells(df: pl.DataFrame) -> dict[tuple, set]:
        out: dict[tuple, set] = {}
        for cell, what in zip(df["cell"].to_list(), df["what"].to_list()):
            out.setdefault(tuple(cell), set()).add(what)
        return out

    co, cn = cells(old), cells(new)
    changed = {c for c in set(co) | set(cn) if co.get(c) != cn.get(c)}
    doc = diff_releases(old_release, new_release)
    reported = {(c["track"], c["source"], c["family"], c["place"]) for c in doc["cells"] if not c["comparable"]}
    assert reported == changed
    assert not doc["identical"] and doc["eval_cells"]["not_comparable"] == len({c for c in changed if c[3] != "sft"})
    return old, new, doc


def _uids(df: pl.DataFrame, keep) -> set[str]:
    return {u for u, c in zip(df["item_uid"], df["cell"].to_list()) if keep(tuple(c))}


def test_a_source_left_out_changes_no_other_sources_items(demo_samples, demo_release, tmp_path):
    new = _rebuild(demo_samples, demo_release, tmp_path / "b", sources=["gm100", "rh20t", "reassemble"])
    old, new_items, doc = _check(demo_release, new)
    assert set(new_items["item_uid"]) == _uids(old, lambda c: c[1] != "aist")
    assert {c["source"] for c in doc["cells"] if not c["comparable"]} == {"aist"}
    assert doc["items"]["moved"] == doc["items"]["added"] == 0
    assert doc["provenance"]["other"]["sources_built"]["new"] == ["gm100", "rh20t", "reassemble"]


def test_one_templates_wording_changes_that_familys_items_only(demo_samples, demo_release, tmp_path):
    from pipeline.settings.config import load_settings
    from pipeline.core.digests import REPO

    configs = tmp_path / "configs"
    shutil.copytree(REPO / "configs", configs)
    t5 = configs / "tasks" / "T5.yaml"
    t5.write_text(t5.read_text().replace("is the NOW frame?", "is the NOW image?"))
    before, after = load_settings().tasks["T5"], load_settings(configs).tasks["T5"]
    worded = {s for s in before.sources if before.for_source(s).question != after.for_source(s).question}
    assert worded
    new = _rebuild(demo_samples, demo_release, tmp_path / "b", config_dir=str(configs))
    old, new_items, doc = _check(demo_release, new)
    touched = lambda c: c[2] == "T5" and c[1] in worded
    assert not _uids(old, touched) & set(new_items["item_uid"])  # every reworded item has a new uid
    assert _uids(old, lambda c: not touched(c)) == _uids(new_items, lambda c: not touched(c))
    assert {(c["family"], c["source"]) for c in doc["cells"] if not c["comparable"]} == {("T5", s) for s in worded}
    assert list(doc["provenance"]["configs"]) == ["tasks.T5"]


def test_one_familys_variant_changes_its_items_and_no_other_sources(demo_samples, demo_release, tmp_path):
    from pipeline.settings.config import load_settings

    fed = set(load_settings().tasks["T7"].sources)
    new = _rebuild(demo_samples, demo_release, tmp_path / "b", variants={"T7": "public"})
    old, new_items, doc = _check(demo_release, new)
    assert not _uids(old, lambda c: c[2] == "T7") & set(new_items["item_uid"])
    assert _uids(old, lambda c: c[1] not in fed) == _uids(new_items, lambda c: c[1] not in fed)
    assert {c["source"] for c in doc["cells"] if not c["comparable"]} <= fed
    assert doc["provenance"]["other"]["template_variants"]["new"]["T7"] == "public"


@pytest.mark.parametrize("seed", [1234])
def test_the_split_seed_moves_items_with_their_uids(demo_samples, demo_release, tmp_path, seed):
    from pipeline.core.digests import REPO

    configs = tmp_path / "configs"
    shutil.copytree(REPO / "configs", configs)
    split = configs / "split.yaml"
    text = split.read_text()
    assert "\n  seed: null" in text
    split.write_text(text.replace("\n  seed: null", f"\n  seed: {seed}", 1))
    new = _rebuild(demo_samples, demo_release, tmp_path / "b", config_dir=str(configs))
    old, new_items, doc = _check(demo_release, new)
    assert doc["items"]["moved"] > 0  # the same items elsewhere: their uids kept (_check), reported as moved
    assert list(doc["provenance"]["configs"]) == ["split"]
