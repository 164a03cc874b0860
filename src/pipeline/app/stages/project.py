"""Stage ``project``: the coordinates trees cut on.

Without concepts: the latents themselves. With CAVs C (n_concepts, m): the concept coordinates
X = Z Cᵀ (MMDT paper, Eq. 4) of the ``coordinates`` stage, the columns of the concepts that passed
their tests (and a selection, ``concepts.params.select``), with centres C μ_k and covariances
C Σ_k Cᵀ (Eq. 5), and the display units of the plan (``concepts.units``: a report setting). Not
cached: a few small matrix products.
"""

from __future__ import annotations

import numpy as np

from pipeline.app.stores.artifacts import (ClusterArtifact, ConceptsArtifact, ConceptTestsArtifact, CoordinatesArtifact,
                                   EncodeArtifact, LoadArtifact, ProjectArtifact)
from pipeline.app.stages.framework import Stage
from pipeline.concepts.projection import project, project_mixture


def _config(cfg: dict) -> dict:
    params = cfg["concepts"].get("params") or {}
    return {k: params[k] for k in ("select", "select_tol") if params.get(k) is not None}


def _compute(cfg: dict, encode: EncodeArtifact, cluster: ClusterArtifact, concepts: ConceptsArtifact,
             coordinates: CoordinatesArtifact, concept_tests: ConceptTestsArtifact | None = None,
             load: LoadArtifact | None = None, plan=None) -> ProjectArtifact:
    Z = encode.Z
    full = concepts
    if concepts.enabled and concept_tests is not None and concept_tests.excluded:  # failed their tests (issue 48)
        concepts = without(concepts, concept_tests.excluded)
    if concepts.enabled and (cfg["concepts"].get("params") or {}).get("select"):  # off by default
        from pipeline.app.stages.cavs import select_for_reference

        concepts = select_for_reference(cfg, concepts, cluster, columns(coordinates.X, full, concepts))
    mixture = cluster.mixture()
    if not concepts.enabled:
        units = table_units(load, encode)
        return ProjectArtifact(X=Z, feature_names=encode.latent_names, latent_X=Z, latent_names=encode.latent_names,
                               centers=cluster.centers, mixture=mixture, latent_mixture=mixture,
                               units=units, units_kind=None if units is None else "original")
    from pipeline.app.stages.cavs import display_units

    C = concepts.cavs
    X = columns(coordinates.X, full, concepts)  # the coordinates stage's, of the concepts the trees use
    units_kind, units = display_units(cfg, concepts, X, concepts.concept_names, asked=plan.display.units)
    sort_ahead(plan, units)
    return ProjectArtifact(
        X=X, feature_names=concepts.concept_names, latent_X=Z, latent_names=encode.latent_names,
        centers=None if cluster.centers is None else project(cluster.centers, C),
        mixture=None if mixture is None else project_mixture(C, *mixture), latent_mixture=mixture,
        cavs=C, concept_names=concepts.concept_names, selection=concepts.selection or None,
        units=units, units_kind=units_kind, measured=measured_columns(concepts))


def columns(X: np.ndarray, full: ConceptsArtifact, concepts: ConceptsArtifact) -> np.ndarray:
    """The columns of the coordinates ``X`` (of every concept of ``full``) of the concepts of
    ``concepts`` (fewer, after their tests or a selection): ``X`` itself when they are all of them."""
    keep = [full.concept_names.index(n) for n in concepts.concept_names]
    return X if keep == list(range(X.shape[1])) else np.ascontiguousarray(X[:, keep])


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


def sort_ahead(plan, units) -> None:
    """Sort the percentile maps' columns, where the explainer bundle will (its percentile table: up
    to about a million rows, :func:`pipeline.app.data.budget.sorts_every_column`), on a
    background thread while the trees are fitted: ``np.sort`` leaves Python's GIL, so at a million
    rows its 1.2 s of sorting take a core the trees leave idle instead of the end of the run. The
    same arrays either way; a run on one thread, or a small one, sorts them when first asked, and a
    larger one only a column a printed percentile needs (10M rows: 80 MB a column)."""
    import threading

    from pipeline.app.data.budget import sorts_every_column
    from pipeline.threads import helper_threads

    maps = [m for u in units or () for m in (u, getattr(u, "fallback", None))
            if getattr(m, "kind", None) == "percentile" and getattr(m, "column", None) is not None]
    if (not helper_threads(plan.threads, 1) or not maps or sum(np.size(m.column) for m in maps) < 1 << 20
            or not sorts_every_column(len(maps[0].column))):
        return
    threading.Thread(target=lambda: [m.values for m in maps], name="sort-percentiles", daemon=True).start()


def table_units(load: LoadArtifact | None, encode: EncodeArtifact) -> list | None:
    """A standardised table explained on its own columns (encoder=identity): one map per column
    back to the table's units, so thresholds print as ``alcohol <= 13.05``, not in z-scores."""
    from pipeline.app.data.chunked import held

    record = (load.meta or {}).get("standardized") if load is not None else None
    if (held(encode.Z) is None or record is None or load.raw is None
            or list(encode.latent_names) != list(load.feature_names or [])):
        return None  # latents on disk, or not a standardised table explained on its own columns
    Z = np.asarray(encode.Z, dtype=np.float64)  # the trees' coordinates (the identity encoder keeps float32)
    if Z.shape != load.raw.shape or not np.array_equal(Z, np.asarray(load.X).astype(encode.Z.dtype)):
        return None
    from pipeline.concepts.units import original_units

    units = original_units(Z, load.raw, record)
    return units if any(u is not None for u in units) else None


PROJECT = Stage("project", ("encode", "cluster", "concepts", "coordinates", "concept_tests", "load"), _config, _compute,
                cached=False, artifact=ProjectArtifact)
