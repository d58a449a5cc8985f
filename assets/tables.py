"""The build's steps and the tables each writes and reads: ONE registry the Dagster graph, the asset checks, the
input fingerprints and the stale-step planner all derive from (plain Python, no Dagster).

A step is one call of a pipeline.stages function (per source, or over all sources); it writes one or more tables,
each of which is an asset key in the graph (`ir/<slug>/units`, `labels/<slug>/frames`, `candidates/<slug>`,
`items/<slug>`, `split/items`, `release/<file>`...). `reads` lists every table the step's function reads, so the
graph's lineage is what the code does. Schemas come from the registries that already exist: the IR schemas
(upstream_adapters/ir.py), the label tables (pipeline/labels.py), the candidate schema (pipeline/families/common.py)
and the release schema (pipeline/release/schema.py).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import polars as pl

from pipeline.settings.paths import release_dir, work_dir
from pipeline.labels.tables import TABLE_SCHEMAS as LABEL_SCHEMAS
from pipeline.release.files import file_names

if TYPE_CHECKING:
    from pipeline.settings.root import Settings

# What the frames stage adds to a candidate row (pipeline.stages.run_frames): the selected, gated item (no letter:
# the split assigns the letters, pipeline/items/choices.py).
ITEM_COLUMNS = {"item_key": pl.String, "image_hashes_json": pl.String}
NOTES_SCHEMA = {"source": pl.String, "unit_id": pl.String, "note": pl.String}
IR_TABLES = ("units", "frames", "signals", "segments")  # upstream_adapters/ir.py TABLES (tests/test_registries.py)


# The registry names the code it calls and the schemas it checks by module and attribute, imported when first used:
# the planner (assets/fingerprint.py), which a build with nothing to do runs alone, reads the registry without
# importing the stages' code and its libraries (tests/test_imports.py holds it to that).
def _attr(module: str, name: str):
    return getattr(importlib.import_module(module), name)


def stage_call(name: str, *args, module: str = "pipeline.stages") -> Callable:
    """`module.name(cfg, *args)`, the module imported when it is called."""

    def call(cfg):
        return _attr(module, name)(cfg, *args)

    call.__qualname__ = f"{module}.{name}"
    return call


def schema_of(module: str, name: str, *extra: dict) -> Callable[[], dict]:
    """The polars schema `module.name` (a dict of polars dtypes, or a pyarrow schema), with `extra` columns after it;
    resolved when first asked for."""

    @cache
    def resolve() -> dict:
        value = _attr(module, name)
        if not isinstance(value, dict):  # a pyarrow schema: its polars dtypes, without building a table
            import pyarrow as pa

            value = dict(pl.from_arrow(pa.Table.from_batches([], value)).schema)
        out = dict(value)
        for more in extra:
            out.update(more)
        return out

    return resolve


@dataclass(frozen=True)
class TableCheck:
    """One check of a table, declared with the table below (assets/checks.py makes it a Dagster asset check, evaluated
    inside the step that writes the table): `run(cfg)` is a plain function returning (passed, metadata). An ERROR
    check that fails keeps the release from being published; a WARN one (warn=True) is reported.

    What a person reads when it does not pass: the metadata's `sentences` (what fell short or failed, by how much,
    why; its `problems` when it has no sentences of its own) and `advice` (what to do); assets/checks.py prints them
    and keeps the whole metadata in the event log and the work folder."""

    name: str
    description: str
    run: Callable[[dict], tuple[bool, dict]]
    blocking: bool = False
    warn: bool = False
    advice: str = ""


def problems_check(name: str, description: str, find: Callable[[Settings], list[str]], **kw) -> TableCheck:
    """A check that passes when `find(cfg)` (a plain function, e.g. a `stage_call`) returns no problems, each of them
    a sentence."""

    def run(cfg):
        problems = find(cfg)
        return not problems, {"problems": problems[:50], "n_problems": len(problems)}

    return TableCheck(name, description, run, **kw)


def quarantine_check(slug: str) -> TableCheck:
    def run(cfg):
        limit = cfg.build.max_quarantine_share
        shares = _attr("pipeline.stages", "quarantine_shares")(cfg, slug)
        over = {s: v for s, v in shares.items() if v > limit}
        reasons = _attr("pipeline.stages", "quarantine_reasons")
        sentences = [
            f"{s}: {v:.1%} of its units were quarantined at ingest or labels, over the limit of {limit:.1%}"
            + "".join(f"; most often: {why} ({n} units)" for why, n in reasons(cfg, s)[:1])
            for s, v in sorted(over.items())
        ]
        return not over, {"shares": shares, "limit": limit, "over": over, "sentences": sentences}

    return TableCheck(
        "quarantine_share",
        "Quarantined units (ingest, then labels) stay under build.max_quarantine_share of the source's units.",
        run,
        advice=f"ir/{slug}/quarantine.parquet and labels/{slug}_quarantine.parquet give each unit's reason: repair "
        "or download those units again, or raise build.max_quarantine_share (configs/build.yaml) if the loss is known",
    )


def quota_check(slug: str) -> TableCheck:
    def run(cfg):
        short = _attr("pipeline.stages", "shortfall")(cfg, slug)
        return not short, {
            "shortfall": short,
            "sentences": _attr("pipeline.publish.provenance", "shortfall_lines")(short, cfg),
        }

    return TableCheck(
        "quotas_met",
        "Every family reaches its quota for this source (a shortfall is reported, never "
        "padded; it warns rather than fails, since small corpora may lack candidates).",
        run,
        warn=True,
        advice="nothing is padded, and the card, the manifests and task_distribution.csv state each shortfall; a "
        "larger corpus, a lower quota, or a looser rule of those the reason names (min_gap, equal_per_unit in "
        "configs/tasks/T*.yaml; a candidate rule's config key is in the full record's left_out) closes it",
    )


def _no_group_in_both_splits(cfg):
    leaked = _attr("pipeline.stages", "leaked_groups")(cfg)
    sentences = [f"{len(leaked)} split groups have items in eval and in SFT, e.g. {', '.join(leaked[:3])}"]
    return not leaked, {"leaked_groups": leaked[:50], "n_leaked": len(leaked), "sentences": sentences}


def _release_path_free(cfg):
    leaks = _attr("pipeline.stages", "release_path_leaks")(cfg)
    return not leaks, {"leaks": leaks[:50], "problems": leaks[:50], "n_problems": len(leaks)}


SPLIT_BUG = "the release is not published; this is a defect of the split (pipeline/split/): report it with split/"


SPLIT_ITEMS_CHECKS = (
    TableCheck(
        "no_group_in_both_splits",
        "No split group (or merged group) has items on both sides.",
        _no_group_in_both_splits,
        blocking=True,
        advice=SPLIT_BUG + "items.parquet",
    ),
    problems_check(
        "isolation_keys_hold",
        "No isolation key value (RH20T task+scene, ...) and no held-out OOD scene or "
        "task has items on both sides, recomputed from the units' own fields.",
        stage_call("split_isolation_problems"),
        blocking=True,
        advice=SPLIT_BUG + "items.parquet and split/groups.parquet",
    ),
)
SPLIT_SUMMARY_CHECKS = (
    problems_check(
        "eval_group_counts",
        "Per-source eval group counts are the configured round(eval_ratio × groups).",
        stage_call("eval_group_count_problems"),
        advice="the split chose another number of eval groups than configs/split.yaml asks: report it with "
        "split/summary.json",
    ),
    problems_check(
        "eval_level_counts",
        "Every eval item has a level, and the rows per level (L1, L2, L3) match split_summary.json.",
        stage_call("eval_level_problems"),
        advice=SPLIT_BUG + "summary.json and split/items.parquet",
    ),
    problems_check(
        "eval_level_shares",
        "Every configured eval level (L2, L3) holds its share of the source's items (a "
        "level a small corpus cannot fill warns and is recorded in provenance.json and the card).",
        stage_call("eval_level_warnings"),
        warn=True,
        advice="the levels it holds are right, and provenance.json and the card record the gap; a larger corpus or a "
        "smaller item_share under ood in configs/split.yaml changes it",
    ),
)
VALIDITY_CHECKS = (
    problems_check(
        "validity_limits",
        "No family passes its validity limit (configs/validity.yaml): blind text-only "
        "and option-set-only baselines near random or the label prior; shared images; T8/T9 gaps.",
        stage_call("validity_problems"),
        blocking=True,
        advice="the release is not published: the validity report (metadata/validity_report.md of the staging "
        "folder) gives each family's figures; change the family's template (configs/tasks/) rather than the limits "
        "of configs/validity.yaml",
    ),
)
# on the checksums file, written last: the whole release
RELEASE_CHECKS = (
    problems_check(
        "release_valid",
        "The release validates: schema, parquet == jsonl, counts across files, checksums, isolation.",
        stage_call("release_problems"),
        blocking=True,
        advice="the release is not published: the writers and the validator disagree, a defect to report with "
        "`processbench validate` run on the staging folder",
    ),
    TableCheck(
        "release_path_free",
        "No absolute path, this machine's folders, user name or host name in any release file (parquet rows included).",
        _release_path_free,
        blocking=True,
        advice="the release is not published: remove the path, user or host name from the config or upstream text "
        "the named file took it from",
    ),
)


@dataclass(frozen=True)
class Table:
    key: tuple[str, ...]  # the asset key path
    path: str  # relative to the work folder, or to the release folder when root == "release"
    description: str
    # column -> polars dtype, or a function giving it (`schema_of`); None: not a parquet table (json, text)
    schema_of: dict | Callable[[], dict] | None = None
    exact: bool = True  # False: the schema's columns must be there, more may follow
    root: str = "work"
    checks: tuple[TableCheck, ...] = ()  # besides the schema check generated from `schema` (assets/checks.py)
    group: str | None = None  # the UI's asset group when not the step's (the exports of the release step)

    @property
    def name(self) -> str:
        return "/".join(self.key)

    @property
    def parquet(self) -> bool:
        """A table with a schema (a parquet file); known without importing the schema's module."""
        return self.schema_of is not None

    @property
    def schema(self) -> dict | None:
        return self.schema_of() if callable(self.schema_of) else self.schema_of

    def file(self, cfg: Settings) -> Path:
        return (release_dir(cfg) if self.root == "release" else work_dir(cfg)) / self.path


@dataclass(frozen=True)
class Step:
    name: str  # the Dagster op name, e.g. ingest_gm100
    group: str  # the layer, the UI's asset group
    run: Callable[[dict], dict]  # cfg -> summary
    writes: tuple[Table, ...]
    reads: tuple[str, ...]  # table names (Table.name) of other steps
    config: tuple[str, ...]  # configs/ sections that change what the step computes (pipeline.core.digests.config_part)
    description: str
    source: str | None = None
    external: Callable[[dict], Path] | None = field(default=None)  # an input outside the work folder
    publishes: bool = False  # writes into the release's staging folder, published only when every check passes
    # config keys of its `config` sections the step does not read (dotted, `*` = any key at its level): left out of
    # its fingerprint and hidden from it when it runs (assets/fingerprint.py, pipeline/core/digests.py hidden_view)
    hides: tuple[str, ...] = ()


# The templates' text that only the release step reads: it makes the questions from them (pipeline/release/prompts.py
# question_texts), while the steps before it carry each question's fields. Hidden from those steps, so a question edit
# re-runs the release step alone.
QUESTION_TEXT = ("tasks.*.question", "tasks.*.question_changed_from_public")

IR_SCHEMAS = {t: schema_of("upstream_adapters.ir", f"{t.upper()}_SCHEMA") for t in IR_TABLES}
QUARANTINE = schema_of("upstream_adapters.ir", "QUARANTINE_SCHEMA")
CANDIDATES = schema_of("pipeline.families.common", "CANDIDATE_SCHEMA")


def _ir(slug: str, shard: int | None = None) -> tuple[Table, ...]:
    """The IR tables of a source, or of one of its ingest shards (under ir/<slug>/shards/<k>/)."""
    key, folder, of = (
        (("ir", slug), f"ir/{slug}", slug)
        if shard is None
        else (("ir", slug, f"shard{shard}"), f"ir/{slug}/shards/{shard}", f"{slug} shard {shard}")
    )
    tables = [Table((*key, t), f"{folder}/{t}.parquet", f"{of} episode IR: {t}", IR_SCHEMAS[t]) for t in IR_TABLES]
    tables.append(
        Table(
            (*key, "quarantine"),
            f"{folder}/quarantine.parquet",
            f"{of} units ingest could not read, with unit, stage, reason and file",
            QUARANTINE,
            # the merged IR's quarantine (a shard's is merged into it)
            checks=(quarantine_check(slug),) if shard is None else (),
        )
    )
    tables.append(
        Table(
            (*key, "notes"),
            f"{folder}/notes.parquet",
            f"{of}: what the adapter assumed or repaired in units it kept",
            NOTES_SCHEMA,
        )
    )
    return tuple(tables)


def ingest_steps(slug: str, shards: int, ir: tuple[Table, ...], corpus: Table) -> list[Step]:
    """One ingest step, or (sources.<slug>.ingest_shards > 1) one per shard of the units (a stable hash of the unit
    id: pipeline/ingest/run.py shard_of) and the step merging their IR: a big source read by many workers at once."""
    root = lambda cfg: Path(cfg.sources[slug].root)
    what = f"Read {slug} through its adapter into the episode IR and a quarantine of unreadable units."
    if shards == 1:
        return [
            Step(
                f"ingest_{slug}",
                "ir",
                stage_call("run_ingest", slug),
                ir + (corpus,),
                (),
                (f"sources.{slug}",),
                what,
                slug,
                external=root,
            )
        ]
    parts = [_ir(slug, k) for k in range(shards)]
    return [
        Step(
            f"ingest_{slug}_{k}",
            "ir",
            stage_call("run_ingest_shard", slug, k),
            parts[k],
            (),
            (f"sources.{slug}",),
            f"Shard {k} of {shards} of {slug}'s units: {what}",
            slug,
            external=root,
        )
        for k in range(shards)
    ] + [
        Step(
            f"ingest_{slug}",
            "ir",
            stage_call("run_ingest", slug),
            ir + (corpus,),
            tuple(t.name for p in parts for t in p),
            (f"sources.{slug}",),
            f"Merge the IR of {slug}'s {shards} ingest shards, note duplicates across them, fingerprint the corpus.",
            slug,
            external=root,
        )
    ]


def source_steps(slug: str, shards: int = 1) -> list[Step]:
    ir = _ir(slug)
    # read by the items step (its selection key holds the corpus's content fingerprint) and the release (provenance),
    # so not among the IR tables labels and candidates read
    corpus = Table(
        ("ir", slug, "corpus"),
        f"ir/{slug}/corpus.json",
        f"{slug}: the corpus's content fingerprint and origin (sample generator or user root)",
    )
    labels = tuple(
        Table(("labels", slug, t), f"labels/{slug}/{t}.parquet", f"{slug} process labels: {t}", dict(s))
        for t, s in LABEL_SCHEMAS.items()
    )
    # written by the labels step, read by no later step (the units it names have no labels)
    labels_quarantine = Table(
        ("labels", slug, "quarantine"),
        f"labels/{slug}_quarantine.parquet",
        f"{slug} units whose signals made a label rule fail, with the reason",
        QUARANTINE,
        checks=(quarantine_check(slug),),
    )
    candidates = Table(
        ("candidates", slug),
        f"candidates/{slug}.parquet",
        f"{slug}: the over-complete pool of candidate items of every task family",
        CANDIDATES,
    )
    items = (
        Table(
            ("items", slug),
            f"items/{slug}.parquet",
            f"{slug}: the selected items with frames that pass the visual gate and image hashes",
            schema_of("pipeline.families.common", "CANDIDATE_SCHEMA", ITEM_COLUMNS),
            checks=(quota_check(slug),),
        ),
        Table(
            ("gate_quarantine", slug),
            f"items/{slug}_quarantine.parquet",
            f"{slug}: items the visual gate dropped, with the reason",
            QUARANTINE,
        ),
        Table(("shortfall", slug), f"items/{slug}_shortfall.json", f"{slug}: families short of their quota"),
        Table(
            ("item_frames", slug),
            f"items/{slug}_frames.parquet",
            f"{slug}: the frames the items show, with pixel hash and grey thumbnail (read by the validity audit)",
            schema_of("pipeline.frames.extract", "ITEM_FRAMES_SCHEMA"),
        ),
    )
    names = lambda tables: tuple(t.name for t in tables)
    return ingest_steps(slug, shards, ir, corpus) + [
        Step(
            f"labels_{slug}",
            "labels",
            stage_call("run_labels", slug),
            labels + (labels_quarantine,),
            names(ir),
            ("labels", "build"),
            f"Per-frame process labels of {slug} from its IR (configs/labels.yaml).",
            slug,
        ),
        Step(
            f"candidates_{slug}",
            "candidates",
            stage_call("run_candidates", slug),
            (candidates,),
            names(ir) + names(labels),
            # sources.<slug>: its unit word is in the figures of what each family's rules left out
            (f"tasks.{slug}", "labels", "build", f"sources.{slug}"),
            f"Candidate items of every family for {slug} from the templates in configs/tasks/.",
            slug,
            hides=QUESTION_TEXT,
        ),
        Step(
            f"items_{slug}",
            "items",
            stage_call("run_frames", slug),
            items,
            (candidates.name, corpus.name),
            (f"tasks.{slug}", "build", "frames", f"sources.{slug}"),
            f"Select {slug}'s quotas, decode their frames, drop what the visual gate rejects (with replacements), "
            "order the T8/T9 frames, hash the images.",
            slug,
            # it decodes upstream frames: a video replaced under the same unit id leaves the IR and the candidates
            # unchanged, so the upstream listing must make this step run again (the frame cache then decodes only
            # the units whose upstream fingerprint changed)
            external=lambda cfg: Path(cfg.sources[slug].root),
            hides=QUESTION_TEXT,
        ),
    ]


@cache
def _split_items_schema() -> dict:
    from pipeline.families.common import CANDIDATE_SCHEMA
    from pipeline.items.choices import LETTER_COLUMNS

    return {**CANDIDATE_SCHEMA, **ITEM_COLUMNS, **LETTER_COLUMNS, "split": pl.String, "split_group_id": pl.String}


def shared_steps(cfg: Settings, slugs: list[str]) -> list[Step]:
    split = (
        Table(
            ("split", "items"),
            "split/items.parquet",
            "Every item with its split (eval|sft) and split group",
            _split_items_schema,
            exact=False,
            checks=SPLIT_ITEMS_CHECKS,
        ),
        Table(
            ("split", "groups"),
            "split/groups.parquet",
            "Every unit's split group (isolation keys merged) and the unit keys the OOD levels hold out",
            schema_of("pipeline.split", "GROUPS_SCHEMA"),
        ),
        Table(
            ("split", "summary"),
            "split/summary.json",
            "Per-source group and item counts of the split",
            checks=SPLIT_SUMMARY_CHECKS,
        ),
    )
    release = []
    for name, rel in sorted(file_names(cfg).items()):
        schema = (
            schema_of("pipeline.release.schema", "RELEASE_SCHEMA")
            if rel.endswith(".parquet") and name in ("eval_parquet", "sft_parquet")
            else None
        )
        release.append(
            Table(
                ("release", name),
                rel,
                f"release file {rel}",
                schema,
                root="release",
                checks=RELEASE_CHECKS if name == "checksums" else (),
            )
        )
    release.append(
        Table(
            ("release", "validity_report"),
            "metadata/validity_report.json",
            "validity audit: baselines per (source, family), shared images, T8/T9 gaps, problems",
            root="release",
            checks=VALIDITY_CHECKS,
        )
    )
    release += export_tables(cfg)
    units = tuple(f"ir/{s}/units" for s in slugs)
    corpora = tuple(f"ir/{s}/corpus" for s in slugs)
    frames = tuple(f"item_frames/{s}" for s in slugs)
    steps = (
        Table(
            ("steps", "items"),
            "steps/items.parquet",
            "T13 step items (process verification) with their split side, labels and image hashes",
            schema_of("pipeline.steps.rows", "STEP_SCHEMA"),
        ),
        Table(
            ("steps", "summary"),
            "steps/summary.json",
            "Per-source step item and step counts, natural-error share, injected kinds",
            checks=(
                problems_check(
                    "quotas_met",
                    "Every source reaches its T13 step item quota (a shortfall is "
                    "reported with its figures, never padded; it warns: a source with few "
                    "units may hold fewer candidate windows).",
                    stage_call("step_shortfall", module="pipeline.steps.stage"),
                    warn=True,
                    advice="nothing is padded, and the card and the manifests state it; more units, or more windows "
                    "per unit in configs/tasks/T13.yaml, close it",
                ),
            ),
        ),
    )
    step_reads = (
        ("split/items", "split/groups")
        + units
        + tuple(
            f"{layer}/{s}/{t}"
            for s in slugs
            for layer, t in (
                ("ir", "segments"),
                *(("labels", t) for t in ("units", "frames", "arms", "primitives", "segments")),
            )
        )
        + corpora
    )  # the corpus fingerprint: an upstream video replaced under the same unit id decodes again
    return [
        Step(
            "split",
            "split",
            stage_call("run_split"),
            split,
            tuple(f"items/{s}" for s in slugs) + units,
            ("split", "build", "tasks"),
            "Group items by isolation unit and choose eval groups per source, stratified per family and answer "
            "letter (configs/split.yaml); the answer letters, balanced within each split and eval level.",
            hides=QUESTION_TEXT,
        ),
        Step(
            "steps",
            "split",
            stage_call("run_steps", module="pipeline.steps.stage"),
            steps,
            step_reads,
            ("step_tasks", "build", "frames", "release", "exports"),
            "T13 step items from the labels and IR: steps per source, natural and injected errors, each unit on "
            "its MCQ split group's side; the shown frames decoded and hashed (pipeline/steps/, docs/steps.md).",
        ),
        Step(
            "release",
            "release",
            stage_call("run_release"),
            tuple(release),
            ("split/items", "split/summary", "steps/items", "steps/summary") + units + corpora + frames,
            ("*",),  # the release documents every config file
            "The release folder: eval/SFT parquet + jsonl in the public row schema, manifests, metadata, checksums; "
            "built in a staging folder and published only when every check of the build passes.",
            publishes=True,
        ),
    ]


def export_tables(cfg: Settings) -> list[Table]:
    """One asset per registered export (pipeline/exports EXPORTERS), in group `exports`: written by the release step
    (into its staging folder, published with it); the asset's file is the export's main file, its row count comes
    from the step's summary (`export_metadata`)."""
    from pipeline.exports import EXPORTERS

    return [
        Table(("exports", name), ex.main(cfg), ex.description, root="release", group="exports")
        for name, ex in EXPORTERS.items()
    ]


def export_metadata(table: Table, summary: dict) -> dict:
    """The rows and files an export wrote (the release step's summary `exports`), for its materialization."""
    if table.group != "exports":
        return {}
    done = (summary.get("exports") or {}).get(table.key[-1], {})
    return {"dagster/row_count": done["rows"], "export/files": done["files"]} if done else {}


def all_steps(cfg: Settings, slugs: list[str] | None = None) -> list[Step]:
    """Every step of the build in dependency order (the per-source chains, then split and release)."""
    slugs = list(cfg.build.sources) if slugs is None else slugs
    return [st for s in slugs for st in source_steps(s, int(cfg.sources[s].ingest_shards))] + shared_steps(cfg, slugs)


def tables_by_name(steps: list[Step]) -> dict[str, Table]:
    return {t.name: t for st in steps for t in st.writes}
