"""Source adapters: one module per upstream dataset, each reading that source's real on-disk layout into the
episode IR (`ir.py`). No Dagster and nothing of the pipeline in here."""

from __future__ import annotations

import importlib
import re

# slug -> "module:Class". Imported lazily so that one adapter's heavy dependency never slows the others.
ADAPTERS = {
    "gm100": "upstream_adapters.gm100.adapter:Gm100Adapter",
    "rh20t": "upstream_adapters.rh20t.adapter:Rh20tAdapter",
    "reassemble": "upstream_adapters.reassemble.adapter:ReassembleAdapter",
    "aist": "upstream_adapters.aist.adapter:AistAdapter",
}

# slug -> "module" of the sample-data generator, each exposing write(out_dir, scale, seed).
SAMPLE_GENERATORS = {
    "gm100": "upstream_adapters.samples.gm100",
    "rh20t": "upstream_adapters.samples.rh20t",
    "reassemble": "upstream_adapters.samples.reassemble",
    "aist": "upstream_adapters.samples.aist",
}


def register(slug: str, adapter: str, samples: str | None = None, *, replace: bool = False) -> None:
    """Add a source to the registry (a plugin, a test): `adapter` = "module:Class", `samples` = the module of its
    sample-data generator (write(out_dir, scale, seed)). This registry is the one list of sources: IR validation, the
    per-source keys of configs/ and the prompts all read it, so a registered slug needs no other code change."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", slug) or slug == "default":
        raise ValueError(f"source slug {slug!r} must be lower-case letters, digits and _ (and not 'default')")
    if not re.fullmatch(r"[\w.]+:\w+", adapter):
        raise ValueError(f"adapter of {slug!r} must be 'module:Class', got {adapter!r}")
    if slug in ADAPTERS and ADAPTERS[slug] != adapter and not replace:
        raise ValueError(f"source {slug!r} is already registered as {ADAPTERS[slug]}")
    ADAPTERS[slug] = adapter
    if samples:
        SAMPLE_GENERATORS[slug] = samples


def unregister(slug: str) -> None:
    """Remove a registered source (tests that registered a toy one)."""
    ADAPTERS.pop(slug, None)
    SAMPLE_GENERATORS.pop(slug, None)


def get_adapter(slug: str, input_limits=None, **options):
    """Construct the adapter for `slug` with its options from configs/sources.yaml; `input_limits` (the build's
    declared-size bounds, configs/build.yaml build.input_limits, put into every source's options by the config
    loader) becomes `adapter.input_limits`, shared by every adapter (limits.py InputLimits)."""
    if slug not in ADAPTERS:
        raise KeyError(f"unknown source {slug!r}; known: {sorted(ADAPTERS)}")
    module, cls = ADAPTERS[slug].split(":")
    adapter = getattr(importlib.import_module(module), cls)
    valid = _option_names(adapter)
    unknown = sorted(set(options) - valid) if valid is not None else []
    if unknown:
        raise AdapterOptionError(
            f"{slug}: unknown adapter option(s) {', '.join(unknown)}; valid options: "
            f"{', '.join(sorted(valid)) or '(none)'} (sources.{slug}.adapter in "
            "configs/sources.yaml, or --option KEY=VALUE)"
        )
    adapter = adapter(**options)
    if input_limits is not None:
        from .limits import InputLimits

        adapter.input_limits = InputLimits.of(input_limits)
    return adapter


class AdapterOptionError(TypeError):
    """An adapter option the adapter does not have (a typo): named with the valid ones."""


def _option_names(adapter) -> set[str] | None:
    """The keyword options of an adapter's __init__ (None when it takes **kwargs: anything goes)."""
    import inspect

    params = inspect.signature(adapter.__init__).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params if p.name != "self" and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}


def samples_fingerprint(slug: str) -> str:
    """A hash of the generator code of `slug` (its module + the shared pieces): a corpus written by other code is stale.
    Import statements are left out: a module the generator imports moved to another package changes no corpus."""
    import hashlib
    from pathlib import Path

    here = Path(__file__).parent / "samples"
    names = [f"{slug}.py", *sorted(p.name for p in here.glob(f"{slug}_*.py")), "common.py"]
    data = b"".join(_without_imports((here / name).read_text(encoding="utf-8")).encode() for name in names)
    return hashlib.sha256(data).hexdigest()[:12]


def _without_imports(code: str) -> str:
    """Python source without its import statements (every line of each, wherever it stands)."""
    import ast

    drop = {
        i
        for node in ast.walk(ast.parse(code))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for i in range(node.lineno - 1, node.end_lineno)
    }
    return "".join(line for i, line in enumerate(code.splitlines(keepends=True)) if i not in drop)


def write_samples(
    slug: str,
    out_dir,
    scale: str = "demo",
    seed: int = 0,
    encoder_timeout_s: float | None = None,
    encoder_attempts: int | None = None,
    units_factor: int | float = 1,
    **layout,
) -> None:
    """Write the sample corpus of `slug` into `out_dir` (the source root), in the source's real layout; `layout`
    holds the generator's layout options (e.g. layout="flat" for REASSEMBLE, as_archive=True for RH20T).
    encoder_timeout_s / encoder_attempts: limits of every video encode (configs/build.yaml build.samples).
    `units_factor` K (release scale): K times the release scale's units (GM-100 episodes per task, RH20T scenes,
    REASSEMBLE test_split1 recordings, AIST episodes per task; an integer >= 1 or a fraction in (0, 1]), for
    measuring how the build's cost grows."""
    from .samples.common import encoder_limits

    if units_factor != 1:
        layout["units_factor"] = units_factor
    with encoder_limits(encoder_timeout_s, encoder_attempts):
        importlib.import_module(SAMPLE_GENERATORS[slug]).write(out_dir, scale=scale, seed=seed, **layout)


def sample_units(slug: str, seed: int = 0, units_factor: int | float = 1) -> int | None:
    """Units the release-scale sample corpus of `slug` holds with units factor K, from its plan alone (nothing is
    encoded); a ValueError naming the source when K is refused; None for a generator that does not say."""
    from .samples.common import units_factor as checked

    count = getattr(importlib.import_module(SAMPLE_GENERATORS[slug]), "release_units", None)
    return count(seed, checked(units_factor)) if count else None
