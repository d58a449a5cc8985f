"""The fault inventory (bench/fault_kinds.yaml) is in step with the repository: every test it names exists, every
tamper the campaign plants is one of its kinds, and the campaign's check refuses an inventory that is not (a test or
case that does not exist, a planted case no kind names, a kind nothing plants)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from pipeline.settings.config import load_settings

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture(scope="module")
def campaign():
    spec = importlib.util.spec_from_file_location("fault_campaign", BENCH / "fault_campaign.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_inventory_names_only_tests_that_exist_and_every_tamper(campaign):
    kinds = campaign.load_inventory()
    named = {c for k in kinds for c in k["cases"]}
    assert campaign.inventory_problems(kinds, named) == []
    assert set(campaign._tampers(load_settings())) <= named
    assert {k["group"] for k in kinds} == set(campaign.GROUPS)
    assert sum(isinstance(k["issue"], int) for k in kinds) >= 40  # every failure issue 30 names has its kind


def test_an_inventory_out_of_step_is_refused(campaign):
    kinds = campaign.load_inventory()
    named = {c for k in kinds for c in k["cases"]}
    first = dict(kinds[0], tests=[*kinds[0]["tests"], "tests/test_publish.py::test_that_is_not_there"])
    nothing = {"id": "unplanted", "issue": 4, "group": "fault", "kind": "x", "tests": [], "cases": []}
    odd = dict(kinds[1], id=kinds[0]["id"], group="misc", issue=12)
    problems = campaign.inventory_problems(
        [first, odd, nothing, *kinds[2:]], (named - {"export: an answer changed"}) | {"a case no kind names"}
    )
    assert any("test_that_is_not_there does not exist" in p for p in problems)
    assert any("'export: an answer changed' is not planted" in p for p in problems)
    assert any("'a case no kind names' is in no kind" in p for p in problems)
    assert any(p.startswith("unplanted: no test and no campaign case") for p in problems)
    assert any("id twice" in p for p in problems) and any("group 'misc'" in p for p in problems)
    assert any("issue 12" in p for p in problems)
