"""Issue 40 on the demo release: the card, the manifests and task_distribution.csv give every (source, family) and
every source of the step track with its delivered count and quota, each shortfall with its reason, all from the one
record in provenance.json; the validator fails a planted wrong count in any of them."""

from __future__ import annotations

import csv
import json
import shutil

import polars as pl

from pipeline.release import writers
from pipeline.release.quotas import counts, recorded_quotas
from pipeline.publish.validate import validate_release
from pipeline.settings.config import load_settings

CFG = load_settings(scale="demo")
FILES = writers.file_names(CFG)


def _manifests(release) -> list[str]:
    levels = sorted(p.relative_to(release).as_posix() for p in (release / "metadata").glob("eval_L*_manifest.json"))
    return [FILES["eval_manifest"], FILES["sft_manifest"], *levels]


def test_the_card_csv_and_manifests_give_every_cell_and_why(demo_release):
    cells = recorded_quotas(demo_release, CFG)
    short = [c for c in cells if c.get("short")]
    assert short, "the demo corpus falls short in some cells (REASSEMBLE T7 among them)"
    assert {c["task_id"] for c in cells} >= {"T1", "T12", "T13"}
    # every item file of both tracks (each eval level, SFT, the step files): what each cell says it delivers
    held = counts(*[pl.read_parquet(p) for p in sorted((demo_release / "splits").glob("*.parquet"))])
    assert {(c["source"], c["task_id"]): c["delivered"] for c in cells if c["delivered"]} == held
    card = (demo_release / "README.md").read_text(encoding="utf-8")
    rows = [ln for ln in card.split("## Quotas", 1)[1].split("\n## ", 1)[0].splitlines() if ln.startswith("| ")]
    assert len(rows) == len(cells) + 1  # the header, then a line per cell
    for c in short:  # both counts and the reason
        (line,) = [ln for ln in rows if f"| {c['short']:,} short: {c['reason']} |" in ln]
        assert f"| {c['delivered']:,} | {c['quota']:,} |" in line
    for rel in _manifests(demo_release):
        assert json.loads((demo_release / rel).read_text())["quotas"] == cells, rel
    head, *lines = list(csv.reader((demo_release / FILES["task_distribution"]).read_text().splitlines()))
    by_task = {r[0]: dict(zip(head, r)) for r in lines}
    for c in short:
        said = by_task[c["task_id"]]["shortfall_reason"]
        assert f"{c['delivered']:,} of {c['quota']:,} ({c['short']:,} short): {c['reason']}" in said
    for task in {c["task_id"] for c in cells}:
        mine = [c for c in cells if c["task_id"] == task]
        assert by_task[task]["delivered"] == str(sum(c["delivered"] for c in mine))
        assert by_task[task]["quota"] == str(sum(c["quota"] for c in mine))


def test_a_planted_wrong_count_fails_the_validator(demo_release, tmp_path):
    """A wrong count in the record (provenance.json) fails against the rows; one in a copy (a manifest, the CSV, the
    card) fails against the record. Checksums are written again after each plant: the count itself is caught."""
    release = tmp_path / "release"
    shutil.copytree(demo_release, release)
    prov = release / FILES["provenance"]
    doc = json.loads(prov.read_text())
    cell = next(c for c in doc["quotas"] if c.get("short"))
    doc["quotas"] = [c | {"delivered": c["delivered"] + 1} if c is cell else c for c in doc["quotas"]]
    prov.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    writers.write_checksums(release, CFG)
    problems = validate_release(release, CFG, leaks=False)
    assert any(
        f"{cell['source']} {cell['task_id']} delivered {cell['delivered'] + 1}, the release files" in p
        for p in problems
    )

    shutil.rmtree(release)
    shutil.copytree(demo_release, release)
    sft = release / FILES["sft_manifest"]  # the copies: a manifest's quota, the CSV's sum, the card's line
    m = json.loads(sft.read_text())
    m["quotas"][0]["quota"] += 1
    sft.write_text(json.dumps(m, indent=2, sort_keys=True) + "\n")
    path = release / FILES["task_distribution"]
    head, *rows = list(csv.reader(path.read_text().splitlines()))
    rows[0][head.index("delivered")] = str(int(rows[0][head.index("delivered")]) + 1)
    with path.open("w", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows([head, *rows])
    card = release / "README.md"
    c = next(c for c in recorded_quotas(release, CFG) if c.get("short"))
    old = f"| {c['delivered']:,} | {c['quota']:,} | {c['short']:,} short:"
    assert old in card.read_text()
    card.write_text(card.read_text().replace(old, f"| {c['delivered'] + 1:,} | {c['quota']:,} | {c['short']:,} short:"))
    writers.write_checksums(release, CFG)
    problems = validate_release(release, CFG, leaks=False)
    assert any(p.startswith(f"{FILES['sft_manifest']}: quotas = ") for p in problems), problems
    assert any(p.startswith(f"{FILES['task_distribution']}: differs from the eval rows") for p in problems), problems
    assert any(p.startswith("README.md: differs from the export") for p in problems), problems


def test_every_short_cell_names_the_rule_that_limited_its_pool(demo_release):
    """Issue 40: a short family's reason says why its candidate pool is the size it is, from the figures its
    generator recorded (the frames stage's shortfall record `left_out`): the rule that left out the largest share of
    what it looked at is named, with its counts (REASSEMBLE T7: the pairing of failures with successes; AIST T3: the
    calibrated-direction rule). T13's reason is the step track's own."""
    cells = recorded_quotas(demo_release, CFG)
    records = {
        (r["source"], r["task_id"]): r
        for p in sorted((demo_release.parent / "work" / "items").glob("*_shortfall.json"))
        for r in json.loads(p.read_text())
    }
    short = [c for c in cells if c.get("short") and c["task_id"] in CFG.tasks]
    assert {("reassemble", "T7"), ("aist", "T3")} <= {(c["source"], c["task_id"]) for c in short}
    for c in short:
        rules = [r for r in records[(c["source"], c["task_id"])]["left_out"] if r["excluded"]]
        assert rules, c  # something limited the pool, and the record says what
        top = max(rules, key=lambda r: r["excluded"] / r["considered"])
        said = f"of {top['considered']:,} {top['what']}, {top['excluded']:,}"
        assert said in c["reason"] and f"({top['name']})" in c["reason"], (c, top)
    named = {(c["source"], c["task_id"]): c["reason"] for c in short}
    assert "(all success) had no segment of the other outcome" in named[("reassemble", "T7")]
    assert named[("reassemble", "T7")].endswith("(same_task_pools)")
    assert "so are not asked about (calibrated_direction)" in named[("aist", "T3")]
