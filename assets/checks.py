"""What the UI shows of each table (row count, column schema, a short preview) and the asset checks.

The schema checks are generated from the table registry (assets/tables.py), one per table that has a schema, as PUDL
generates its checks from its metadata; the rest check what a schema cannot say (quarantine share, quotas, split
isolation and counts, release validity and path-freedom) and are declared next to their table there
(`Table.checks`). The check functions are plain functions of cfg, evaluated inside the step that writes their asset.
"""

import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import dagster as dg
import polars as pl
import pyarrow.parquet as pq

from pipeline.core.io import write_json
from pipeline.settings.paths import work_dir
from pipeline.release.schema import DESCRIPTIONS

from .tables import Step, Table, TableCheck

from pipeline.settings.root import Settings

PREVIEW_ROWS = 5
PREVIEW_CELL = 40


def schema_problems(table: Table, cfg: Settings) -> list[str]:
    """Missing columns, columns of another dtype, and (for exact tables) columns the schema does not name."""
    path = table.file(cfg)
    if not path.is_file():
        return [f"{table.path}: missing"]
    try:
        got = dict(pl.read_parquet_schema(path))
    except Exception as exc:  # noqa: BLE001 - an unreadable file is the defect to report
        return [f"{table.path}: unreadable parquet ({type(exc).__name__}: {exc})"]
    out = [f"{table.path}: column {c!r} missing" for c in table.schema if c not in got]
    out += [
        f"{table.path}: column {c!r} is {got[c]}, expected {t}"
        for c, t in table.schema.items()
        if c in got and got[c] != t
    ]
    if table.exact:
        out += [f"{table.path}: unexpected column {c!r}" for c in got if c not in table.schema]
    return out


def _cell(v) -> str:
    text = str(v).replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= PREVIEW_CELL else text[: PREVIEW_CELL - 1] + "…"


def preview_markdown(df: pl.DataFrame) -> str:
    head = df.head(PREVIEW_ROWS)
    lines = ["| " + " | ".join(head.columns) + " |", "|" + "---|" * len(head.columns)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in head.iter_rows()]
    return "\n".join(lines)


# text tables of the release: one row per line (.jsonl items, .txt split groups, checksums.sha256 files), a CSV after
# its header line
LINE_TABLES = {".jsonl": 0, ".txt": 0, ".csv": 1, ".sha256": 0}


def _line_rows(path, header: int) -> int:
    with open(path, "rb") as fh:
        return max(0, sum(1 for line in fh if line.strip()) - header)


def table_metadata(table: Table, cfg: Settings) -> dict:
    path = table.file(cfg)
    meta: dict = {"path": dg.MetadataValue.path(table.path)}
    if not path.is_file():
        return meta
    if path.suffix != ".parquet":  # a parquet file without a registered schema (the step files) has its footer too
        if path.suffix in LINE_TABLES:
            meta["dagster/row_count"] = _line_rows(path, LINE_TABLES[path.suffix])
        return meta
    # from the parquet footer and the first rows: a step's tables can hold millions of rows (IR signals)
    meta["dagster/row_count"] = pq.ParquetFile(path).metadata.num_rows
    # the release schema's column descriptions (pipeline/release/schema.py), shown in the UI's column list
    meta["dagster/column_schema"] = dg.TableSchema(
        columns=[
            dg.TableColumn(name=c, type=str(t), description=DESCRIPTIONS.get(c) if table.root == "release" else None)
            for c, t in pl.read_parquet_schema(path).items()
        ]
    )
    meta["preview"] = dg.MetadataValue.md(preview_markdown(pl.read_parquet(path, n_rows=PREVIEW_ROWS)))
    return meta


# ------------------------------------------------------------------------------------------ the checks
@dataclass(frozen=True)
class Check:
    """One asset check: evaluated inside the step that writes its asset (a check as a step of its own would cost a
    process start each under the multiprocess executor), so `run(cfg)` is a plain function returning
    (passed, metadata)."""

    asset: str  # Table.name
    name: str
    description: str
    run: Callable[[dict], tuple[bool, dict]]
    blocking: bool = False
    severity: dg.AssetCheckSeverity = dg.AssetCheckSeverity.ERROR
    advice: str = ""  # what to do when it does not pass

    def spec(self) -> dg.AssetCheckSpec:
        return dg.AssetCheckSpec(
            self.name, asset=dg.AssetKey(self.asset.split("/")), description=self.description, blocking=self.blocking
        )

    def evaluate(self, cfg: Settings) -> dg.AssetCheckResult:
        """The check's result: its own metadata (the full record, also written to the work folder while it does not
        pass: `record_path`), plus `sentences` (what a person reads), `what_to_do` and `record`."""
        passed, meta = self.run(cfg)
        words = {} if passed else {"sentences": sentences(meta), "what_to_do": self.advice}
        path = record_path(cfg, self.asset, self.name)
        if passed:
            path.unlink(missing_ok=True)
        else:
            record = {"asset": self.asset, "check": self.name, "severity": self.severity.value, **meta, **words}
            write_json(path, record)
            words["record"] = path.relative_to(work_dir(cfg)).as_posix()
        meta = {k: (v if isinstance(v, (int, float, str)) else dg.MetadataValue.json(v)) for k, v in meta.items()}
        meta |= {k: (dg.MetadataValue.json(v) if isinstance(v, list) else v) for k, v in words.items()}
        return dg.AssetCheckResult(
            asset_key=dg.AssetKey(self.asset.split("/")),
            check_name=self.name,
            passed=bool(passed),
            severity=self.severity,
            metadata=meta,
        )


CHECKS_DIR = "checks"  # under the work folder: the full record of every check that does not pass, one JSON each


def record_path(cfg: Settings, asset: str, name: str) -> Path:
    return work_dir(cfg) / CHECKS_DIR / asset / f"{name}.json"


def sentences(meta: dict) -> list[str]:
    """What a check that does not pass says, one sentence per finding: its own `sentences`, else its `problems`
    (and how many more there are), else its other metadata in words."""
    if meta.get("sentences"):
        return [str(s) for s in meta["sentences"]]
    problems = [str(p) for p in meta.get("problems") or []]
    more = int(meta.get("n_problems", len(problems))) - len(problems)
    if problems:
        return problems + ([f"and {more} more"] if more > 0 else [])
    return [f"{k}: {v}" for k, v in meta.items() if isinstance(v, (int, float, str))] or ["it did not pass"]


# a printed line at most this long (the terminal's lines: no dict or list repr, nothing past LINE_MAX)
LINE_WIDTH, LINE_MAX, SHOWN = 118, 200, 5


def check_lines(kind: str, asset: str, name: str, said: list[str], advice: str, record: str | None = None) -> list[str]:
    """A check that did not pass as lines a person reads: `check warning: <asset> <check>`, a bullet per sentence
    (the first SHOWN; the rest are counted), what to do, and where the full record is; wrapped under LINE_MAX."""
    lines = [f"check {kind}: {asset} {name}"]
    for text in said[:SHOWN]:
        lines += textwrap.wrap(
            text, LINE_WIDTH, initial_indent="  - ", subsequent_indent="    ", break_on_hyphens=False
        )
    if len(said) > SHOWN:
        lines.append(f"  - and {len(said) - SHOWN} more")
    if advice:
        lines += textwrap.wrap(
            f"what to do: {advice}", LINE_WIDTH, initial_indent="  ", subsequent_indent="    ", break_on_hyphens=False
        )
    if record:
        lines.append(f"  full record: {record} in the work folder, and the run's event log")
    return [ln if len(ln) <= LINE_MAX else ln[: LINE_MAX - 1] + "…" for ln in lines]


def _schema_check(table: Table) -> Check:
    def run(cfg):
        problems = schema_problems(table, cfg)
        return not problems, {"problems": problems[:50], "n_problems": len(problems)}

    return Check(
        table.name,
        "schema",
        f"{table.path} has the registered columns and dtypes{' (and no others)' if table.exact else ''}.",
        run,
        advice="the step wrote other columns than its table declares (assets/tables.py): run the build again with "
        "--force; if it stays, the step's code and the registry disagree, a defect to report",
    )


def _declared(table: Table, check: TableCheck) -> Check:
    return Check(
        table.name,
        check.name,
        check.description,
        check.run,
        blocking=check.blocking,
        severity=dg.AssetCheckSeverity.WARN if check.warn else dg.AssetCheckSeverity.ERROR,
        advice=check.advice,
    )


def checks_for(step: Step) -> list[Check]:
    """The checks of the tables a step writes: generated schema checks, then those declared with each table
    (assets/tables.py `Table.checks`)."""
    return [_schema_check(t) for t in step.writes if t.parquet] + [
        _declared(t, c) for t in step.writes for c in t.checks
    ]


def publish_problems(cfg: Settings, steps: list[Step]) -> list[str]:
    """The ERROR checks of these steps (every step but the release) that fail on the work folder as it is now: the
    release step publishes only when this is empty. Recomputed rather than taken from this run, because a step the
    planner skipped (unchanged) may have failed its checks in an earlier run."""
    out = []
    for step in steps:
        for check in checks_for(step):
            if check.severity == dg.AssetCheckSeverity.ERROR and not check.run(cfg)[0]:
                out.append(f"{check.asset}:{check.name}")
    return out
