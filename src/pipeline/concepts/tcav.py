"""TCAV's significance test, through the clustering (Kim et al. 2018; issue 48).

A concept's *TCAV score* for a cluster is the share of the cluster's rows whose posterior under
the reference clustering's head rises along the concept's CAV (a positive directional
derivative of ``log p(k | z)``, :meth:`pipeline.cluster_heads.MixtureHead.log_posterior_slopes`).
A score near 1 (or 0) says that moving the cluster's points towards the concept makes them more
(or less) the cluster's; near 0.5, that the concept does not bear on it.

Whether a score means anything is tested as TCAV's own code tests it (``tensorflow/tcav``,
``utils.py`` and ``tcav.py``): ``n_random`` random example sets ``R_1 … R_N`` are drawn from a pool
of inputs (here: rows of the explained data); the concept is fitted against each (``concept vs
R_i``: N CAVs), and a further random set ``R_0`` against each (``R_0 vs R_i``: the null CAVs, which
mean nothing). For every cluster, a two-sided t-test (``scipy.stats.ttest_ind``) compares the N
concept scores with the N null scores; the p-values are Bonferroni-corrected over every concept ×
cluster pair tested, and a concept is significant when any of its clusters is. On concepts that
mean nothing (random example sets themselves), the uncorrected p-values reject at about the
test's level (tested).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from pipeline.validation import InvalidInputError


def tcav_scores(slopes: np.ndarray, clusters: np.ndarray, n_clusters: int) -> np.ndarray:
    """Share of each cluster's rows whose posterior of their own cluster rises along each direction.

    ``slopes``: (n, K, R) directional derivatives of ``log p(k | z)`` at the rows; ``clusters``: (n,)
    each row's cluster (rows < 0 left out). Returns (R, K); NaN for a cluster without rows."""
    slopes = np.asarray(slopes, dtype=np.float64)
    clusters = np.asarray(clusters)
    out = np.full((slopes.shape[2], n_clusters), np.nan)
    for k in range(n_clusters):
        rows = np.flatnonzero(clusters == k)
        if rows.size:
            out[:, k] = (slopes[rows, k, :] > 0).mean(axis=0)
    return out


def random_sets(n_pool: int, size: int, n_sets: int, rng: np.random.Generator) -> list[np.ndarray]:
    """``n_sets`` different random subsets of ``size`` of ``range(n_pool)`` (sorted index arrays); an
    :class:`InvalidInputError` when fewer than ``n_sets`` different subsets exist."""
    if size < 1 or n_pool < size:
        raise InvalidInputError(f"random example sets of {size} need a pool of at least {size} examples; the pool has "
                                f"{n_pool}.")
    possible = math.comb(n_pool, size)
    if possible < n_sets:
        raise InvalidInputError(f"only {possible} different random example set(s) of {size} can be drawn from a pool of "
                                f"{n_pool}, fewer than the {n_sets} the test needs")
    seen, out = set(), []
    while len(out) < n_sets:
        idx = np.sort(rng.choice(n_pool, size, replace=False))
        key = idx.tobytes()
        if key not in seen:
            seen.add(key)
            out.append(idx)
    return out


@dataclass
class TCAVResult:
    """Outcome of :func:`tcav_test`.

    Attributes
    ----------
    names : list of str
    p_values : ndarray of shape (M, K)
        Bonferroni-adjusted (over every tested concept × cluster) two-sided p-values; NaN untested.
    raw_p_values : ndarray of shape (M, K)
    concept_scores, null_scores : list of ndarray of shape (n_random, K)
        TCAV scores of each concept's ``concept vs R_i`` CAVs and of its null CAVs.
    significant : ndarray of bool, shape (M,)
        Some cluster's adjusted p-value below ``alpha``.
    tested : ndarray of bool, shape (M,)
    reasons : dict of str to str
        Why a concept was not tested.
    """

    names: list
    p_values: np.ndarray
    raw_p_values: np.ndarray
    concept_scores: list
    null_scores: list
    significant: np.ndarray
    tested: np.ndarray
    alpha: float
    n_random: int
    set_sizes: list
    n_tests: int
    reasons: dict = field(default_factory=dict)

    def line(self, pool: str = "rows of the explained data") -> str:
        """The test in one sentence, for under the concept table."""
        sizes = sorted({s for s in self.set_sizes if s})
        return (f"significance: TCAV's test (Kim et al. 2018) through the clustering — per concept and cluster, the "
                f"TCAV scores of {self.n_random} CAVs of the concept against {self.n_random} random example sets "
                f"({', '.join(map(str, sizes)) or '–'} {pool} each) against those of {self.n_random} CAVs between "
                f"random sets, two-sided t-test, Bonferroni over {self.n_tests} concept × cluster tests, "
                f"alpha {self.alpha:g}.")


def _two_sided_p(a: np.ndarray, b: np.ndarray) -> float:
    from scipy import stats

    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if a.size < 2 or b.size < 2:
        return float("nan")
    if max(a.std(), b.std()) < 1e-12:  # constant scores: the t statistic is undefined
        return 0.0 if abs(a.mean() - b.mean()) > 1e-12 else 1.0
    return float(stats.ttest_ind(a, b).pvalue)


def tcav_test(positives: Sequence[np.ndarray], names: Sequence[str], pool: np.ndarray,
              directions: Callable[[list], np.ndarray], slopes: Callable[[np.ndarray], np.ndarray],
              clusters: np.ndarray, n_clusters: int, *, n_random: int = 20, max_set: int = 200,
              alpha: float = 0.05, random_state=0) -> TCAVResult:
    """TCAV's significance test of M concepts through a clustering (see the module text).

    Parameters
    ----------
    positives : sequence of ndarray of shape (P_m, d)
        Each concept's positive examples (latents).
    names : sequence of str
    pool : ndarray of shape (P, d)
        Latents the random example sets are drawn from.
    directions : callable
        ``directions([(Z, y), ...]) -> (R, d)``: one unit CAV per problem (rows ``Z``, 0/1 labels ``y``;
        positives 1), fitted as the concepts' CAVs are.
    slopes : callable
        ``slopes(C (R, d)) -> (n, K, R)``: directional derivatives of ``log p(k | z)`` at the test rows.
    clusters : ndarray of shape (n,)
        The test rows' reference clusters.
    n_random : int, default=20
        Random example sets (and null CAVs) per set size.
    max_set : int, default=200
        A concept's CAVs use at most this many of its positives, and random sets of the same size.
    """
    if n_random < 2:
        raise InvalidInputError(f"n_random={n_random}: the t-test needs at least 2 random example sets (TCAV uses 20 "
                                "or more).")
    pool = np.asarray(pool, dtype=np.float64)
    rng = np.random.default_rng(random_state)
    M = len(names)
    sizes = [min(int(max_set), len(p)) for p in positives]
    reasons: dict[str, str] = {}
    sets_by_size: dict[int, list[np.ndarray]] = {}
    problems, owner = [], []  # (rows, labels) of every CAV; owner: (concept or -1 for the null, size)
    for m, (P, s) in enumerate(zip(positives, sizes)):
        if s < 2:
            reasons[names[m]] = f"it has {len(P)} positive example(s); the test needs at least 2"
            continue
        if s not in sets_by_size:
            try:
                sets_by_size[s] = random_sets(len(pool), s, n_random + 1, rng)
            except InvalidInputError as exc:
                reasons[names[m]] = str(exc)
                continue
            r0 = pool[sets_by_size[s][0]]
            for idx in sets_by_size[s][1:]:  # the null: R_0 against R_i
                problems.append(_problem(r0, pool[idx]))
                owner.append((-1, s))
        P = np.asarray(P, dtype=np.float64)
        for idx in sets_by_size[s][1:]:
            pos = P if len(P) == s else P[np.sort(rng.choice(len(P), s, replace=False))]
            problems.append(_problem(pos, pool[idx]))
            owner.append((m, s))
    raw = np.full((M, n_clusters), np.nan)
    concept_scores: list = [None] * M
    null_scores: list = [None] * M
    if problems:
        C = np.asarray(directions(problems), dtype=np.float64)
        scores = tcav_scores(slopes(C), clusters, n_clusters)  # (R, K)
        owners = np.array([o[0] for o in owner])
        size_of = np.array([o[1] for o in owner])
        for m in range(M):
            if names[m] in reasons:
                continue
            mine = scores[owners == m]
            null = scores[(owners == -1) & (size_of == sizes[m])]
            concept_scores[m], null_scores[m] = mine, null
            raw[m] = [_two_sided_p(mine[:, k], null[:, k]) for k in range(n_clusters)]
    tested_pairs = int(np.isfinite(raw).sum())
    adjusted = np.minimum(1.0, raw * max(tested_pairs, 1))
    tested = np.isfinite(raw).any(axis=1)
    significant = tested & (np.nan_to_num(adjusted, nan=1.0) < alpha).any(axis=1)
    return TCAVResult(list(names), adjusted, raw, concept_scores, null_scores, significant, tested, float(alpha),
                      int(n_random), sizes, tested_pairs, reasons)


def _problem(positives: np.ndarray, negatives: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    Z = np.vstack([positives, negatives])
    y = np.concatenate([np.ones(len(positives)), np.zeros(len(negatives))])
    return Z, y
