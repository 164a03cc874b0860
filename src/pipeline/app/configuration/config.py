"""Structured config schema of the pipeline (registered in Hydra's ConfigStore).

The YAML files under ``conf/`` (shipped inside the package as ``pipeline/conf``) are merged
onto these dataclasses, so a misspelt key or a value of the wrong type fails at start-up.
Unknown option names of a config group (``dataset=foo``) fail in Hydra itself, which lists
the valid choices.

Pluggable groups share one shape: ``_target_`` (the dotted path of any importable callable,
built by :mod:`pipeline.app.configuration.instantiate`) plus ``params`` (its keyword arguments), so a new
dataset, encoder, clustering, concept source, CAV fitter or explainer is one
``conf/<group>/<option>.yaml`` file and never a change to this schema.
See ``docs/pipeline.md``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

CONFIG_DIR = Path(__file__).resolve().parents[2] / "conf"
"""Where ``config.yaml`` and the config groups live (package data)."""


def project_root() -> str:
    """The repository root when running from a source checkout, else the current directory."""
    here = Path(__file__).resolve().parents[4]
    if (here / "pyproject.toml").exists() and (here / "src" / "pipeline").is_dir():
        return str(here)
    return str(Path.cwd())


def launch_dir() -> str:
    """``${launch_dir:}``: the directory the command was started from (runs go to its ./outputs)."""
    return str(Path.cwd())


if not OmegaConf.has_resolver("project_root"):
    OmegaConf.register_new_resolver("project_root", project_root)
if not OmegaConf.has_resolver("launch_dir"):
    OmegaConf.register_new_resolver("launch_dir", launch_dir, use_cache=True)

import pipeline.app.configuration.rundir  # noqa: E402,F401 - registers ${unique_dir:} for hydra.run.dir / hydra.sweep.dir


def file_fingerprint(path) -> str | None:
    """``${file_fingerprint:<path>}``: a digest of a user's file or folder (size, mtime), so a
    stage whose config holds it is recomputed when the file changes (None when unset/missing)."""
    return fingerprint(path)



def fingerprint(path) -> str | None:
    """A short digest of a file's or folder's path, sizes and modification times (None when unset
    or missing): part of a stage's cache key, so editing a user's file recomputes its stages."""
    import hashlib

    if path is None:
        return None
    p = Path(str(path)).expanduser()
    if not p.exists():
        return None
    h = hashlib.sha256(str(p.resolve()).encode())
    if p.is_dir():  # a folder's shards are read in natural name order since issue 51 (a9 before a10): new keys
        h.update(b"shard-order:natural;")
    files = sorted(q for q in p.rglob("*") if q.is_file()) if p.is_dir() else [p]
    for q in files:
        st = q.stat()
        h.update(f"{q.relative_to(p) if p.is_dir() else q.name}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()[:16]


def concepts_enabled(cfg: dict) -> bool:
    """A concept run: ``concepts._target_`` set and ``concepts=`` not none."""
    concepts = cfg.get("concepts") or {}
    return bool(concepts.get("_target_")) and concepts.get("name", "none") != "none"


if not OmegaConf.has_resolver("file_fingerprint"):
    OmegaConf.register_new_resolver("file_fingerprint", file_fingerprint)


@dataclass
class PathsConfig:
    """Every path the pipeline reads or writes. Each can be set by CLI or environment
    variable (see ``conf/paths/default.yaml``)."""

    root_dir: str = MISSING
    data_dir: str = MISSING  # downloads / local copies of datasets (torchvision roots, AwA2, ...)
    shared_dir: str = MISSING
    benchmark_dir: str = MISSING  # <battery>/<name>.data.gz + .labels0.gz
    cache_dir: str = MISSING  # stage cache shared by all runs and sweep jobs
    models_dir: str = MISSING  # encoder checkpoints
    model_cache_dir: Optional[str] = None  # one root for torch hub / Hugging Face / open_clip / SBERT caches
    log_dir: str = MISSING  # parent of Hydra run / multirun directories
    output_dir: str = MISSING  # this run's output directory (Hydra sets it)


@dataclass
class DatasetConfig:
    _target_: str = MISSING  # the loader: fn(spec, paths, random_state, **params) -> Dataset
    name: str = ""  # loader-specific identifier (clustbench: "sipu/r15")
    split: str = "train"
    classes: Optional[List[int]] = None  # keep only these ground-truth classes (relabelled 0..C-1)
    n_samples: Optional[int] = None  # random subsample (seeded by `seed`)
    # z-score the features (tabular data only); null (dataset=files): yes for a table (.csv/.tsv/.parquet),
    # no for embeddings; the rules still read in the table's own units
    standardize: Optional[bool] = False
    download: bool = False  # let torchvision / sklearn download missing data
    root: Optional[str] = None  # local copy of the data; default ${paths.data_dir}/<loader>
    params: Dict[str, Any] = field(default_factory=dict)  # keyword arguments of the loader
    # dataset=files (a user's own file or folder, docs/own-data.md); its params refer to these.
    path: Optional[str] = None  # .npy/.npz/.csv/.tsv/.parquet/.txt file or an image / text folder
    labels: Optional[str] = None  # a label file or a column / array name (optional)
    feature_names: Optional[List[str]] = None  # names of an array's columns / the table columns to use
    text_column: Optional[str] = None  # the table column holding documents (text data)
    label_column: Optional[str] = None  # the column of a label *table* given as `labels`
    id_column: Optional[str] = None  # a column of row ids (kept out of the features)
    noise_label: Optional[Any] = None  # the label value meaning noise (none by default)
    image_size: Optional[int] = None  # resize images to this side (default: their own / most common size)
    array: Optional[str] = None  # the features array of an .npz (default: X / embeddings / features / the only 2-D one)
    chunk_rows: Optional[int] = None  # rows per chunk when reading / encoding / assigning (null: from memory_budget)
    ids: Optional[str] = None  # a 1-D file of row ids (.npy, shards, zarr) for an array dataset: in assignments/
    # latents larger than this are handled out of core (docs/out-of-core.md): auto = 1/32 of the machine's memory;
    # bytes or a size such as 2GB
    memory_budget: Any = "auto"


@dataclass
class EncoderConfig:
    _target_: str = "pipeline.encoders.base.IdentityEncoder"  # the encoder class
    name: str = "identity"  # short name: checkpoint folder, reports
    params: Dict[str, Any] = field(default_factory=dict)  # constructor keyword arguments
    device: str = "cpu"
    batch_size: int = 256
    fit_split: Optional[str] = "train"  # dataset split a trainable encoder is fitted on (null: the embedded split)
    checkpoint: Optional[str] = None  # explicit checkpoint file to load instead of training
    # encoder=torch (a user's own network, docs/own-data.md); its params refer to these.
    model: Optional[Dict[str, Any]] = None  # the architecture: {_target_: torchvision.models.resnet18, ...}
    weights: Optional[str] = None  # a state-dict file for `model`
    torchscript: Optional[str] = None  # or a TorchScript file instead of model + weights
    layer: Optional[str] = None  # the submodule whose activations are the latents (null: the output)
    transform: Optional[Dict[str, Any]] = None  # input transform: {size, mean, std, channels} or a _target_
    pool: str = "mean"  # mean | max | flatten: activations (C, H, W) -> one vector per input
    image_size: Optional[int] = None  # pretrained image networks: input side (null: the network's own)


@dataclass
class ClusteringConfig:
    _target_: str = MISSING  # fn(X, n_clusters, random_state, ...) -> Clustering
    name: str = "gmm"  # short name shown in reports
    n_clusters: Optional[int] = None  # None: number of ground-truth classes
    params: Dict[str, Any] = field(default_factory=dict)  # keyword arguments of the target
    candidates: List[str] = field(default_factory=list)  # best_of: methods to choose from
    # what the clustering hands to explainers (labels, centers, mixture, graph); null: known only
    # after it ran (best_of). See pipeline.app.startup.capabilities.
    provides: Optional[List[str]] = field(default_factory=lambda: ["labels"])
    # fit on a uniform sample of this many rows and assign every row (null: every row in memory,
    # 20,000 when the latents exceed dataset.memory_budget)
    sample_rows: Optional[int] = None


@dataclass
class ConceptTestsConfig:
    """Each concept's tests on the run it explains (issue 48; docs/concepts.md, "Concept quality")."""

    # TCAV's significance test through the clustering: random example sets (rows of the data) per
    # set size, the most positives a test CAV uses, the family-wise level (Bonferroni over concept x cluster)
    n_random: int = 20
    max_set: int = 200
    alpha: float = 0.05
    rows: int = 2000  # rows of the data (stratified by cluster) the TCAV scores are counted on
    # a concept transfers to the data it explains when ... measured: its coordinate tracks the
    # measurement at Spearman rho >= min_tracking on the rows its CAV was not fitted on; class
    # attributes: the coordinate separates the run's classes with and without the attribute at
    # ROC AUC >= min_auc; examples with labelled rows of the data: P(concept) is calibrated there to
    # an expected calibration error <= max_ece
    min_tracking: float = 0.3
    min_auc: float = 0.7
    max_ece: float = 0.25
    # a concept that fails its test (not significant, or does not transfer) is kept out of the trees;
    # true keeps it (the run still says which failed and why)
    keep_failed: bool = False


@dataclass
class ConceptsConfig:
    _target_: Optional[str] = None  # the concept source (null with concepts=none)
    name: str = "none"  # "none" disables the concepts/CAV/project stages
    file: Optional[str] = None  # concept-set definition (concepts/<name>.yaml)
    params: Dict[str, Any] = field(default_factory=dict)
    # concepts=examples / concepts=classes (a user's own concepts, docs/own-data.md)
    path: Optional[str] = None  # concept table, concept folder, .npz of concept embeddings, or a mapping .yaml
    id_column: Optional[str] = None  # join the concept table on this column instead of row order
    # how concept thresholds read: probability (P(concept | z), calibrated CAVs) | percentile | raw;
    # null: probability when the CAV fitter is a calibrated classifier (logistic), else percentile
    units: Optional[str] = None
    tests: ConceptTestsConfig = field(default_factory=ConceptTestsConfig)


@dataclass
class CavConfig:
    _target_: str = "pipeline.concepts.CAVFitter"
    name: str = "linear"  # the fitter: linear = the concept set's suggestion (else logistic)
    params: Dict[str, Any] = field(default_factory=dict)


@dataclass
class ExplainerConfig:
    _target_: str = MISSING  # the estimator class (scikit-learn style)
    name: str = MISSING  # method name in the results table
    fit: Optional[str] = None  # a protocol of pipeline.app.configuration.explainers.PROTOCOLS (None: the class's fit_protocol)
    title: Optional[str] = None  # display name in figures (None: the class's title); not in any cache key
    n_leaves: Optional[int] = None  # None: number of reference clusters
    params: Dict[str, Any] = field(default_factory=dict)


@dataclass
class StudyRunConfig:
    """One row group of an experiment table: a dataset and optionally its own clustering."""

    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    clustering: Optional[ClusteringConfig] = None
    explainers: Optional[List[str]] = None  # subset of the `explainer` rows for this run (None: all)


@dataclass
class StudyConfig:
    """An experiment spanning several datasets (``experiment=mmdt_table1``). Empty: one run."""

    name: str = ""
    runs: Dict[str, StudyRunConfig] = field(default_factory=dict)
    published: List[Dict[str, Any]] = field(default_factory=list)  # paper values: run, explainer, ari, ...
    source: str = ""  # citation of the published values


@dataclass
class CounterfactualsConfig:
    """Global counterfactual explanations between clusters (issue 8; ``conf/counterfactuals/``)."""

    name: str = "none"  # "none" disables the stage
    methods: List[str] = field(default_factory=lambda: ["tgt", "dbm"])
    space: str = "auto"  # auto | input | latent | concepts (auto: input if the encoder has a torch_module)
    k: Optional[int] = 3  # features/concepts kept per explanation (null: all)
    params: Dict[str, Any] = field(default_factory=dict)  # TGT parameters; l1 (null: tuned for k), l1_grid


@dataclass
class ReportConfig:
    figures: bool = True  # tree figures (PNG, SVG, PDF), counterfactual charts
    html: bool = True  # report.html: one self-contained page per run
    summary: bool = True  # terminal summary
    max_rules: int = 12  # rules shown per tree in the summary


@dataclass
class FitConfig:
    # fit the trees on a stratified sample of this many rows (null: every row when their coordinates fit in
    # dataset.memory_budget, else the largest sample that fits a quarter of it); every row is still evaluated
    sample_rows: Optional[int] = None


@dataclass
class ComputeConfig:
    """Where chunked stages run (docs/out-of-core.md): ``local`` (this process) or ``dask``."""

    _target_: str = "pipeline.app.execution.compute.LocalCompute"  # the backend class (its from_settings builds it)
    name: str = "local"
    address: Optional[str] = None  # dask: a running scheduler (tcp://host:8786); null starts a LocalCluster
    n_workers: Optional[int] = None  # LocalCluster worker processes
    threads_per_worker: Optional[int] = None
    timeout: Optional[float] = None  # seconds to wait for the scheduler
    retries: Optional[int] = None  # re-runs of a failed task
    memory_limit: Optional[str] = None  # per LocalCluster worker ("2GB"; default auto)


@dataclass
class CacheConfig:
    enabled: bool = True
    # a rerun whose every stage is unchanged restores the earlier run's files and summary (false:
    # reads every stage's artifact back and writes the report again); app/stores/run_outputs.py
    reuse_files: bool = True


@dataclass
class Config:
    paths: PathsConfig = field(default_factory=PathsConfig)
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    clustering: ClusteringConfig = field(default_factory=ClusteringConfig)
    concepts: ConceptsConfig = field(default_factory=ConceptsConfig)
    cav: CavConfig = field(default_factory=CavConfig)
    explainer: Dict[str, ExplainerConfig] = field(default_factory=dict)
    study: StudyConfig = field(default_factory=StudyConfig)
    counterfactuals: CounterfactualsConfig = field(default_factory=CounterfactualsConfig)
    report: ReportConfig = field(default_factory=ReportConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    fit: FitConfig = field(default_factory=FitConfig)
    compute: ComputeConfig = field(default_factory=ComputeConfig)
    seed: int = 0
    threads: Optional[int] = 1  # BLAS/OpenMP threads per run (threadpoolctl); null = library default
    cpu_code_path: str = "native"  # native: each library's fastest path; portable: CPU code paths pinned (docs/pipeline.md)
    offline: Optional[bool] = None  # true: no library tries the network (HF_HUB_OFFLINE...); null: as the environment says
    task_name: str = "pipeline"


def register_configs() -> None:
    """Register the schema in Hydra's ConfigStore (idempotent)."""
    ConfigStore.instance().store(name="config_schema", node=Config)


register_configs()


def compose_config(overrides: list[str] | None = None, *, return_hydra_config: bool = False):
    """The pipeline config composed with ``overrides`` through Hydra's compose API.

    For notebooks and tests: ``run(compose_config(["dataset=iris", "paths.output_dir=/tmp/x"]))``.
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose("config", overrides=list(overrides or []), return_hydra_config=return_hydra_config)
