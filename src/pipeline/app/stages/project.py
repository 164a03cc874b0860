"""Stage ``project``: the coordinates trees cut on.

Without concepts: the latents themselves. With CAVs C (n_concepts, m): concept coordinates
X = Z Cᵀ (MMDT paper, Eq. 4) with centres C μ_k and covariances C Σ_k Cᵀ (Eq. 5). Not cached:
a matrix product is cheaper than reading its result back.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from pipeline.app.artifacts import (ClusterArtifact, ConceptsArtifact, ConceptTestsArtifact, EncodeArtifact,
                                   LoadArtifact, ProjectArtifact)
from pipeline.app.stages.framework import Stage
from pipeline.concepts.projection import project, project_mixture


def _config(cfg: dict) -> dict:
    params = cfg["concepts"].get("params") or {}
    # concepts.units is display only (uncached report), so it is not part of this key: no refit
    return {k: params[k] for k in ("select", "select_tol") if params.get(k) is not None}


@dataclass(frozen=True)
class ProjectChunk:
    """Concept coordinates of one chunk of latents (picklable: Dask tasks)."""

    cavs: np.ndarray

    def __call__(self, rows: np.ndarray, start: int) -> dict:
        return {"X": project(rows, self.cavs)}


def concept_coordinates(cfg: dict, Z, C, ctx=None, key: str = "") -> np.ndarray:
    """``Z Cᵀ``: at once for latents in memory; chunk by chunk for latents on disk, kept in the cache
    (store ``coordinates``, keyed by the latents and the CAVs) so a warm run does not read the latents."""
    from pipeline.app.data.chunked import is_view

    if not is_view(Z):
        return project(Z, C)
    from pipeline.app.chunk_map import map_rows
    from pipeline.app.compute import run_backend
    from pipeline.app.data.budget import chunk_rows

    def compute() -> dict:
        rows = chunk_rows(cfg, int(Z.shape[1]) * 8)
        resume = None if ctx is None or not ctx.cache.enabled else ctx.cache.root / "chunks" / "coordinates" / k
        return {"X": map_rows(ProjectChunk(np.asarray(C, dtype=np.float64)), Z, rows, run_backend(cfg, ctx), resume,
                              desc="Z Cᵀ")["X"]}

    k = coordinates_key(C, key)
    if ctx is None:
        return compute()["X"]
    handed = ctx.resources.get("coordinates", {}).pop(k, None)  # projected by the cluster stage's pass, and cached
    if handed is not None:
        return handed
    return ctx.cache.get_or_compute("coordinates", k, compute)["X"]


def coordinates_key(C, encode_key: str) -> str:
    """The cache key of the concept coordinates of the latents of ``encode_key`` on the CAVs ``C``."""
    from pipeline.app.cache import make_key

    return make_key("coordinates", {"cavs_sha256": hashlib.sha256(np.ascontiguousarray(C, dtype=np.float64)).hexdigest()},
                    [encode_key], 1)


def projects_in_cluster_pass(cfg: dict, concepts: ConceptsArtifact | None) -> bool:
    """Whether the cluster stage's pass over the latents may project them on these CAVs for this
    stage: concepts on, and their selection (which depends on the clustering) off."""
    return (concepts is not None and concepts.enabled and concepts.cavs is not None
            and not (cfg["concepts"].get("params") or {}).get("select"))


def _compute(cfg: dict, encode: EncodeArtifact, cluster: ClusterArtifact,
             concepts: ConceptsArtifact, concept_tests: ConceptTestsArtifact | None = None,
             load: LoadArtifact | None = None, ctx=None) -> ProjectArtifact:
    Z = encode.Z
    full = concepts
    if concepts.enabled and concept_tests is not None and concept_tests.excluded:  # failed their tests (issue 48)
        concepts = without(concepts, concept_tests.excluded)
    if concepts.enabled and (cfg["concepts"].get("params") or {}).get("select"):  # off by default
        from pipeline.app.stages.cavs import select_for_reference

        concepts = select_for_reference(cfg, concepts, cluster, Z)
    mixture = cluster.mixture()
    if not concepts.enabled:
        units = table_units(load, encode)
        return ProjectArtifact(X=Z, feature_names=encode.latent_names, latent_X=Z, latent_names=encode.latent_names,
                               centers=cluster.centers, mixture=mixture, latent_mixture=mixture,
                               units=units, units_kind=None if units is None else "original")
    from pipeline.app.stages.cavs import display_units

    C = concepts.cavs
    key = ctx.resources.get("input_keys", {}).get("encode", "") if ctx is not None else ""
    if concepts is not full and concept_tests is not None and concept_tests.excluded and not concepts.selection:
        # the columns of the concepts kept: the coordinates of all of them (projected by the cluster
        # stage's pass on data on disk) are not read again for fewer CAVs
        keep = [full.concept_names.index(n) for n in concepts.concept_names]
        X = np.ascontiguousarray(concept_coordinates(cfg, Z, full.cavs, ctx, key)[:, keep])
    else:
        X = concept_coordinates(cfg, Z, C, ctx, key)
    units_kind, units = display_units(cfg, concepts, X, concepts.concept_names)
    sort_ahead(cfg, units)
    return ProjectArtifact(
        X=X, feature_names=concepts.concept_names, latent_X=Z, latent_names=encode.latent_names,
        centers=None if cluster.centers is None else project(cluster.centers, C),
        mixture=None if mixture is None else project_mixture(C, *mixture), latent_mixture=mixture,
        cavs=C, concept_names=concepts.concept_names, selection=concepts.selection or None,
        units=units, units_kind=units_kind, measured=measured_columns(concepts))


def without(concepts: ConceptsArtifact, excluded: dict) -> ConceptsArtifact:
    """``concepts`` without the concepts named in ``excluded`` (CAVs, names, calibration)."""
    import dataclasses

    keep = [m for m, n in enumerate(concepts.concept_names) if n not in excluded]
    calibration = (None if concepts.cav_calibration is None
                   else np.asarray(concepts.cav_calibration).reshape(-1, 2)[keep].tolist())
    return dataclasses.replace(concepts, cavs=np.asarray(concepts.cavs)[keep],
                               concept_names=[concepts.concept_names[m] for m in keep], cav_calibration=calibration)


def measured_columns(concepts: ConceptsArtifact) -> dict | None:
    """The measurements of a run's measured concepts, one column per concept the trees cut on (NaN
    columns and None measures for the others): what a printed rule is checked against."""
    if concepts.measurements is None or not concepts.measures:
        return None
    by_name = {m["name"]: j for j, m in enumerate(concepts.measures)}
    values = np.full((len(concepts.measurements), len(concepts.concept_names)), np.nan)
    measures = []
    for col, name in enumerate(concepts.concept_names):
        j = by_name.get(name)
        measures.append(None if j is None else concepts.measures[j])
        if j is not None:
            values[:, col] = concepts.measurements[:, j]
    return {"values": values, "measures": measures} if any(m is not None for m in measures) else None


def sort_ahead(cfg: dict, units) -> None:
    """Sort the percentile maps' columns, where the explainer bundle will (its percentile table: up
    to about a million rows, :func:`pipeline.app.explainer_bundle.sorts_every_column`), on a
    background thread while the trees are fitted: ``np.sort`` leaves Python's GIL, so at a million
    rows its 1.2 s of sorting take a core the trees leave idle instead of the end of the run. The
    same arrays either way; a run on one thread, or a small one, sorts them when first asked, and a
    larger one only a column a printed percentile needs (10M rows: 80 MB a column)."""
    import threading

    from pipeline.app.explainer_bundle import sorts_every_column

    maps = [m for u in units or () for m in (u, getattr(u, "fallback", None))
            if getattr(m, "kind", None) == "percentile" and getattr(m, "column", None) is not None]
    if (cfg.get("threads") == 1 or not maps or sum(np.size(m.column) for m in maps) < 1 << 20
            or not sorts_every_column(len(maps[0].column))):
        return
    threading.Thread(target=lambda: [m.values for m in maps], name="sort-percentiles", daemon=True).start()


def table_units(load: LoadArtifact | None, encode: EncodeArtifact) -> list | None:
    """A standardised table explained on its own columns (encoder=identity): one map per column
    back to the table's units, so thresholds print as ``alcohol <= 13.05``, not in z-scores."""
    from pipeline.app.data.chunked import is_view

    if is_view(encode.Z):
        return None
    record = (load.meta or {}).get("standardized") if load is not None else None
    if record is None or load.raw is None or list(encode.latent_names) != list(load.feature_names or []):
        return None
    Z = np.asarray(encode.Z, dtype=np.float64)  # the trees' coordinates (the identity encoder keeps float32)
    if Z.shape != load.raw.shape or not np.array_equal(Z, np.asarray(load.X).astype(encode.Z.dtype)):
        return None
    from pipeline.concepts.units import original_units

    units = original_units(Z, load.raw, record)
    return units if any(u is not None for u in units) else None


PROJECT = Stage("project", ("encode", "cluster", "concepts", "concept_tests", "load"), _config, _compute, cached=False,
                artifact=ProjectArtifact, context=True)
