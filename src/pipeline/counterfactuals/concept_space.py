"""Counterfactual translations between clusters expressed in concept coordinates.

Beyond Plumb et al.: instead of translating input features, translate *concept scores*.
With a CAV matrix ``C`` of shape (M, m) -- one concept activation vector per row, in the
encoder's latent space of dimension m -- a latent ``z`` has concept coordinates ``s = C z``.
A concept-space translation ``delta_c`` (M,) ("cluster 3 -> 7: +1.1 loop, -0.6 vertical
line") acts on latents through the least-norm latent change that produces it::

    delta_z = pinv(C) @ delta_c        (exactly C delta_z = delta_c when C has full row rank)

and is judged by the usual correctness / coverage (Eqs. 3-4) on the latents themselves,
``z -> z + delta_z`` from cluster i onto cluster j, with ``eps`` chosen on the latents.

* Concept DBM is the difference of mean concept scores, ``C (mean z_j - mean z_i)``.
* Concept TGT runs :class:`TGT` on the concept scores ``S = Z C^T`` with the linear
  "encoder" ``s -> pinv(C) s`` (:class:`ConceptDecoder`). Its loss differs from the loss on
  the real latents only by a constant (the part of ``z_j - z_i`` outside the row space of C,
  which no concept translation can reach), so it optimises the latent-space objective, and
  its explanations are symmetric and transitive by construction.

Only a plain numpy CAV matrix is needed; this module does not depend on
:mod:`pipeline.concepts`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from pipeline.concepts.projection import project
from pipeline.counterfactuals._checks import check_group_label, check_groups, check_k
from pipeline.counterfactuals.quality import PairwiseEvaluator, choose_epsilon, top_k
from pipeline.counterfactuals.tgt import TGT
from pipeline.validation import InvalidInputError, check_matrix, check_vector


def check_cav_matrix(C, n_latent: int | None = None) -> np.ndarray:
    """Validate a CAV matrix of shape (M concepts, m latent dims); rows must be non-zero."""
    C = check_matrix(C, "C (CAV matrix)")
    if n_latent is not None and C.shape[1] != n_latent:
        raise InvalidInputError(
            f"C has {C.shape[1]} columns but the latents have {n_latent} dimensions; the CAVs must live in "
            "the same latent space as Z (C of shape (n_concepts, latent_dim))."
        )
    zero = np.flatnonzero(~np.abs(C).any(axis=1))
    if zero.size:
        raise InvalidInputError(f"CAV row(s) {zero.tolist()} are all zero; drop those concepts.")
    return C


def concept_scores(Z, C) -> np.ndarray:
    """Concept coordinates ``S = Z C^T`` of latents Z (n, m) for CAVs C (M, m); shape (n, M)."""
    Z = check_matrix(Z, "Z")
    return project(Z, check_cav_matrix(C, Z.shape[1]))


def concept_to_latent(delta_c, C, rcond: float = 1e-10) -> np.ndarray:
    """Least-norm latent translation (m,) whose concept coordinates are closest to ``delta_c`` (M,)."""
    C = check_cav_matrix(C)
    delta_c = check_vector(delta_c, "delta_c", length=C.shape[0])
    return np.linalg.pinv(C, rcond=rcond) @ delta_c


class ConceptDecoder(torch.nn.Module):
    """The linear map ``s -> pinv(C) s`` from concept coordinates (M,) to latents (m,).

    Used as TGT's encoder when translating in concept space.

    Parameters
    ----------
    C : ndarray of shape (M, m)
        CAV matrix.
    rcond : float
        Cut-off for small singular values in the pseudo-inverse.
    """

    def __init__(self, C, rcond: float = 1e-10):
        super().__init__()
        C = check_cav_matrix(C)
        self.register_buffer("pinv", torch.as_tensor(np.linalg.pinv(C, rcond=rcond), dtype=torch.float64))

    def forward(self, s: torch.Tensor) -> torch.Tensor:
        return s.to(self.pinv.dtype) @ self.pinv.T


class LatentIdentity(torch.nn.Module):
    """The identity on latents, in float64: the "encoder" for judging latent translations."""

    def __init__(self):
        super().__init__()
        # an empty float64 buffer makes the metrics feed float64 tensors (see encoder_dtype)
        self.register_buffer("anchor", torch.zeros(0, dtype=torch.float64))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return z.to(torch.float64)


def concept_dbm(Z, groups, C, i, j, k: int | None = None) -> np.ndarray:
    """Difference of mean concept scores from cluster ``i`` to ``j``, top-``k`` thresholded; shape (M,)."""
    Z, groups, labels = check_groups(Z, groups)
    C = check_cav_matrix(C, Z.shape[1])
    a, b = check_group_label(i, labels, "i"), check_group_label(j, labels, "j")
    check_k(k, C.shape[0])
    diff = Z[groups == labels[b]].mean(axis=0) - Z[groups == labels[a]].mean(axis=0)
    return top_k(C @ diff, k)


def fit_concept_tgt(Z, groups, C, **tgt_params) -> TGT:
    """Fit :class:`TGT` in concept coordinates; its explanations have shape (M,).

    Parameters
    ----------
    Z : array-like of shape (n, m)
        Latents (the encoder's output).
    groups : array-like of shape (n,)
        Cluster labels; -1 (noise) is ignored.
    C : array-like of shape (M, m)
        CAV matrix.
    **tgt_params
        :class:`TGT` parameters other than the encoder (l1, learning_rate, n_iter, ...).
    """
    Z = check_matrix(Z, "Z")
    C = check_cav_matrix(C, Z.shape[1])
    return TGT(ConceptDecoder(C), **tgt_params).fit(project(Z, C), groups)


def concept_evaluator(Z, groups, eps: float | None = None) -> PairwiseEvaluator:
    """Correctness/coverage evaluator on the latents themselves (eps chosen on Z if None)."""
    enc = LatentIdentity()
    eps = choose_epsilon(enc, Z, groups) if eps is None else eps
    return PairwiseEvaluator(enc, Z, groups, eps)


def concept_pairwise_metrics(Z, groups, C, explanation, eps: float | None = None):
    """Correctness and coverage on latents of concept-space explanations for all pairs.

    Parameters
    ----------
    Z : array-like of shape (n, m)
    groups : array-like of shape (n,)
    C : array-like of shape (M, m)
    explanation : callable ``(label_i, label_j) -> ndarray of shape (M,)``
        E.g. ``lambda i, j: model.explanation(i, j, k)`` for a concept TGT.
    eps : float or None

    Returns
    -------
    labels (l,), correctness (l, l), coverage (l, l)
        As :func:`pipeline.counterfactuals.pairwise_metrics`.
    """
    Z = check_matrix(Z, "Z")
    C = check_cav_matrix(C, Z.shape[1])
    pinv = np.linalg.pinv(C, rcond=1e-10)
    ev = concept_evaluator(Z, groups, eps)
    cr, cv = ev.evaluate(lambda i, j: pinv @ check_vector(explanation(i, j), "delta_c", length=C.shape[0]))
    return ev.labels, cr, cv


def describe(delta_c, concept_names: Sequence[str], k: int | None = None, digits: int = 1) -> str:
    """Readable concept translation, largest changes first: ``"+1.1 loop, -0.6 vertical line"``.

    Parameters
    ----------
    delta_c : array-like of shape (M,)
    concept_names : sequence of M str
    k : int or None
        Show only the k largest changes.
    digits : int
        Decimals shown.
    """
    delta_c = check_vector(delta_c, "delta_c")
    if len(concept_names) != delta_c.shape[0]:
        raise InvalidInputError(
            f"{len(concept_names)} concept names for {delta_c.shape[0]} coordinates; they must match."
        )
    kept = top_k(delta_c, k)
    order = [q for q in np.argsort(-np.abs(kept), kind="stable") if kept[q] != 0]
    if not order:
        return "no change"
    return ", ".join(f"{kept[q]:+.{digits}f} {concept_names[q]}" for q in order)
