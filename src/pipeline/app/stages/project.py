"""Stage ``project``: the coordinates trees cut on.

Without concepts: the latents themselves. With CAVs C (n_concepts, m): concept coordinates
X = Z Cᵀ (MMDT paper, Eq. 4) with centres C μ_k and covariances C Σ_k Cᵀ (Eq. 5). Not cached:
a matrix product is cheaper than reading its result back.
"""

from __future__ import annotations

from pipeline.app.stages.base import Stage
from pipeline.concepts.projection import project, project_mixture


def _config(cfg: dict) -> dict:
    params = cfg["concepts"].get("params") or {}
    # concepts.units is display only (uncached report), so it is not part of this key: no refit
    return {k: params[k] for k in ("select", "select_tol") if params.get(k) is not None}


def _compute(cfg: dict, encode: dict, cluster: dict, concepts: dict) -> dict:
    Z = encode["Z"]
    if concepts and (cfg["concepts"].get("params") or {}).get("select"):  # off by default
        from pipeline.app.stages.cavs import select_for_reference

        concepts = select_for_reference(cfg, concepts, cluster, Z)
    mixture = [cluster.get(k) for k in ("weights", "means", "covariances")]
    out = {"latent_names": encode["latent_names"], "latent_X": Z}
    if not concepts:
        out.update(X=Z, feature_names=encode["latent_names"], centers=cluster.get("centers"))
        out["mixture"] = tuple(mixture) if mixture[1] is not None else None
        out["latent_mixture"] = out["mixture"]
        return out
    C = concepts["cavs"]
    if concepts.get("selection"):
        out["selection"] = concepts["selection"]
    out.update(X=project(Z, C), feature_names=concepts["concept_names"], cavs=C, concept_names=concepts["concept_names"])
    from pipeline.app.stages.cavs import display_units

    out["units_kind"], out["units"] = display_units(cfg, concepts, out["X"], concepts["concept_names"])
    out["centers"] = None if cluster.get("centers") is None else project(cluster["centers"], C)
    if mixture[1] is not None:
        out["mixture"] = project_mixture(C, *mixture)
        out["latent_mixture"] = tuple(mixture)
    else:
        out["mixture"] = out["latent_mixture"] = None
    return out


PROJECT = Stage("project", ("encode", "cluster", "concepts"), _config, _compute, cached=False)
