"""Source adapters: one module per upstream dataset, each reading that source's real on-disk layout into the
episode IR (`ir.py`). No Dagster and nothing of the pipeline in here."""

from __future__ import annotations

import importlib

# slug -> "module:Class". Imported lazily so that one adapter's heavy dependency never slows the others.
ADAPTERS = {
    "gm100": "upstream_adapters.gm100:Gm100Adapter",
    "rh20t": "upstream_adapters.rh20t:Rh20tAdapter",
    "reassemble": "upstream_adapters.reassemble:ReassembleAdapter",
    "aist": "upstream_adapters.aist:AistAdapter",
}

# slug -> "module" of the sample-data generator, each exposing write(out_dir, scale, seed).
SAMPLE_GENERATORS = {
    "gm100": "upstream_adapters.samples.gm100",
    "rh20t": "upstream_adapters.samples.rh20t",
    "reassemble": "upstream_adapters.samples.reassemble",
    "aist": "upstream_adapters.samples.aist",
}


def get_adapter(slug: str, **options):
    """Construct the adapter for `slug` with its options from configs/sources.yaml."""
    if slug not in ADAPTERS:
        raise KeyError(f"unknown source {slug!r}; known: {sorted(ADAPTERS)}")
    module, cls = ADAPTERS[slug].split(":")
    return getattr(importlib.import_module(module), cls)(**options)


def samples_fingerprint(slug: str) -> str:
    """A hash of the generator code of `slug` (its module + the shared pieces): a corpus written by other code is stale."""
    import hashlib
    from pathlib import Path

    here = Path(__file__).parent / "samples"
    names = [f"{slug}.py", *sorted(p.name for p in here.glob(f"{slug}_*.py")), "common.py"]
    data = b"".join((here / name).read_bytes() for name in names)
    return hashlib.sha256(data).hexdigest()[:12]


def write_samples(slug: str, out_dir, scale: str = "demo", seed: int = 0, **layout) -> None:
    """Write the sample corpus of `slug` into `out_dir` (the source root), in the source's real layout; `layout`
    holds the generator's layout options (e.g. layout="flat" for REASSEMBLE, as_archive=True for RH20T)."""
    importlib.import_module(SAMPLE_GENERATORS[slug]).write(out_dir, scale=scale, seed=seed, **layout)
