"""release/croissant.json: Croissant 1.0 metadata (core fields, one record set per release file: each eval level
and SFT, named by its Hugging Face split (L1, L2, L3, train) and keyed by split_group_id + item_id, and the
responsible-AI fields), written by hand as plain JSON-LD and checked by
mlcroissant in the tests, so the build itself does not need mlcroissant."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pathlib import Path

import polars as pl

from pipeline.release import writers
from pipeline.exports import common

if TYPE_CHECKING:
    from pipeline.settings.root import Settings

_CONTEXT = {
    "@language": "en",
    "@vocab": "https://schema.org/",
    "sc": "https://schema.org/",
    "cr": "http://mlcommons.org/croissant/",
    "rai": "http://mlcommons.org/croissant/RAI/",
    "dct": "http://purl.org/dc/terms/",
    "prov": "http://www.w3.org/ns/prov#",
    "citeAs": "cr:citeAs",
    "column": "cr:column",
    "conformsTo": "dct:conformsTo",
    "data": {"@id": "cr:data", "@type": "@json"},
    "dataType": {"@id": "cr:dataType", "@type": "@vocab"},
    "examples": {"@id": "cr:examples", "@type": "@json"},
    "extract": "cr:extract",
    "field": "cr:field",
    "fileProperty": "cr:fileProperty",
    "fileObject": "cr:fileObject",
    "fileSet": "cr:fileSet",
    "format": "cr:format",
    "includes": "cr:includes",
    "isLiveDataset": "cr:isLiveDataset",
    "jsonPath": "cr:jsonPath",
    "key": "cr:key",
    "md5": "cr:md5",
    "parentField": "cr:parentField",
    "path": "cr:path",
    "recordSet": "cr:recordSet",
    "references": "cr:references",
    "regex": "cr:regex",
    "repeated": "cr:repeated",
    "replace": "cr:replace",
    "separator": "cr:separator",
    "source": "cr:source",
    "subField": "cr:subField",
    "transform": "cr:transform",
}
_TYPES = {
    pl.Utf8: "sc:Text",
    pl.String: "sc:Text",
    pl.Int64: "sc:Integer",
    pl.Int32: "sc:Integer",
    pl.Boolean: "sc:Boolean",
    pl.Float64: "sc:Float",
    pl.Float32: "sc:Float",
}


def _type(name: str, dtype) -> dict:
    """A column's Croissant dataType (a list: its items' type, `repeated`)."""
    inner = dtype.inner if isinstance(dtype, pl.List) else dtype
    t = _TYPES.get(inner) or _TYPES.get(type(inner))
    if t is None:
        raise ValueError(f"croissant: column {name} has type {dtype}, which has no Croissant type here")
    return {"dataType": t, **({"repeated": True} if isinstance(dtype, pl.List) else {})}


def _record_set(part: common.Part, file_id: str) -> dict:
    rs, df = part.name, part.df
    fields = []
    for name, dtype in df.schema.items():
        src = {"fileObject": {"@id": file_id}, "extract": {"column": name}}
        if isinstance(dtype, pl.Struct):  # the step track's `response` {steps, process_correctness}
            fields.append(
                {
                    "@type": "cr:Field",
                    "@id": f"{rs}/{name}",
                    "name": name,
                    "source": src,
                    "subField": [
                        {
                            "@type": "cr:Field",
                            "@id": f"{rs}/{name}/{f.name}",
                            "name": f.name,
                            **_type(f"{name}.{f.name}", f.dtype),
                            "source": {**src, "transform": {"jsonPath": f.name}},
                        }
                        for f in dtype.fields
                    ],
                }
            )
            continue
        fields.append({"@type": "cr:Field", "@id": f"{rs}/{name}", "name": name, **_type(name, dtype), "source": src})
    return {
        "@type": "cr:RecordSet",
        "@id": rs,
        "name": rs,
        "description": f"{df.height} items of the {part.split} table"
        + (f", eval level {part.level}" if part.level else "")
        + f" (Hugging Face split `{rs}`).",
        "key": [{"@id": f"{rs}/split_group_id"}, {"@id": f"{rs}/item_id"}],
        "field": fields,
    }


def croissant(tables: dict[str, pl.DataFrame], release_dir: Path, cfg: Settings) -> dict:
    ec = cfg.exports
    files = writers.file_names(cfg)
    snames = writers.source_names(cfg)
    order = writers.source_order(cfg)
    distribution, record_sets = [], []
    for part in common.parts(tables, cfg):
        rel = part.file(files[f"{part.split}_parquet"])
        fid = rel.replace("/", "_")
        distribution.append(
            {
                "@type": "cr:FileObject",
                "@id": fid,
                "name": fid,
                "contentUrl": rel,
                "encodingFormat": "application/x-parquet",
                "sha256": writers.sha256_file(Path(release_dir) / rel),
            }
        )
        record_sets.append(_record_set(part, fid))
    from pipeline.exports.steps import step_record_sets  # (it imports pipeline.exports)

    step_files, step_sets = step_record_sets(release_dir, cfg, _record_set)  # the T13 step track
    distribution += step_files
    record_sets += step_sets
    licences = " ".join(ec.licences[s] for s in order if s in ec.licences)
    return {
        "@context": _CONTEXT,
        "@type": "sc:Dataset",
        "conformsTo": "http://mlcommons.org/croissant/1.0",
        "name": ec.dataset_name,
        "description": ec.intended_use,
        "version": ec.version,
        "license": licences,
        "url": f"https://huggingface.co/datasets/{ec.hub_repo}",
        "citeAs": ec.citation.strip(),
        "keywords": ["robotics", "manipulation", "visual question answering", "multiple choice", "benchmark"],
        "isLiveDataset": False,
        "distribution": distribution,
        "recordSet": record_sets,
        "rai:dataUseCases": ec.intended_use,
        "rai:dataLimitations": ec.limitations,
        "rai:dataBiases": ec.biases,
        "rai:dataCollection": " ".join(f"{snames[s]}: {ec.provenance[s]}" for s in order if s in ec.provenance),
        "rai:dataCollectionType": "Derived from existing robot-manipulation datasets (no new recordings).",
        "rai:personalSensitiveInformation": "None added: the release carries no pixels or participant data; "
        "frames are rebuilt from the sources under their terms.",
        "rai:dataReleaseMaintenancePlan": f"Versioned releases ({cfg.release.release_version}); "
        "every file is covered by checksums.sha256.",
        "prov:wasDerivedFrom": [
            {
                "@type": "sc:Dataset",
                "name": snames[s],
                "license": ec.licences.get(s, ""),
                "description": ec.provenance.get(s, ""),
            }
            for s in order
        ],
    }
