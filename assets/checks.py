"""What the UI shows of each table (row count, column schema, a short preview) and the asset checks.

The schema checks are generated from the table registry (assets/tables.py), one per table that has a schema, as PUDL
generates its checks from its metadata; the rest check what a schema cannot say (quarantine share, quotas, split
isolation and counts, release validity and path-freedom) and are declared next to their table there
(`Table.checks`). The check functions are plain functions of cfg, evaluated inside the step that writes their asset.
"""

from dataclasses import dataclass
from typing import Callable

import dagster as dg
import polars as pl
import pyarrow.parquet as pq

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


# text tables of the release: one row per line (.jsonl items, .txt split groups), a CSV after its header line
LINE_TABLES = {".jsonl": 0, ".txt": 0, ".csv": 1}


def _line_rows(path, header: int) -> int:
    with open(path, "rb") as fh:
        return max(0, sum(1 for line in fh if line.strip()) - header)


def table_metadata(table: Table, cfg: Settings) -> dict:
    path = table.file(cfg)
    meta: dict = {"path": dg.MetadataValue.path(table.path)}
    if not path.is_file():
        return meta
    if table.schema is None:
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

    def spec(self) -> dg.AssetCheckSpec:
        return dg.AssetCheckSpec(
            self.name, asset=dg.AssetKey(self.asset.split("/")), description=self.description, blocking=self.blocking
        )

    def evaluate(self, cfg: Settings) -> dg.AssetCheckResult:
        passed, meta = self.run(cfg)
        meta = {k: (v if isinstance(v, (int, float, str)) else dg.MetadataValue.json(v)) for k, v in meta.items()}
        return dg.AssetCheckResult(
            asset_key=dg.AssetKey(self.asset.split("/")),
            check_name=self.name,
            passed=bool(passed),
            severity=self.severity,
            metadata=meta,
        )


def _schema_check(table: Table) -> Check:
    def run(cfg):
        problems = schema_problems(table, cfg)
        return not problems, {"problems": problems[:50]}

    return Check(
        table.name,
        "schema",
        f"{table.path} has the registered columns and dtypes{' (and no others)' if table.exact else ''}.",
        run,
    )


def _declared(table: Table, check: TableCheck) -> Check:
    return Check(
        table.name,
        check.name,
        check.description,
        check.run,
        blocking=check.blocking,
        severity=dg.AssetCheckSeverity.WARN if check.warn else dg.AssetCheckSeverity.ERROR,
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
