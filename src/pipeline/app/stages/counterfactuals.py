"""Stage ``counterfactuals``: global counterfactual explanations between every pair of clusters.

Runs when ``counterfactuals`` is not ``none`` (``conf/counterfactuals/*.yaml``). Space:

* ``input`` -- translations of the input features ``X`` (tabular data, e.g. digits pixels),
  fitted and judged through the encoder's differentiable module
  (:meth:`pipeline.encoders.Encoder.torch_module`: VaDE's mean path with its input scaling,
  the identity for ``encoder=identity``), as in the TGT paper;
* ``latent`` -- translations of the latents ``Z`` themselves, judged with the identity;
* ``concepts`` -- translations of concept scores ``Z C^T`` (needs ``concepts=...``), mapped
  back to latents through ``pinv(C)`` and judged on the latents
  (:mod:`pipeline.counterfactuals.concept_space`);
* ``auto`` -- ``input`` when the data are tabular and the encoder has a torch module, else
  ``concepts`` when CAVs are available, else ``latent``.

Methods (``counterfactuals.methods``, each a class with ``name`` and ``fit``): :class:`TGTMethod`
(``tgt``: l1 tuned for ``k`` unless ``params.l1`` is set) and :class:`DBMMethod` (``dbm``), or any
other class named by its dotted path. The artifact
holds one row per (method, ordered pair): correctness, coverage, the translation and its text.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Callable

import numpy as np

from pipeline.counterfactuals import (
    TGT,
    ConceptDecoder,
    LatentIdentity,
    PairwiseEvaluator,
    choose_epsilon,
    concept_scores,
    describe,
    group_means,
    top_k,
    tune_l1,
)
from pipeline.app.stores.artifacts import (
    ClusterArtifact, CounterfactualsArtifact, EncodeArtifact, LoadArtifact, ProjectArtifact,
)
from pipeline.app.stages.framework import Stage
from pipeline.encoders.base import Encoder
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)

SPACES = ("auto", "input", "latent", "concepts")


def _config(cfg: dict) -> dict:
    return {"counterfactuals": cfg["counterfactuals"], "seed": cfg["seed"]}


def _input_module(space: str, load: LoadArtifact, encoder_loader: Callable[[], Encoder]):
    """The encoder's torch module when input space is asked for (or possible, for ``auto``), else None."""
    if space not in ("auto", "input"):
        return None
    if load.kind != "tabular":
        if space == "input":
            raise InvalidInputError(f"counterfactuals.space=input needs tabular input features; the {load.name!r} "
                                    f"data are {load.kind}. Choose counterfactuals.space=latent, or concepts "
                                    "with concepts=<set>.")
        return None
    encoder = encoder_loader()
    module = encoder.torch_module()
    if module is None and space == "input":
        raise InvalidInputError(f"counterfactuals.space=input: encoder {encoder.name!r} has no differentiable module "
                                "from input features to latents (pretrained image/text encoders are not explained "
                                "per input feature); choose counterfactuals.space=latent, or concepts with "
                                "concepts=<set>.")
    return module


def _space(spec: dict, project: ProjectArtifact, has_module: bool) -> str:
    space = spec.get("space", "auto")
    has_cavs = project.cavs is not None
    if space == "concepts" and not has_cavs:
        raise InvalidInputError("counterfactuals.space=concepts needs CAVs; choose concepts=<set> "
                                "(e.g. concepts=mnist_geometric) or counterfactuals.space=latent.")
    if space == "auto":
        return "input" if has_module else "concepts" if has_cavs else "latent"
    return space


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


class TGTMethod:
    """``tgt``: Plumb et al.'s TGT (``l1`` tuned for ``k`` unless ``params.l1`` is set)."""

    name = "tgt"

    def fit(self, spec: dict, encoder, X, groups, labels, means, k, seed: int):
        """(the explanation of each ordered pair of cluster positions ``(a, b)``, the l1 weight used)."""
        model = _fit_tgt(spec, encoder, X, groups, k, seed)
        return (lambda a, b: model.explanation(labels[a], labels[b], k)), float(model.l1)


class DBMMethod:
    """``dbm``: the difference between the clusters' means, top-k (the paper's baseline)."""

    name = "dbm"

    def fit(self, spec: dict, encoder, X, groups, labels, means, k, seed: int):
        return (lambda a, b: top_k(means[b] - means[a], k)), None


SHIPPED_METHODS = (TGTMethod, DBMMethod)


def methods_of(spec: dict) -> list:
    """The counterfactual methods ``counterfactuals.methods`` lists (default every shipped one), each a
    class with a ``name`` and ``fit``: a shipped method by its ``name``, any other by its dotted path."""
    from pipeline.app.configuration.instantiate import locate

    out, unknown = [], []
    for entry in spec.get("methods") or [m.name for m in SHIPPED_METHODS]:
        cls = next((m for m in SHIPPED_METHODS if m.name == entry), None)
        if cls is None and "." in str(entry):
            cls = locate(str(entry), "counterfactuals.methods")
        if cls is None:
            unknown.append(entry)
        elif cls not in out:
            out.append(cls)
    if unknown:
        raise InvalidInputError(f"counterfactuals.methods has unknown {sorted(map(str, unknown))}; choose from "
                                f"{[m.name for m in SHIPPED_METHODS]} (or give a method class's dotted path).")
    return out


def _compute(cfg: dict, load: LoadArtifact, encode: EncodeArtifact, cluster: ClusterArtifact,
             project: ProjectArtifact, plan=None, *,
             encoder_loader: Callable[[], Encoder] | None = None) -> CounterfactualsArtifact:
    spec = cfg["counterfactuals"]
    if encoder_loader is None:  # the encoder the encode artifact names (its checkpoint, sha256-checked)
        from pipeline.app.stages.encode import fitted_encoder

        def encoder_loader():
            return fitted_encoder(cfg, encode)

    methods = methods_of(spec)
    if spec.get("space", "auto") not in SPACES:
        raise InvalidInputError(f"counterfactuals.space={spec.get('space')!r}; choose one of {list(SPACES)}.")
    from pipeline.app.data.budget import rows_in_memory

    why = "the counterfactuals compare every row (counterfactuals=none turns them off)"
    Z = np.asarray(rows_in_memory(encode.Z, plan, why), dtype=np.float64)
    groups = np.asarray(cluster.labels, dtype=np.int64)
    module = _input_module(spec.get("space", "auto"), load, encoder_loader)
    space = _space(spec, project, module is not None)
    # judge: the module mapping the explained space's points to the representation the metrics use
    if space == "input":
        X = np.asarray(rows_in_memory(load.X, plan, why), dtype=np.float64).reshape(len(Z), -1)
        names = list(load.feature_names or [])
        names = names if len(names) == X.shape[1] else [f"x{q}" for q in range(X.shape[1])]
        encoder, judge, judged, back = module, module, X, np.eye(X.shape[1])
    elif space == "concepts":
        C = np.asarray(project.cavs, dtype=np.float64)
        X, names, encoder, back = concept_scores(Z, C), list(project.concept_names), ConceptDecoder(C), np.linalg.pinv(C)
        judge, judged = LatentIdentity(), Z
    else:
        X, names, encoder, back = Z, list(encode.latent_names), LatentIdentity(), np.eye(Z.shape[1])
        judge, judged = LatentIdentity(), Z
    k = spec.get("k")
    k = None if k is None else min(int(k), X.shape[1])
    eps = choose_epsilon(judge, judged, groups)
    evaluator = PairwiseEvaluator(judge, judged, groups, eps)
    labels, means = group_means(X, groups)
    explainers, l1 = {}, float("nan")
    for method in methods:
        explainers[method.name], weight = method().fit(spec, encoder, X, groups, labels, means, k, cfg["seed"])
        l1 = weight if weight is not None else l1
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
    return CounterfactualsArtifact(rows=rows, deltas=np.asarray(deltas, dtype=np.float64), feature_names=names,
                                   space=space, eps=eps, l1=l1, self_similarity=evaluator.self_similarity)


def counterfactuals_stage(encoder_loader: Callable[[], Encoder] | None = None) -> Stage:
    """The stage; ``encoder_loader()`` returns the fitted encoder behind the latents (called only
    on a cache miss, when input space is asked for or possible). Default: the encoder whose
    checkpoint the encode artifact names (:func:`pipeline.app.stages.encode.fitted_encoder`)."""
    return Stage("counterfactuals", ("load", "encode", "cluster", "project"), _config,
                 partial(_compute, encoder_loader=encoder_loader), version=2, artifact=CounterfactualsArtifact)


COUNTERFACTUALS = counterfactuals_stage()
