"""Greedy forward selection of concepts that maximise the explainability-to-noise ratio.

The MMDT paper names "improving concepts for clustering" as an open question: its error
bound depends on the concepts only through q (Eq. 6). q is monotone in the concept set
(more concepts can only raise the max over m), so the interesting problem is the best
*small* set: with at most ``max_concepts`` concepts, add at each step the concept that
raises q the most. Ties (frequent at first, while some pair of clusters is still
unseparated and q stays 0) are broken by the mean over cluster pairs of
``log(1 + best ratio)``, i.e. by how much the separations improve overall.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from pipeline.concepts.projection import pairwise_ratios, q_from_ratios
from pipeline.validation import InvalidInputError, check_matrix, check_vector


@dataclass
class SelectionResult:
    """Outcome of :func:`select_concepts`.

    Attributes
    ----------
    selected : list of int
        Indices of the chosen concepts, in the order they were added.
    names : list of str
    q_path : list of float
        q after each addition (``q_path[-1]`` is the q of the selected set).
    q_all : float
        q with every candidate concept.
    """

    selected: list[int]
    names: list[str]
    q_path: list[float] = field(default_factory=list)
    q_all: float = float("nan")

    @property
    def q_selected(self) -> float:
        return self.q_path[-1] if self.q_path else 0.0


def select_concepts(concept_means, concept_sigma, max_concepts: int, *, names: Sequence[str] | None = None,
                    tol: float = 0.0) -> SelectionResult:
    """Greedy forward selection of at most ``max_concepts`` concepts maximising q.

    Parameters
    ----------
    concept_means : array-like of shape (K, M)
        Cluster means in concept coordinates (``C μ_k``).
    concept_sigma : array-like of shape (M,)
        Per-concept standard deviations σ̄_m (Eq. 5).
    max_concepts : int
        Size bound (>= 1).
    names : sequence of str, optional
    tol : float, default=0
        Stop early once adding a concept raises q by no more than ``tol`` (and the
        tie-break score no longer improves).

    Returns
    -------
    SelectionResult
    """
    mu = check_matrix(concept_means, "concept_means", min_rows=2)
    sig = check_vector(concept_sigma, "concept_sigma", length=mu.shape[1])
    if (sig <= 0).any():
        raise InvalidInputError("concept_sigma must be > 0 for every concept.")
    M = mu.shape[1]
    if int(max_concepts) < 1:
        raise InvalidInputError(f"max_concepts must be >= 1, got {max_concepts}.")
    names = [f"concept_{m}" for m in range(M)] if names is None else [str(n) for n in names]
    if len(names) != M:
        raise InvalidInputError(f"got {len(names)} names for {M} concepts.")

    ratios = pairwise_ratios(mu, sig)  # (M, K, K)
    K = mu.shape[0]
    off = ~np.eye(K, dtype=bool)
    cand = ratios[:, off]  # (M, P): ratio of every concept on every cluster pair
    current = np.zeros(cand.shape[1])
    chosen: list[int] = []
    q_path: list[float] = []
    prev_q, prev_tie = -np.inf, -np.inf
    while len(chosen) < min(int(max_concepts), M):
        trial = np.maximum(current[None, :], cand)  # (M, P)
        q = trial.min(axis=1)
        tie = np.log1p(trial).mean(axis=1)
        q[chosen], tie[chosen] = -np.inf, -np.inf
        best = int(np.lexsort((-np.arange(M), tie, q))[-1])  # max q, then tie, then lowest index
        if chosen and q[best] <= prev_q + tol and tie[best] <= prev_tie + 1e-12:
            break
        chosen.append(best)
        current = trial[best]
        prev_q, prev_tie = float(q[best]), float(tie[best])
        q_path.append(prev_q)
    return SelectionResult(selected=chosen, names=[names[m] for m in chosen], q_path=q_path,
                           q_all=q_from_ratios(ratios))
