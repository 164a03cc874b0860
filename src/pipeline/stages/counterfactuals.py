"""Stage ``counterfactuals``: global counterfactual explanations between every pair of clusters.

Runs when ``counterfactuals`` is not ``none`` (``conf/counterfactuals/*.yaml``). Space:

* ``latent`` -- translations of the latents ``Z`` themselves (for ``encoder=identity`` on
  tabular data these are the input features), judged with the identity encoder;
* ``concepts`` -- translations of concept scores ``Z C^T`` (needs ``concepts=...``), mapped
  back to latents through ``pinv(C)`` and judged on the latents
  (:mod:`pipeline.counterfactuals.concept_space`);
* ``auto`` -- ``concepts`` when CAVs are available, else ``latent``.

Input-space explanations through a deep encoder are available in the library
(``pipeline.counterfactuals.TGT(encoder_module)``) but not here: the stage only sees latents.
Methods ``tgt`` (l1 tuned for ``k`` unless ``params.l1`` is set) and ``dbm``. The artifact
holds one row per (method, ordered pair): correctness, coverage, the translation and its text.
"""

from __future__ import annotations

import logging

import numpy as np

from pipeline.counterfactuals import (
    TGT,
    ConceptDecoder,
    LatentIdentity,
    PairwiseEvaluator,
    choose_epsilon,
    describe,
    group_means,
    top_k,
    tune_l1,
)
from pipeline.stages.base import Stage
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)

METHODS = ("tgt", "dbm")
SPACES = ("auto", "latent", "concepts")


def _config(cfg: dict) -> dict:
    return {"counterfactuals": cfg["counterfactuals"], "seed": cfg["seed"]}


def _space(spec: dict, project: dict) -> str:
    space = spec.get("space", "auto")
    if space not in SPACES:
        raise InvalidInputError(f"counterfactuals.space={space!r}; choose one of {list(SPACES)}.")
    has_cavs = project.get("cavs") is not None
    if space == "concepts" and not has_cavs:
        raise InvalidInputError("counterfactuals.space=concepts needs CAVs; choose concepts=<set> "
                                "(e.g. concepts=mnist_geometric) or counterfactuals.space=latent.")
    return ("concepts" if has_cavs else "latent") if space == "auto" else space


def _fit_tgt(spec: dict, encoder, X, labels, k, seed: int) -> TGT:
    params = dict(spec.get("params") or {})
    l1 = params.pop("l1", None)
    l1_grid = params.pop("l1_grid", None)
    params.setdefault("random_state", seed)
    try:
        TGT(encoder, **params)
    except TypeError as exc:
        raise InvalidInputError(f"bad counterfactuals.params {sorted(params)}: {exc}; see pipeline.counterfactuals.TGT "
                                "for the accepted keys (plus l1 and l1_grid).") from None
    if l1 is not None:
        return TGT(encoder, l1=float(l1), **params).fit(X, labels)
    return tune_l1(encoder, X, labels, k, l1_grid=l1_grid, progress=False, **params)


def _compute(cfg: dict, encode: dict, cluster: dict, project: dict) -> dict:
    spec = cfg["counterfactuals"]
    methods = list(spec.get("methods") or METHODS)
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        raise InvalidInputError(f"counterfactuals.methods has unknown {unknown}; choose from {list(METHODS)}.")
    Z = np.asarray(encode["Z"], dtype=np.float64)
    groups = np.asarray(cluster["labels"], dtype=np.int64)
    space = _space(spec, project)
    if space == "concepts":
        C = np.asarray(project["cavs"], dtype=np.float64)
        X, names, encoder, back = Z @ C.T, list(project["concept_names"]), ConceptDecoder(C), np.linalg.pinv(C)
    else:
        X, names, encoder, back = Z, list(encode["latent_names"]), LatentIdentity(), np.eye(Z.shape[1])
    k = spec.get("k")
    k = None if k is None else min(int(k), X.shape[1])
    eps = choose_epsilon(LatentIdentity(), Z, groups)
    evaluator = PairwiseEvaluator(LatentIdentity(), Z, groups, eps)
    labels, means = group_means(X, groups)
    explainers, l1 = {}, float("nan")
    if "tgt" in methods:
        model = _fit_tgt(spec, encoder, X, groups, k, cfg["seed"])
        l1 = float(model.l1)
        explainers["tgt"] = lambda a, b: model.explanation(labels[a], labels[b], k)
    if "dbm" in methods:
        explainers["dbm"] = lambda a, b: top_k(means[b] - means[a], k)
    rows, deltas = [], []
    for method, explain in explainers.items():
        for a in range(labels.size):
            for b in range(labels.size):
                if a == b:
                    continue
                delta = explain(a, b)
                cr, cv = evaluator.pair(a, b, back @ delta)
                rows.append({"method": method, "from": int(labels[a]), "to": int(labels[b]), "k": k,
                             "correctness": cr, "coverage": cv, "explanation": describe(delta, names, digits=2)})
                deltas.append(delta)
    log.info("counterfactuals (%s space, eps=%.4g): %d explanations", space, eps, len(rows))
    return {"rows": rows, "deltas": np.asarray(deltas, dtype=np.float64), "feature_names": names, "space": space,
            "eps": eps, "l1": l1, "self_similarity": evaluator.self_similarity}


COUNTERFACTUALS = Stage("counterfactuals", ("encode", "cluster", "project"), _config, _compute)
