"""Typed settings: one pydantic model per file in configs/, every model `extra="forbid"`.

    BuildFile     configs/build.yaml      (section `build`)
    SourcesFile   configs/sources.yaml    (section `sources`: slug -> SourceEntry)
    LabelsFile    configs/labels.yaml     (section `labels`)   — models in pipeline/settings/labels.py
    SplitFile     configs/split.yaml      (section `split`)
    FramesFile    configs/frames.yaml     (section `frames`)
    ReleaseFile   configs/release.yaml    (section `release`)
    TaskFile      configs/tasks/T<n>.yaml (one per task family)

`pipeline.settings.config.load_settings()` validates each file with its model into one frozen `Settings` (root.py):
code reads `cfg.labels.speed.for_source("gm100").span`. To add a key: add a field (type and default) to the model
of its file below; an undeclared key fails at load naming the file, the key path and the allowed keys. Per-source
maps are keyed by the adapter registry's slugs (and `default` in templates); a model lists them in `by_source`.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, Optional, Union

from pydantic import ConfigDict, Field


from pipeline.settings.step_gates import ValiditySteps
from pipeline.settings.types import BySource, SlugOrDefault  # noqa: F401 - re-exported
from pipeline.settings.types import OneOrPerSource, PerSource, Slug, Strict, TaskId


# ================================================================================================ configs/build.yaml


class BuildSamples(Strict):
    seed: int = 7
    encoder_timeout_s: float = Field(300.0, gt=0)  # per sample video and attempt; a hung encoder is killed
    encoder_attempts: int = Field(2, ge=1)  # attempts per video before the generation fails naming the file


class BuildItems(Strict):
    gate_margin: float = Field(0.05, ge=0)  # select this share above each quota (frames stage)
    max_gate_rounds: int = Field(5, ge=1)  # rounds of replacements for what the visual gate dropped


class BuildExecutor(Strict):
    engine: Literal["in_process", "multiprocess", "dask"] = "multiprocess"
    max_concurrent: int = Field(0, ge=0)  # steps at a time / local Dask workers; 0 = number of cores
    dask_address: Optional[str] = None  # an existing Dask scheduler; null = a local cluster
    priority: dict[Slug, int] = {}  # source -> Dagster step priority (higher first when several wait)
    native_threads: Optional[int] = Field(1, ge=1)  # threads per BLAS / OpenMP pool in each build process; null =
    # the libraries' default (pool.limit_native_threads)
    source_workers: int = Field(0, ge=0)  # processes the step track's sources are drafted on side by side (0 =
    # cores; 1 = one after another in the step's process)


class IrLimits(Strict):
    """Sane ranges at the IR boundary (upstream_adapters/ir.py validate_unit): a unit outside is quarantined."""

    fps: list[float] = Field([1.0, 1000.0], min_length=2, max_length=2)  # nominal fps of the primary camera, [min, max]
    rating: list[int] = Field([-1, 9], min_length=2, max_length=2)  # RH20T metadata.json rating, [min, max]
    duration_max_s: float = Field(86400.0, gt=0)  # span of the primary-camera clock
    position_abs_max: float = Field(1000.0, gt=0)  # |pos_x/y/z| (m, or rad for joint-angle proxies)
    speed_abs_max: float = Field(1000.0, gt=0)  # |speed|
    gripper_abs_max: float = Field(100000.0, gt=0)  # |gripper_effort|, |gripper_width|
    force_abs_max: float = Field(100000.0, gt=0)  # |force| (N)


class InputLimits(Strict):
    """Bounds on what one upstream file may declare (upstream_adapters/limits.py InputLimits), checked
    before anything is allocated: a file past one costs its unit, quarantined naming the file and the bound."""

    max_video_samples: int = Field(5_000_000, gt=0)  # samples one video track declares (MP4 sample table)
    max_hdf5_dataset_bytes: int = Field(2 << 30, gt=0)  # declared size of one HDF5 dataset read whole
    max_image_pixels: int = Field(50_000_000, gt=0)  # width x height of one encoded image, from its header
    max_metadata_bytes: int = Field(64 << 20, gt=0)  # one metadata / list file or JSON archive member
    max_json_depth: int = Field(64, gt=0, le=900)  # nesting of one JSON document (below CPython's limit)


class BuildFile(Strict):
    release_seed: int = 42
    scale: str = "demo"  # a key of quota_scale: demo | release
    sources: list[Slug]
    work_dir: str = "build/work"
    release_dir: str = "release"
    samples: BuildSamples = BuildSamples()
    quota_scale: dict[str, float] = {"demo": 0.02, "release": 1.0}
    max_quarantine_share: float = Field(0.25, ge=0, le=1)
    items: BuildItems = BuildItems()
    executor: BuildExecutor = BuildExecutor()
    ir_limits: IrLimits = IrLimits()
    input_limits: InputLimits = InputLimits()


# ================================================================================================ configs/sources.yaml


class ArchiveLimits(Strict):
    """Bounds on reading archives (upstream_adapters/limits.py): a member past them is refused before it is
    inflated and its unit quarantined; an archive expanding past max_archive_bytes is not read further."""

    max_member_bytes: int = Field(4 << 30, gt=0)  # one member's uncompressed size
    max_compression_ratio: float = Field(200.0, gt=1)  # uncompressed / compressed size of one member
    max_archive_bytes: int = Field(1 << 40, gt=0)  # what one archive may expand to in total


class AdapterOptions(Strict):
    """Keyword options of the adapter's constructor (each adapter checks its own); the ones shared by several
    adapters are typed here."""

    model_config = ConfigDict(extra="allow")
    omit_unset: ClassVar[frozenset[str]] = frozenset({"archive_limits"})
    archive_limits: Optional[ArchiveLimits] = None

    def options(self) -> dict:  # the keyword options as the adapter's constructor takes them
        return self.model_dump()


class SourceEntry(Strict):
    name: str  # display name (GM-100, ...)
    unit_type: Literal["episode", "recording"]
    root: str  # relative to the repository; {scale} = build.scale
    adapter: AdapterOptions = AdapterOptions()  # keyword options of the adapter's constructor
    ingest_shards: int = Field(1, ge=1, le=4096)  # ingest steps its units are spread over (stable hash of the id)


SourcesFile = dict[Slug, SourceEntry]

# ================================================================================================ configs/split.yaml


UnitKey = Literal[
    "task_id",
    "operator_id",
    "scene_id",
    "config_id",
    "taxonomy",  # IR unit fields a key may name
    "content_hash",
]


class SplitSource(Strict):
    group_unit: str
    merge_keys: list[Union[UnitKey, list[UnitKey]]] = []  # a unit field, or a tuple of fields (composite key)
    task_weights: dict[TaskId, float] = {}


class SplitObjective(Strict):
    zero_penalty: float = 2.5
    items_weight: float = 0.35
    letter_weight: float = 1.0
    balance_on: Literal["answer_text", "answer"] = "answer_text"


class SplitPublicRule(Strict):
    seed: int = 42
    restarts: int = Field(8, ge=1)
    swap_passes: int = Field(4, ge=0)
    swap_candidates: int = Field(24, ge=1)


class SplitOurs(Strict):
    exact_max_combinations: int = 3_000_000
    exact_chunk: int = 100_000
    max_sweeps: int = 50
    restarts_budget: int = 7_000_000
    min_restarts: int = 1
    max_restarts: int = 16
    ils_budget: int = 20_000_000
    min_ils: int = 0
    max_ils: int = 100
    ils_kick: int = 3
    letter_l1_weight: float = 0.5
    letter_candidates: int = 64
    cap_penalty: float = 100.0
    share_slack: float = 0.01
    cap_at_public: bool = True
    families_not_worse_than_public: bool = False
    max_family_deviation_pts: Optional[float] = Field(None, gt=0)  # null = no bound on the worst family share


class OodLevel(Strict):
    key: Literal["task_id", "operator_id", "scene_id", "config_id", "taxonomy"]
    item_share: float = Field(gt=0, lt=1)
    families: list[TaskId] = []  # L3 only: families never trained on
    omit_unset: ClassVar[frozenset[str]] = frozenset({"families"})


class OodSource(Strict):
    L2: Optional[OodLevel] = None
    L3: Optional[OodLevel] = None
    omit_unset: ClassVar[frozenset[str]] = frozenset({"L2", "L3"})


class OodBalance(Strict):
    enabled: bool = True  # choose the held-out values that balance the level's answer labels
    restarts: int = Field(16, ge=0)  # seeded random starts of the local search, beside the seeded draw
    max_sweeps: int = Field(50, ge=1)
    size_weight: float = Field(0.1, ge=0)  # per unit of (items − goal) / goal above the goal
    max_over_goal: float = Field(1.0, ge=0)  # items ≤ max((1 + this) · goal, (1 + max_over_draw) · the draw's)
    max_over_draw: float = Field(0.1, ge=0)


class SplitOod(Strict):
    enabled: bool = False
    balance: OodBalance = OodBalance()
    sources: dict[Slug, OodSource] = {}


class SplitFile(Strict):
    eval_ratio: float = Field(0.15, gt=0, lt=1)
    seed: Optional[int] = None  # null = build.release_seed
    rule: Literal["ours", "public"] = "ours"
    split_policy: str = ""
    sources: dict[Slug, SplitSource] = {}
    default_source: SplitSource = SplitSource(group_unit="split_group_id")
    objective: SplitObjective = SplitObjective()
    public_rule: SplitPublicRule = SplitPublicRule()
    ours: SplitOurs = SplitOurs()
    ood: SplitOod = SplitOod()
    workers: int = Field(0, ge=0)  # processes the sources' searches run on (0 = cores)


# ================================================================================================ configs/frames.yaml


class FramesCache(Strict):
    dir: str = "frame_cache"  # under build.work_dir
    png_compression: int = Field(1, ge=0, le=9)
    png_filter: Literal["none", "sub", "up", "avg", "paeth", "fast", "all"] = "up"
    check_pixels_on_lookup: bool = True  # decode + hash every cache hit (false: CRC/key only on lookup)


class FramesImage(Strict):
    max_side: Optional[int] = Field(640, ge=1)  # null = native size


class FramesStats(Strict):
    thumb_size: int = Field(16, ge=1)


class FramesGate(Strict):
    black_max_mean: Optional[float] = 10.0  # null = off
    flat_max_std: Optional[float] = 2.0
    identical: bool = True
    near_identical_max_mad: Optional[float] = 0.5
    near_identical_exempt_tasks: list[TaskId] = []


class ReconstructionSource(Strict):
    dataset: str = ""
    root: str = ""
    frames: str = ""


class FramesReconstruction(Strict):
    report_file: str = "reconstruction_report.json"
    images_dir: str = "images"
    sources: dict[Slug, ReconstructionSource] = {}


class FramesFile(Strict):
    version: int = 1
    decoder: Literal["auto", "pyav", "decord"] = "auto"
    decoder_threads: int = Field(1, ge=0)
    workers: int = Field(0, ge=0)  # 0 = number of cores; 1 = in-process
    mp_context: Literal["forkserver", "spawn", "fork"] = "forkserver"
    in_flight_per_worker: int = Field(2, ge=1)
    cache: FramesCache = FramesCache()
    image: FramesImage = FramesImage()
    stats: FramesStats = FramesStats()
    gate: FramesGate = FramesGate()
    reconstruction: FramesReconstruction = FramesReconstruction()


# ================================================================================================ configs/release.yaml


class ReleaseFiles(Strict):
    """Release-relative posix file names, one per artefact."""

    eval_parquet: str = "splits/processbench_eval.parquet"
    eval_jsonl: str = "splits/processbench_eval.jsonl"
    sft_parquet: str = "splits/processdata_sft.parquet"
    sft_jsonl: str = "splits/processdata_sft.jsonl"
    split_summary: str = "metadata/split_summary.json"
    eval_manifest: str = "metadata/eval_manifest.json"
    sft_manifest: str = "metadata/sft_manifest.json"
    task_distribution: str = "metadata/task_distribution.csv"
    schema_: str = Field("metadata/schema.md", alias="schema")
    reconstruction: str = "metadata/reconstruction.md"
    prompt_templates: str = "metadata/prompt_templates.md"
    split_groups_eval: str = "metadata/split_groups_eval.txt"
    split_groups_sft: str = "metadata/split_groups_sft.txt"
    provenance: str = "metadata/provenance.json"
    steps_eval_parquet: str = "splits/processbench_steps_eval.parquet"  # T13 step track (docs/steps.md)
    steps_eval_jsonl: str = "splits/processbench_steps_eval.jsonl"
    steps_sft_parquet: str = "splits/processdata_steps_sft.parquet"
    steps_sft_jsonl: str = "splits/processdata_steps_sft.jsonl"
    steps_manifest: str = "metadata/steps_manifest.json"
    checksums: str = "checksums.sha256"
    model_config = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True)


class ReleaseFile(Strict):
    release_version: str
    builder_version: str
    split_version: str
    prompt_version: str
    item_id_prefix: str
    float_decimals: int = Field(4, ge=0)
    hf_split_names: dict[Literal["eval", "sft"], str] = {"eval": "test", "sft": "train"}
    files: ReleaseFiles = ReleaseFiles()
    documents: list[str] = ["prompt_templates", "reconstruction", "provenance"]
    task_names: dict[TaskId, str] = {}  # only for a task whose template has no task_name
    max_file_bytes: int = Field(16 << 30, gt=0)  # the validator reads no release file larger (pipeline/validate_files)


# ================================================================================================ configs/tasks/T<n>.yaml


class Window(Strict):
    """Which frames an item shows, relative to its anchor / segment / unit (the keys a family reads)."""

    offsets: Optional[list[int]] = None
    centers: Optional[list[float]] = None
    relative: Optional[list[float]] = None
    shifts: Optional[list[float]] = None
    margin_ratio: Optional[float] = None
    min_margin: Optional[int] = None
    min_step: Optional[int] = None
    mode: Optional[Literal["grid", "segment_midpoints"]] = None
    step_sec: Optional[float] = None
    min_sep_sec: Optional[float] = None
    max_gap_steps: Optional[int] = None
    margin_frac: Optional[float] = None
    gaps: Optional[list[int]] = None
    # T5 step view: `strip` frames spanning the step start -> end, then the query frame (marked)
    strip: Optional[int] = Field(None, ge=2)
    query_min_gap: Optional[int] = Field(None, ge=0)  # frames between the query and every strip frame
    min_step_sec: Optional[float] = Field(None, ge=0)  # shorter steps: boundaries uncertain, skipped
    edge_margin_sec: Optional[float] = Field(None, ge=0)  # steps this close to the unit's ends may be cut: skipped
    # T7 recognition: `relative` fractions of [start, decisive moment] (RH20T: the episode end)
    until_decisive: Optional[bool] = None
    windows_per_unit: Optional[int] = Field(None, ge=1)  # every unit used gives exactly this many windows
    same_task_pools: Optional[bool] = None  # T7: success and failure in equal numbers per task and scene
    # T8/T9: consecutive frames must lie in different contact runs (before grasp / held / after release)
    state_change: Optional[Literal["contact", "pixels"]] = None
    # the families test which keys a window has: a key the file leaves out stays out
    omit_unset: ClassVar[frozenset[str]] = frozenset(
        {
            "offsets",
            "centers",
            "relative",
            "shifts",
            "margin_ratio",
            "min_margin",
            "min_step",
            "mode",
            "step_sec",
            "min_sep_sec",
            "max_gap_steps",
            "margin_frac",
            "gaps",
            "strip",
            "query_min_gap",
            "min_step_sec",
            "edge_margin_sec",
            "until_decisive",
            "windows_per_unit",
            "same_task_pools",
            "state_change",
        }
    )


class Candidates(Strict):
    pool_factor: Optional[OneOrPerSource(Union[int, float])] = None
    stride: Optional[OneOrPerSource(int)] = None
    boundary_margin: Optional[OneOrPerSource(int)] = None
    cap_per_label: Optional[OneOrPerSource(int)] = None
    cap_per_unit: Optional[OneOrPerSource(int)] = None
    by_source: ClassVar[frozenset[str]] = frozenset(
        {"pool_factor", "stride", "boundary_margin", "cap_per_label", "cap_per_unit"}
    )


class Distractors(Strict):
    policy: Literal["all", "neighbours", "pairs", "context", "permutations", "uniform"] = "all"
    order: Optional[list[str]] = None  # neighbours: process order
    hard: Optional[dict[str, list[str]]] = None  # pairs: answer -> hard distractors
    exclude_current: bool = True  # context (T11)
    exclude_neighbours: bool = True  # context (T12)


class Prompt(Strict):
    header: list[str] = []


class RenderLabel(Strict):
    font: str = "HERSHEY_SIMPLEX"
    scale: float = 1.0
    thickness: int = 1
    color: list[int] = [255, 255, 255]
    background: list[int] = [0, 0, 0]
    position: Literal["top_left"] = "top_left"
    margin: int = 0


class Render(Strict):
    kind: Literal["labelled_frames", "panels"]
    size: Optional[Union[int, list[int]]] = None  # null = native size
    gap: int = 0  # panels: pixels between them
    label: RenderLabel = RenderLabel()


class TaskFile(Strict):
    task_id: TaskId
    task_name: Optional[str] = None  # public name; else release.yaml task_names
    name_aliases: list[str] = []
    legacy_alias: Optional[OneOrPerSource(str)] = None  # null = the task id
    input_type: Literal["single_frame", "frame_sequence", "labelled_frames", "panel_composite"]
    num_choices: int = Field(ge=2, le=6)  # at most len(pipeline.release.schema.CHOICE_LETTERS)
    sources: list[Slug]
    quota: dict[Slug, int]  # release-scale quota per source
    question: OneOrPerSource(str)
    labels: Optional[PerSource(dict[str, str])] = None  # closed label set: label -> choice text
    frames: PerSource(Window)
    candidates: Candidates = Candidates()
    min_gap: OneOrPerSource(int) = 0
    balance_labels: OneOrPerSource(bool) = False
    equal_per_unit: OneOrPerSource(bool) = (
        False  # every unit used gives the same number of items (pipeline/items/selection.py)
    )
    distractors: Distractors = Distractors()
    display_labels: Optional[list[str]] = None
    choice_order: Optional[Literal["canonical"]] = None
    prompt: Optional[Prompt] = None
    render: Optional[Render] = None
    require_motion_between: bool = False
    window_in_run: Optional[PerSource(bool)] = None  # T4
    eligible_arm_types: Optional[PerSource(list[str])] = None  # T4
    per_arm: Optional[PerSource(bool)] = None  # T6
    question_changed_from_public: Optional[str] = None  # why the question differs from the public one (prompt docs)
    variant: str = "default"  # a key of `variants` (pipeline.settings.config.apply_variant) or default
    step_name: Optional[OneOrPerSource(str)] = None  # T5: how the question names the step ({text}, {arm_pattern})
    exclude_cameras: list[str] = []  # cameras (wrist views) a family never shows
    # T8/T9: every two frames of an item differ by at least this grey-thumbnail MAD (the frames stage's gate drops
    # the item otherwise: frames that look alike cannot be put in order); null = no minimum
    min_pixel_distance: Optional[OneOrPerSource(Optional[float])] = None
    by_source: ClassVar[frozenset[str]] = frozenset(
        {
            "legacy_alias",
            "question",
            "labels",
            "frames",
            "min_gap",
            "balance_labels",
            "equal_per_unit",
            "window_in_run",
            "eligible_arm_types",
            "per_arm",
            "step_name",
            "min_pixel_distance",
        }
    )


# ----------------------------------------------------------------------------------------- validity.yaml
class ValidityLimits(Strict):
    blind_over_random: float = Field(ge=0)
    blind_over_prior: float = Field(ge=0)
    option_only_over_reference: float = Field(ge=0)
    exact_shared_fraction: Optional[float] = Field(None, ge=0, le=1)  # null = reported, not checked
    near_shared_fraction: Optional[float] = Field(None, ge=0, le=1)
    metadata_over_reference: float = Field(0.03, ge=0)  # a model-facing column alone - reference
    row_count_over_reference: Optional[float] = Field(0.03, ge=0)  # a unit's row count - reference (null: reported)


_LIMIT_NAME = Literal[
    "blind_over_random",
    "blind_over_prior",
    "option_only_over_reference",
    "exact_shared_fraction",
    "near_shared_fraction",
    "metadata_over_reference",
    "row_count_over_reference",
]


class ValidityBagOfWords(Strict):
    C: float = Field(1.0, gt=0)
    max_iter: int = Field(200, ge=1)


class ValidityNearDuplicate(Strict):
    hamming: int = Field(4, ge=0, le=64)


class ValidityTemporal(Strict):
    families: list[TaskId] = ["T8", "T9"]
    min_median_gap_s: PerSource(float) = {"default": 0.0}
    min_median_visual_diff: float = Field(0.0, ge=0)
    by_source: ClassVar[frozenset[str]] = frozenset({"min_median_gap_s"})


class ValidityRowCountNull(Strict):
    permutations: int = Field(200, ge=0)  # row-count shuffles among groups per cell; 0 = no null
    quantile: float = Field(0.99, gt=0, lt=1)  # the null's quantile the row count must clear (plus its limit)


class ValidityHuman(Strict):
    ci: float = Field(0.95, gt=0, lt=1)  # Wilson interval of human accuracy per cell
    min_judgments: int = Field(20, ge=1)  # fewer: the cell is not called decidable


class ValidityFile(Strict):
    min_eval_items: int = Field(30, ge=1)
    balance_tolerance: float = Field(0.05, ge=0)
    limits: ValidityLimits
    level_limits: dict[Literal["L1", "L2", "L3"], dict[_LIMIT_NAME, Optional[float]]] = {}  # per level, over `limits`
    prior_reference_levels: list[Literal["L1", "L2", "L3"]] = ["L2", "L3"]  # reference >= the cell's own label share
    bag_of_words: ValidityBagOfWords = ValidityBagOfWords()
    near_duplicate: ValidityNearDuplicate = ValidityNearDuplicate()
    temporal: ValidityTemporal = ValidityTemporal()
    human: ValidityHuman = ValidityHuman()
    steps: ValiditySteps = ValiditySteps()
    row_count_null: ValidityRowCountNull = ValidityRowCountNull()


# ----------------------------------------------------------------------------------------- exports.yaml
class ExportsFiles(Strict):
    card: str
    croissant: str
    llamafactory_eval: str
    llamafactory_sft: str
    llamafactory_info: str
    swift_eval: str
    swift_sft: str
    vlmevalkit_eval: str
    vlmevalkit_circular: str
    lmms_eval_dir: str
    grpo_sft: str
    grpo_eval: str
    visualprocessbench_eval: str = "exports/visualprocessbench/processbench_steps_eval.jsonl"  # T13, docs/steps.md
    visualprocessbench_sft: str = "exports/visualprocessbench/processdata_steps_sft.jsonl"


class ExportsScore(Strict):
    bootstrap_samples: int = Field(1000, ge=1)
    seed: int = 20260101
    ci: float = Field(0.95, gt=0, lt=1)
    bare_letter_fallback: bool = True  # accept a bare letter when no <ANSWER> tag is given
    min_ci_groups: int = Field(5, ge=2)  # fewer split groups in a slice: its interval is not estimable (null)


class ExportsFile(Strict):
    dataset_name: str
    pretty_name: str
    hub_repo: str
    version: str
    images_prefix: str = "images"  # folder of `processbench reconstruct --out` the exports point into
    dir: str = "exports"
    citation: str
    licences: dict[Slug, str]  # per-source licence terms spelled out on the card
    intended_use: str
    limitations: str
    biases: str
    provenance: dict[Slug, str]
    files: ExportsFiles
    score: ExportsScore = ExportsScore()


from pipeline.settings.labels import LabelsFile  # noqa: E402  (its own file: the largest model)
from pipeline.settings.steps import StepTaskFile  # noqa: E402,F401  (configs/tasks/T13.yaml, the step track)

FILE_MODELS: dict[str, Any] = {
    "build": BuildFile,
    "sources": SourcesFile,
    "labels": LabelsFile,
    "split": SplitFile,
    "frames": FramesFile,
    "release": ReleaseFile,
    "validity": ValidityFile,
    "exports": ExportsFile,
}
