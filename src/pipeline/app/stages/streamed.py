"""The stages of a chunked run (``dataset.chunk_rows`` or ``compute=dask``; docs/out-of-core.md).

open -> cluster -> concepts -> assign -> sample -> fit.<row> -> evaluate -> report, each a
:class:`pipeline.app.stages.framework.Stage` with a typed artifact, so a chunked run is cached
and resumable like any other: a re-run reads every cached stage back, a run killed mid-stage
resumes from the last finished one. The big outputs of ``assign`` (reference labels, concept
coordinates) and ``evaluate`` (each tree's predictions) are ``.npy`` shards with a sha256
manifest, written beside the cache entry (``<cache_dir>/<store>/<key>.shards/``), renamed into
place only when complete and verified when a cached entry is read (a damaged shard has the
stage recomputed). The work itself is :class:`pipeline.app.streamed.StreamedRun`.

| stage | cached (store) | artifact |
|---|---|---|
| ``open`` | no | :class:`StreamArtifact`: the chunked embeddings, labels, ids |
| ``cluster`` | ``stream_cluster`` | :class:`StreamClusterArtifact`: centres or mixture parameters |
| ``concepts`` | ``stream_concepts`` | :class:`ConceptsArtifact`: CAVs from the concept examples |
| ``assign`` | ``assign`` (+ shards) | :class:`AssignArtifact`: labels/coordinates shards, exact moments |
| ``sample`` | no | the rows the trees are fitted on (all, or ``fit.sample_rows``) |
| ``fit.<row>`` | ``fit`` | :class:`FitArtifact` (predictions left to ``evaluate``) |
| ``evaluate`` | ``stream_evaluate`` (+ shards) | :class:`StreamEvaluateArtifact`: results rows |
| ``report`` | no | results.csv/.md, trees/, assignments/ (one parquet file per chunk, with the ids) |
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from pipeline.app.artifacts import (Artifact, AssignArtifact, ConceptsArtifact, FitArtifact, StreamArtifact,
                                    StreamClusterArtifact, StreamEvaluateArtifact)
from pipeline.app.stages.framework import Stage
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)

DEFAULT_CHUNK_ROWS = 100_000


# ------------------------------------------------------------------ shared
def is_streamed(cfg: dict) -> bool:
    """True when the run reads its data in chunks (``dataset.chunk_rows`` or ``compute=dask``)."""
    if cfg["encoder"].get("name", "identity") != "identity":  # store35 (temporary): encode embeds in chunks
        return False
    return bool(cfg["dataset"].get("chunk_rows")) or (cfg.get("compute") or {}).get("name", "local") != "local"


def backend(cfg: dict, ctx):
    """The run's compute backend (started on first use, closed by the runner: :func:`close`)."""
    if "compute" not in ctx.resources:
        from pipeline.app.compute import make_compute

        ctx.resources["compute"] = make_compute(cfg.get("compute"))
    return ctx.resources["compute"]


def close(ctx) -> None:
    compute = ctx.resources.pop("compute", None)
    if compute is not None:
        compute.close()


def shard_folder(ctx, store: str) -> Path:
    """Where the current stage's shards go: beside its cache entry, keyed like it."""
    if ctx.cache.enabled:
        return ctx.cache.root / store / f"{ctx.resources['key']}.shards"
    return ctx.out_dir / "streamed" / store


def _verify(artifact) -> None:
    from pipeline.app.streamed import verify_shards

    verify_shards(artifact.shards, artifact.manifest_sha256)


def _run(cfg: dict, stream: StreamArtifact, ctx, concepts: ConceptsArtifact | None = None):
    from pipeline.app.streamed import StreamedRun

    cavs = None if concepts is None or not concepts.enabled else np.asarray(concepts.cavs, dtype=np.float64)
    names = list(concepts.concept_names) if cavs is not None else stream.feature_names
    return StreamedRun(stream.Z, stream.truth, stream.n_clusters, stream.chunk_rows, ctx.out_dir / "streamed",
                       backend(cfg, ctx), cavs=cavs, feature_names=names, seed=int(cfg.get("seed", 0)))


# ------------------------------------------------------------------ open
def check_config(cfg: dict) -> None:
    """What a chunked run cannot do, one paragraph each, before any data is read."""
    if cfg["dataset"].get("_target_") != "pipeline.app.data.files.load_from_config":
        raise InvalidInputError("dataset.chunk_rows / compute=dask: chunked runs read dataset=files (a .npy, a folder of "
                                f"shards or a zarr array), not dataset={cfg['dataset'].get('name')}.")
    if cfg["encoder"].get("name", "identity") != "identity":
        raise InvalidInputError(
            f"encoder={cfg['encoder'].get('name')} with dataset.chunk_rows: a chunked run takes embeddings as they are "
            "(encoder=identity). Embed the data first, in batches, and save the embeddings as .npy shards (a folder "
            "of <part>.npy files) or a zarr array; then run dataset=files dataset.path=<that folder> "
            "dataset.chunk_rows=... with encoder=identity (docs/out-of-core.md).")
    params = cfg["concepts"].get("params") or {}
    if params.get("select"):
        raise InvalidInputError("concepts.params.select (greedy concept selection) needs the in-memory run; a chunked "
                                "run keeps every concept. Drop concepts.params.select, or select on a sample first.")
    K = cfg["clustering"].get("n_clusters") or (cfg["clustering"].get("params") or {}).get("n_clusters")
    if not K:
        raise InvalidInputError("a chunked run needs clustering.n_clusters (the number of clusters is not chosen "
                                "by BIC on data that does not fit in memory).")
    from pipeline.app.streamed import STREAMED_CLUSTERINGS, STREAMED_PROTOCOLS

    if cfg["clustering"]["name"] not in STREAMED_CLUSTERINGS:
        raise InvalidInputError(f"clustering={cfg['clustering']['name']} does not stream; a chunked run "
                                f"(dataset.chunk_rows) takes clustering={' or clustering='.join(STREAMED_CLUSTERINGS)}.")
    for row, spec in cfg["explainer"].items():
        if spec.get("fit") not in STREAMED_PROTOCOLS:
            raise InvalidInputError(
                f"explainer {row!r} (fit: {spec.get('fit')}) does not run on streamed data; a chunked run takes "
                "explainers fitted on labels, centres or the mixture (mmdt, imm, cart, exkmc, spex_clique ...). With "
                "concepts, explainer=mmdt is MMDT on the concept coordinates' exact per-cluster moments.")


def _open_config(cfg: dict) -> dict:
    from pipeline.app.data.readers import fingerprint

    ds = cfg["dataset"]
    K = cfg["clustering"].get("n_clusters") or (cfg["clustering"].get("params") or {}).get("n_clusters")
    return {"files": {k: [ds.get(k), fingerprint(ds.get(k))] for k in ("path", "labels", "ids")},
            "chunk_rows": ds.get("chunk_rows"), "feature_names": ds.get("feature_names"), "n_clusters": K}


def _open(cfg: dict) -> StreamArtifact:
    from pipeline.app.data.chunked import open_chunked

    check_config(cfg)
    ds = cfg["dataset"]
    chunk_rows = int(ds.get("chunk_rows") or DEFAULT_CHUNK_ROWS)
    if chunk_rows < 1:
        raise InvalidInputError(f"dataset.chunk_rows={chunk_rows}: give a positive number of rows per chunk.")
    Z = open_chunked(ds.get("path"), "dataset.path")
    truth = ids = None
    if ds.get("labels"):
        truth = open_chunked(ds["labels"], "dataset.labels", vector=True)
        _same_length(truth, Z, "dataset.labels", ds["labels"], ds["path"], "label")
        if not np.issubdtype(truth.dtype, np.integer):
            raise InvalidInputError(f"dataset.labels={ds['labels']} holds {truth.dtype} values; a chunked run takes "
                                    "integer labels (-1 = unknown); code them first.")
    if ds.get("ids"):
        ids = open_chunked(ds["ids"], "dataset.ids", vector=True)
        _same_length(ids, Z, "dataset.ids", ds["ids"], ds["path"], "id")
    names = ds.get("feature_names")
    if names is not None and len(names) != Z.shape[1]:
        raise InvalidInputError(f"dataset.feature_names has {len(names)} names but dataset.path={ds['path']} has "
                                f"{Z.shape[1]} columns; give one name per column.")
    K = cfg["clustering"].get("n_clusters") or (cfg["clustering"].get("params") or {}).get("n_clusters")
    log.info("streamed run: %s, %d x %s %s in chunks of %d rows", Z.source, Z.n_rows, Z.shape[1:], Z.dtype, chunk_rows)
    name = ds.get("name") if ds.get("name") not in (None, "", "files") else Path(str(ds["path"])).stem
    return StreamArtifact(Z=Z, chunk_rows=chunk_rows, n_clusters=int(K), name=name, truth=truth, ids=ids,
                          feature_names=None if names is None else [str(n) for n in names])


def _same_length(part, Z, key: str, path, data_path, what: str) -> None:
    if part.n_rows != Z.n_rows:
        raise InvalidInputError(f"{key}={path} holds {part.n_rows} {what}s but dataset.path={data_path} holds "
                                f"{Z.n_rows} rows; give one {what} per row (in the same order).")


OPEN = Stage("open", (), _open_config, _open, cached=False, artifact=StreamArtifact)


# ------------------------------------------------------------------ cluster
def _cluster_config(cfg: dict) -> dict:
    dask = (cfg.get("compute") or {}).get("name", "local") == "dask"
    # compute=dask fits k-means with dask-ml's k-means|| (a different, equally valid clustering)
    backend_ = "dask-ml" if dask and cfg["clustering"]["name"] == "kmeans" else "driver"
    return {"clustering": cfg["clustering"], "seed": cfg["seed"], "backend": backend_}


def _cluster(cfg: dict, open: StreamArtifact, ctx) -> StreamClusterArtifact:
    params = {k: v for k, v in (cfg["clustering"].get("params") or {}).items() if k != "n_clusters"}
    return _run(cfg, open, ctx).cluster(cfg["clustering"]["name"], params)


CLUSTER = Stage("cluster", ("open",), _cluster_config, _cluster, store="stream_cluster", context=True,
                artifact=StreamClusterArtifact)


# ------------------------------------------------------------------ concepts
def _concepts_config(cfg: dict) -> dict:
    from pipeline.app.stages.concepts import _config

    return _config(cfg)


def _concepts(cfg: dict, open: StreamArtifact) -> ConceptsArtifact:
    """CAVs fitted as in the in-memory run (:func:`pipeline.app.stages.cavs.fit_cavs`) from the
    concept source's examples: precomputed example embeddings (``concepts=examples`` with an
    ``.npz``), or per-row concept labels (a concept table, ``concepts=classes``), whose labelled
    rows are read from the chunked embeddings."""
    from pipeline.app.stages.concepts import _compute, enabled

    if not enabled(cfg):
        return ConceptsArtifact()
    return _compute(cfg, _stream_load(open), _StreamEncode(open), _example_latents)


def _example_latents(cfg: dict, dataset, encode, examples):
    """(examples, latents) for the CAV fitter: example embeddings as given (``.npz``), or the
    data rows that carry a concept label (per-row labels), read from the chunked embeddings. Rows
    without any label take no part in any CAV, so the fit equals the in-memory one on all rows."""
    from pipeline.app.stages.cavs import example_latents

    if examples.input_kind == "latents":
        return examples, example_latents(cfg, dataset, encode.Z, examples, None)
    if examples.inputs is not None:
        raise InvalidInputError(
            f"concepts={examples.set_name}: its examples are {examples.input_kind} inputs, which the data's encoder "
            "would embed, but a chunked run has no encoder (encoder=identity on precomputed embeddings). Give the "
            "concept examples as embeddings from the same model (concepts=examples concepts.path=<file>.npz: one "
            "(k, m) array per concept plus 'random'), or as per-row labels (a concept table, concepts=classes).")
    Z = encode.Z
    labels = np.asarray(examples.labels, dtype=np.float64)
    if labels.shape[0] != len(Z):
        raise InvalidInputError(f"concept labels cover {labels.shape[0]} rows but the data has {len(Z)} rows.")
    rows = np.flatnonzero(np.isfinite(labels.reshape(len(labels), -1)).any(axis=1))
    log.info("concepts %s: the %d of %d rows with a concept label read for the CAVs", examples.set_name, rows.size,
             len(Z))
    if rows.size < len(Z):
        examples = dataclasses.replace(examples, labels=examples.labels[rows])
    return examples, Z.rows(rows)


class _LazyRows:
    """The chunked embeddings where the concept code expects latents ``Z``: shape, length and the
    rows it asks for (read then, never the whole array unless every row is asked for)."""

    def __init__(self, Z, chunk_rows: int):
        self.Z, self.chunk_rows = Z, chunk_rows
        self.shape, self.dtype = Z.shape, Z.dtype

    def __len__(self) -> int:
        return self.Z.n_rows

    def rows(self, idx) -> np.ndarray:
        idx = np.asarray(idx, dtype=np.int64)
        if idx.size == self.Z.n_rows:
            return self.Z.read(0, self.Z.n_rows)
        return self.Z.take(idx, self.chunk_rows)


@dataclass(frozen=True)
class _StreamEncode:
    """Stands in for the encode artifact: ``Z`` is the chunked embeddings (read on demand)."""

    open: StreamArtifact

    @property
    def Z(self):
        return _LazyRows(self.open.Z, self.open.chunk_rows)


def _stream_load(open: StreamArtifact):
    """Stands in for the load artifact (the concept sources' ``dataset``): the rows (read on
    demand), the ground truth coded 0..C-1 with its values as class names (-1 unknown), the ids."""
    from pipeline.app.artifacts import LoadArtifact

    meta = {"source": open.Z.source, "n_rows": open.Z.n_rows}
    y = class_names = None
    if open.truth is not None:
        values = open.truth.read(0, open.truth.n_rows).astype(np.int64)
        classes = np.unique(values[values >= 0])
        y = np.where(values >= 0, np.searchsorted(classes, values), -1).astype(np.int64)
        class_names = [str(c) for c in classes]
    if open.ids is not None:
        meta["ids"] = [str(v) for v in open.ids.read(0, open.ids.n_rows).tolist()]
    return LoadArtifact(name=open.name, kind="tabular", feature_names=open.feature_names, class_names=class_names,
                        meta=meta, X=_LazyRows(open.Z, open.chunk_rows), y=y)


CONCEPTS = Stage("concepts", ("open",), _concepts_config, _concepts, store="stream_concepts", version=2,
                 artifact=ConceptsArtifact)


# ------------------------------------------------------------------ assign
def _assign(cfg: dict, open: StreamArtifact, cluster: StreamClusterArtifact, concepts: ConceptsArtifact,
            ctx) -> AssignArtifact:
    return _run(cfg, open, ctx, concepts).assign(cluster, shard_folder(ctx, "assign"))


ASSIGN = Stage("assign", ("open", "cluster", "concepts"), lambda cfg: {}, _assign, context=True,
               artifact=AssignArtifact, verify=_verify)


# ------------------------------------------------------------------ sample
@dataclass(frozen=True)
class SampleArtifact(Artifact):
    """Stage ``sample`` (not cached): the rows the trees are fitted on, their coordinates and
    reference labels (every row unless ``fit.sample_rows``)."""

    stage: ClassVar[str] = "sample"
    rows: np.ndarray
    X: np.ndarray
    labels: np.ndarray


def _sample(cfg: dict, open: StreamArtifact, assign: AssignArtifact, concepts: ConceptsArtifact, ctx) -> SampleArtifact:
    rows, X, labels = _run(cfg, open, ctx, concepts).sample(assign, (cfg.get("fit") or {}).get("sample_rows"))
    return SampleArtifact(rows=rows, X=X, labels=labels)


SAMPLE = Stage("sample", ("open", "assign", "concepts"), lambda cfg: {"sample_rows": (cfg.get("fit") or {}).get(
    "sample_rows"), "seed": cfg["seed"]}, _sample, cached=False, context=True, artifact=SampleArtifact)


# ------------------------------------------------------------------ fit.<row>
def fit_stage(row: str) -> Stage:
    """Explainer row ``row`` on the sample (trees) or the exact moments (MMDT); cached in ``fit``."""

    def config(cfg: dict) -> dict:
        return {"explainer": cfg["explainer"][row], "seed": cfg["seed"], "streamed": True}

    def compute(cfg, open, cluster, concepts, assign, sample, ctx) -> FitArtifact:
        run = _run(cfg, open, ctx, concepts)
        return run.fit_row(row, cfg["explainer"][row], assign, (sample.rows, sample.X, sample.labels), cluster.centers)

    return Stage(f"fit.{row}", ("open", "cluster", "concepts", "assign", "sample"), config, compute, store="fit",
                 context=True, version=2, artifact=FitArtifact)  # 2: trees keep the values around each cut


# ------------------------------------------------------------------ evaluate
def evaluate_stage(rows: list) -> Stage:
    def compute(cfg, open, concepts, assign, ctx, **fits) -> StreamEvaluateArtifact:
        fits = {row: fits[f"fit.{row}"] for row in rows}
        return _run(cfg, open, ctx, concepts).evaluate(assign, fits, shard_folder(ctx, "stream_evaluate"))

    inputs = ("open", "concepts", "assign", *(f"fit.{row}" for row in rows))
    return Stage("evaluate", inputs, lambda cfg: {}, compute, store="stream_evaluate", context=True,
                 artifact=StreamEvaluateArtifact, verify=_verify)


# ------------------------------------------------------------------ report
@dataclass(frozen=True)
class StreamReportArtifact(Artifact):
    stage: ClassVar[str] = "report"
    df: Any
    csv: Any


def report_stage(rows: list) -> Stage:
    def compute(cfg, open, assign, evaluate, ctx, **fits) -> StreamReportArtifact:
        return write_report(ctx.out_dir, open, assign, evaluate, {row: fits[f"fit.{row}"] for row in rows})

    inputs = ("open", "assign", "evaluate", *(f"fit.{row}" for row in rows))
    return Stage("report", inputs, lambda cfg: None, compute, cached=False, context=True,
                 artifact=StreamReportArtifact)


def write_report(out_dir: Path, open: StreamArtifact, assign: AssignArtifact, evaluate: StreamEvaluateArtifact,
                 fits: dict) -> StreamReportArtifact:
    """results.csv/.md, trees/<row>.json + .rules.txt, and assignments/<chunk>.parquet: every row's
    id (``dataset.ids``, else its row number), reference cluster and each tree's prediction."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline.app.report.writer import atomic_write, write_tables
    from pipeline.app.streamed import open_part
    from pipeline.trees.tree import ExplanationTree

    df = pd.DataFrame(evaluate.rows)
    csv, _ = write_tables(out_dir, df)
    trees = out_dir / "trees"
    trees.mkdir(parents=True, exist_ok=True)
    for row, fit in fits.items():
        tree = ExplanationTree.from_dict(fit.tree)
        atomic_write(trees / f"{row}.json", tree.to_json())
        atomic_write(trees / f"{row}.rules.txt", tree.to_text())
    folder = out_dir / "assignments"
    tmp = out_dir / ".assignments.tmp"
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    labels = open_part(assign.shards, "labels")
    preds = {row: open_part(evaluate.shards, row) for row in fits}
    for i, (a, b) in enumerate(open.Z.ranges(open.chunk_rows)):
        cols = {"id": open.ids.read(a, b) if open.ids is not None else np.arange(a, b, dtype=np.int64),
                "reference": labels.read(a, b)}
        cols.update({row: p.read(a, b) for row, p in preds.items()})
        pq.write_table(pa.table(cols), tmp / f"{i:06d}.parquet")
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    atomic_write(out_dir / "streamed" / "stages.json", json.dumps(
        {"chunks": len(open.Z.ranges(open.chunk_rows)), "rows": open.Z.n_rows, "assign_shards": assign.shards,
         "evaluate_shards": evaluate.shards}, indent=1))
    return StreamReportArtifact(df=df, csv=csv)


def streamed_stages(cfg: dict) -> list:
    """The stages of a chunked run of ``cfg``, in execution order."""
    rows = list(cfg["explainer"])
    return [OPEN, CLUSTER, CONCEPTS, ASSIGN, SAMPLE, *(fit_stage(row) for row in rows), evaluate_stage(rows),
            report_stage(rows)]


def stage_seconds(ctx) -> dict:
    """Seconds (and cache hit or not) of every cached stage so far: ``streamed/seconds.json``."""
    return [{"stage": e.stage, "key": e.key, "seconds": e.seconds, "cache_hit": e.hit} for e in ctx.cache.events]
