"""`processbench samples --units-factor K`: each source's release-scale plan scales its units by K (an integer >= 1 or
a fraction in (0, 1]); a bad K is refused in one line before anything is written. Plans only: nothing is encoded."""

from __future__ import annotations

import pytest

from assets.cli import main
from pipeline.publish import provenance
from upstream_adapters import ADAPTERS, sample_units
from upstream_adapters.samples import gm100, reassemble_plan, rh20t

RELEASE_UNITS = {"gm100": 4186, "rh20t": 596, "reassemble": 37, "aist": 200}  # the release scale's counts


def test_release_scale_counts_unchanged():
    assert {s: sample_units(s, 7, 1) for s in ADAPTERS} == RELEASE_UNITS


@pytest.mark.parametrize("k", [0.25, 0.5, 2])
def test_units_scale_with_k(k):
    for slug, n in RELEASE_UNITS.items():
        got = sample_units(slug, 7, k)
        # per-task rounding half up: GM-100's 39-episode tasks give 10 at K = 0.25 (1.3 % over K * n)
        assert abs(got - k * n) <= max(1, 0.02 * k * n), (slug, k, got)


def test_fraction_plans_deterministic_and_keep_the_planted_cases():
    assert gm100.plan("release", 7, 0.25) == gm100.plan("release", 7, 0.25)
    tasks = gm100.plan("release", 7, 0.25)
    assert sum(t.episodes[0].top_codec == "av1" for t in tasks) == sum(1 for k in range(len(tasks)) if k % 25 == 0)
    scenes = rh20t.release_specs(7, 0.25)
    assert scenes == rh20t.release_specs(7, 0.25)
    assert sum(bool(s.omit) for s in scenes) == 2 and any(s.human is not None for s in scenes)
    assert any(s.rating in (0, 1) for s in scenes)
    recs = reassemble_plan.specs_for("release", 7, 0.25)
    assert recs == reassemble_plan.specs_for("release", 7, 0.25)
    assert sum(r.hand_late for r in recs) == 2 and sum(not r.leading_no_action for r in recs) == 2
    assert any(not r.hand for r in recs) and any(r.splits == () for r in recs)
    # the release scale itself keeps its integer plans (K = 1.0 is K = 1)
    assert gm100.plan("release", 7, 1.0) == gm100.plan("release", 7)


@pytest.mark.parametrize(
    "value, says",
    [
        ("0", "got '0'"),
        ("-1", "got '-1'"),
        ("1.5", "got '1.5'"),
        ("abc", "got 'abc'"),
        ("nan", "got 'nan'"),
        ("0.01", "leaves gm100 no episode per task"),
        ("0.05", "leaves reassemble 2 test_split1 recording(s)"),
    ],
)
def test_bad_factor_refused_in_one_line_before_writing(tmp_path, capsys, value, says):
    out = tmp_path / "corpora"
    with pytest.raises(SystemExit) as exc:
        main(["samples", "--scale", "release", "--units-factor", value, "--out", str(out)])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--units-factor" in err and says in err, err
    assert not out.exists()


def test_factor_off_the_release_scale_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["samples", "--scale", "demo", "--units-factor", "0.5", "--out", str(tmp_path / "x")])
    assert "--scale release only" in capsys.readouterr().err


def test_provenance_keeps_a_fraction(tmp_path):
    root = tmp_path / "aist"
    root.mkdir()
    assert provenance.write_sample_record("aist", root, "release", 7, None, 0.25)["units_factor"] == 0.25
    assert provenance.sample_record("aist", root)["units_factor"] == 0.25
    assert "units_factor" not in provenance.write_sample_record("aist", root, "release", 7, None, 1)
