"""TCAV's significance test, through the clustering (Kim et al. 2018; issue 48).

A concept's *TCAV score* for a cluster is the share of the cluster's rows whose posterior under
the reference clustering's head rises along the concept's CAV (a positive directional
derivative of ``log p(k | z)``, :meth:`pipeline.cluster_heads.MixtureHead.log_posterior_slopes`; its
``scaled`` form keeps the sign where the posterior saturates in float64).
A score near 1 (or 0) says that moving the cluster's points towards the concept makes them more
(or less) the cluster's; near 0.5, that the concept does not bear on it.

Whether a score means anything is tested against random example sets, as TCAV's own code does
(``tensorflow/tcav``, ``tcav.py`` and ``utils_plot.py``): CAVs of the concept against random example
sets drawn from a pool of inputs (here: rows of the explained data), CAVs between random sets (the
null: they mean nothing), and per cluster a two-sided t-test (``scipy.stats.ttest_ind``) between
the two groups' TCAV scores, Bonferroni-corrected over every concept × cluster pair tested; a
concept is significant when any of its clusters is.

The layout of the CAVs (``design``):

* ``"independent"`` (the default): each of the concept's ``n_random`` CAVs takes its own part of
  the concept's positives (disjoint parts) against its own random set, and each null CAV is a pair
  of random sets of its own. The t-test's samples are then independent, as it assumes;
* ``"tcav"``: TCAV's layout — ``n_random`` random sets, the concept (the same positives) against
  each, and each random set against every other. The concept's CAVs share their positives and the
  null's share their sets, so the scores within a group are correlated and the t-test rejects far
  more often than its level: a random sample of the data taken as a concept was "significant" in
  39% of the cluster tests at alpha .05 on VaDE's MNIST latents, against 2.5% with the default
  (``tests/test_concept_quality.py``; docs/concepts.md, "Concept quality").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from pipeline.validation import InvalidInputError


#: the fewest examples on each side of one of the test's CAVs (fewer: the concept is not tested); with fewer than
#: half as many as the latents have dimensions the test is weak (TCAVResult.weak)
MIN_SET = 5


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
    weak : dict of str to str
        Concepts tested with too few examples per CAV for the latents' dimension: a "not
        significant" says little about them (the caller may keep them).
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
    weak: dict = field(default_factory=dict)

    def line(self, pool: str = "rows of the explained data") -> str:
        """The test in one sentence, for under the concept table."""
        sizes = sorted({s for s, t in zip(self.set_sizes, self.tested) if t})
        if not sizes:
            return ("significance: TCAV's test (Kim et al. 2018) through the clustering was not run: no concept has "
                    f"enough examples for its {self.n_random} CAVs (why: below).")
        return (f"significance: TCAV's test (Kim et al. 2018) through the clustering — per concept and cluster, the "
                f"TCAV scores of {self.n_random} CAVs of the concept (each on its own {'/'.join(map(str, sizes))} "
                f"positives against as many random {pool}) against those of {self.n_random} CAVs between random sets, "
                f"two-sided t-test, Bonferroni over {self.n_tests} concept × cluster tests, alpha {self.alpha:g}.")


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
              alpha: float = 0.05, design: str = "independent", random_state=0) -> TCAVResult:
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
        CAVs per concept and in the null.
    max_set : int, default=200
        The most examples on each side of one CAV.
    design : {"independent", "tcav"}, default="independent"
        ``"independent"``: every CAV has examples of its own (see the module text); ``"tcav"``: TCAV's
        own layout, ``n_random`` random sets, the concept against each and each against every other.
    """
    if n_random < 2:
        raise InvalidInputError(f"n_random={n_random}: the t-test needs at least 2 random example sets (TCAV uses 20 "
                                "or more).")
    if design not in ("independent", "tcav"):
        raise InvalidInputError(f"design={design!r}; choose 'independent' or 'tcav'.")
    pool = np.asarray(pool, dtype=np.float64)
    rng = np.random.default_rng(random_state)
    M, N = len(names), int(n_random)
    reasons: dict[str, str] = {}
    weak: dict[str, str] = {}
    # independent: a concept's N CAVs take N disjoint parts of its positives; tcav: at most max_set of them each
    sizes = [min(int(max_set), len(p) // N, len(pool) // (2 * N)) if design == "independent"
             else min(int(max_set), len(p)) for p in positives]
    nulls: dict[int, list[int]] = {}  # set size -> the problems of its null CAVs
    problems, owner = [], []
    for m, (P, s) in enumerate(zip(positives, sizes)):
        P = np.asarray(P, dtype=np.float64)
        least = MIN_SET if design == "independent" else 2
        if s < least:
            reasons[names[m]] = (f"too few examples for the test ({N} CAVs, each on its own {least} positives and "
                                 f"{least} random examples, need {least * N} positive examples and a pool of "
                                 f"{2 * least * N} random ones; the pool has {len(pool)}); it has {len(P)}"
                                 if design == "independent" else
                                 f"the test needs at least 2 positive examples; it has {len(P)}")
            continue
        powered = -(-pool.shape[1] // 2)
        if design == "independent" and s < powered:
            weak[names[m]] = (f"each of its test CAVs has {s} examples per side in {pool.shape[1]} latent dimensions "
                              f"(fewer than half as many), so a CAV is mostly noise and the test could miss the concept")
        if s not in nulls:
            if design == "independent":  # N pairs of disjoint random sets
                order = rng.permutation(len(pool))[:2 * N * s].reshape(2 * N, s)
                pairs = [(order[2 * i], order[2 * i + 1]) for i in range(N)]
            else:
                try:
                    sets = random_sets(len(pool), s, N, rng)
                except InvalidInputError as exc:
                    reasons[names[m]] = str(exc)
                    continue
                pairs = [(sets[i], sets[j]) for i in range(N) for j in range(N) if i != j]
            nulls[s] = []
            for a, b in pairs:
                nulls[s].append(len(problems))
                problems.append(_problem(pool[np.sort(a)], pool[np.sort(b)]))
                owner.append(-1)
        parts = (rng.permutation(len(P))[:N * s].reshape(N, s) if design == "independent"
                 else [rng.choice(len(P), s, replace=False) for _ in range(N)])
        negatives = (rng.permutation(len(pool))[:N * s].reshape(N, s) if design == "independent"
                     else random_sets(len(pool), s, N, rng))
        for part, neg in zip(parts, negatives):
            problems.append(_problem(P[np.sort(part)], pool[np.sort(neg)]))
            owner.append(m)
    raw = np.full((M, n_clusters), np.nan)
    concept_scores: list = [None] * M
    null_scores: list = [None] * M
    if problems:
        C = np.asarray(directions(problems), dtype=np.float64)
        scores = tcav_scores(slopes(C), clusters, n_clusters)  # (R, K)
        owners = np.asarray(owner)
        for m in range(M):
            if names[m] in reasons:
                continue
            mine, null = scores[owners == m], scores[nulls[sizes[m]]]
            concept_scores[m], null_scores[m] = mine, null
            raw[m] = [_two_sided_p(mine[:, k], null[:, k]) for k in range(n_clusters)]
    tested_pairs = int(np.isfinite(raw).sum())
    adjusted = np.minimum(1.0, raw * max(tested_pairs, 1))
    tested = np.isfinite(raw).any(axis=1)
    significant = tested & (np.nan_to_num(adjusted, nan=1.0) < alpha).any(axis=1)
    return TCAVResult(list(names), adjusted, raw, concept_scores, null_scores, significant, tested, float(alpha),
                      N, sizes, tested_pairs, reasons, weak)


def _problem(positives: np.ndarray, negatives: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    Z = np.vstack([positives, negatives])
    y = np.concatenate([np.ones(len(positives)), np.zeros(len(negatives))])
    return Z, y
