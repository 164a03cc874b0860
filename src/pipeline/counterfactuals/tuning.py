"""Sparsity levels: tuning TGT's l1 weight per k and the correctness/coverage-vs-k sweep.

Plumb et al. (Sec. 3.3) threshold every explanation to its ``k`` largest changes before
evaluating it, and tune TGT's ``lambda`` separately for each ``k`` to maximise correctness
(averaged over all ordered pairs of groups). Since thresholding happens after fitting, one
TGT fit per candidate ``lambda`` serves every ``k``. The similarity curve (Eq. 10) compares
each k-sparse explanation with the one for the next larger k.
"""

from __future__ import annotations

import logging
from typing import Sequence

import numpy as np
import pandas as pd
import torch
from pipeline.progress import tqdm

from pipeline.counterfactuals._checks import check_encoder, check_groups, check_k, encoder_dtype, eval_mode
from pipeline.counterfactuals.dbm import group_means
from pipeline.counterfactuals.quality import PairwiseEvaluator, choose_epsilon, mean_off_diagonal, similarity, top_k
from pipeline.counterfactuals.tgt import TGT
from pipeline.validation import InvalidInputError, check_vector

logger = logging.getLogger(__name__)


def l1_max(encoder, X, groups) -> float:
    """The l1 weight above which the zero translation is stationary for every pair.

    For pair ``(i, j)`` the zero translation satisfies the subgradient condition of Eq. 9
    iff ``lambda >= ||grad_delta ||r(x_i + delta) - r_j||^2 at 0||_inf``; this returns the
    largest such bound over ordered pairs -- the natural scale of ``lambda``.
    """
    X, groups, labels = check_groups(X, groups)
    check_encoder(encoder, X.shape[1])
    dtype = encoder_dtype(encoder)
    _, x_means = group_means(X, groups)
    with eval_mode(encoder), torch.no_grad():
        r_means = [encoder(torch.as_tensor(X[groups == g], dtype=dtype)).double().mean(0) for g in labels]
    bound = 0.0
    with eval_mode(encoder):
        for a in range(labels.size):
            x = torch.as_tensor(x_means[a], dtype=dtype).unsqueeze(0).requires_grad_(True)
            rep = encoder(x)[0].double()
            for b in range(labels.size):
                if a != b:
                    (g,) = torch.autograd.grad(((rep - r_means[b]) ** 2).sum(), x, retain_graph=True)
                    bound = max(bound, float(g.abs().max()))
    return bound


def default_l1_grid(encoder, X, groups, n: int = 10) -> np.ndarray:
    """``[0] + l1_max * geomspace(0.01, 1, n - 1)``: unregularised plus a log-spaced path.

    Useful weights for small k sit at a few tenths of :func:`l1_max` (beyond it every
    translation is zero), so the path is dense there.
    """
    return np.concatenate([[0.0], l1_max(encoder, X, groups) * np.geomspace(0.01, 1.0, n - 1)])


def _check_grid(l1_grid) -> np.ndarray:
    grid = check_vector(l1_grid, "l1_grid")
    if grid.size == 0 or (grid < 0).any():
        raise InvalidInputError(f"l1_grid must be a non-empty list of l1 weights >= 0, got {grid.tolist()}.")
    return grid


def fit_l1_path(encoder, X, groups, l1_grid, *, progress: bool = True, **tgt_params) -> list[TGT]:
    """Fit one :class:`TGT` per l1 weight in ``l1_grid`` (same seed and other parameters)."""
    grid = _check_grid(l1_grid)
    return [
        TGT(encoder, l1=float(lam), **tgt_params).fit(X, groups)
        for lam in tqdm(grid, desc="TGT l1 path", disable=not progress, leave=False)
    ]


def _select(models: Sequence[TGT], evaluator: PairwiseEvaluator, k: int | None):
    """Index of the model whose k-sparse explanations have the best mean correctness.

    Ties go to higher mean coverage, then to the larger l1 (sparser) model.
    """
    scores = []
    for idx, model in enumerate(models):
        cr, cv = evaluator.evaluate(lambda i, j, m=model: m.explanation(i, j, k))
        scores.append((round(mean_off_diagonal(cr), 12), round(mean_off_diagonal(cv), 12), model.l1, idx, cr, cv))
    best = max(scores, key=lambda s: s[:3])
    return best[3], best[4], best[5]


def tune_l1(encoder, X, groups, k: int | None, *, eps: float | None = None, l1_grid=None,
            progress: bool = True, **tgt_params) -> TGT:
    """Fit TGT for each l1 weight and return the one whose k-sparse explanations are most correct.

    Parameters
    ----------
    encoder : callable torch module, (n, d) -> (n, m)
    X : array-like of shape (n, d)
    groups : array-like of shape (n,)
    k : int or None
        Sparsity level the explanations will be thresholded to.
    eps : float or None
        Metric threshold; None chooses it with :func:`choose_epsilon`.
    l1_grid : array-like or None
        Candidate l1 weights; None uses :func:`default_l1_grid`.
    **tgt_params
        Other :class:`TGT` parameters (learning_rate, n_iter, random_state, ...).

    Returns
    -------
    TGT
        The fitted model; its ``l1`` is the chosen weight.
    """
    X, groups, _ = check_groups(X, groups)
    check_k(k, X.shape[1])
    eps = choose_epsilon(encoder, X, groups) if eps is None else eps
    grid = default_l1_grid(encoder, X, groups) if l1_grid is None else l1_grid
    models = fit_l1_path(encoder, X, groups, grid, progress=progress, **tgt_params)
    idx, _, _ = _select(models, PairwiseEvaluator(encoder, X, groups, eps), k)
    return models[idx]


def sparsity_sweep(encoder, X, groups, ks: Sequence[int], *, eps: float | None = None, l1_grid=None,
                   progress: bool = True, **tgt_params) -> pd.DataFrame:
    """Correctness, coverage and similarity of TGT and DBM explanations versus sparsity k (Figure 7).

    Parameters
    ----------
    encoder, X, groups
        As for :class:`TGT`.
    ks : sequence of int
        Sparsity levels, each in 1..d (sorted ascending internally).
    eps, l1_grid, progress, **tgt_params
        As for :func:`tune_l1`.

    Returns
    -------
    pandas.DataFrame
        One row per (method, k) with columns ``method`` ("TGT" or "DBM"), ``k``, ``l1`` (the
        weight chosen for this k; NaN for DBM), ``correctness`` and ``coverage`` (means over
        all ordered pairs of groups) and ``similarity`` -- the mean over pairs of
        ``similarity(e_k, e_k')`` with ``k'`` the next larger level (NaN for the largest k).
    """
    X, groups, labels = check_groups(X, groups)
    ks = sorted({check_k(int(k), X.shape[1]) for k in ks})
    if not ks:
        raise InvalidInputError("ks must list at least one sparsity level.")
    eps = choose_epsilon(encoder, X, groups) if eps is None else eps
    grid = default_l1_grid(encoder, X, groups) if l1_grid is None else l1_grid
    models = fit_l1_path(encoder, X, groups, grid, progress=progress, **tgt_params)
    evaluator = PairwiseEvaluator(encoder, X, groups, eps)
    _, means = group_means(X, groups)
    pos = {g: a for a, g in enumerate(labels)}
    explainers = {"TGT": {}, "DBM": {}}
    rows = []
    for k in tqdm(ks, desc="sparsity levels", disable=not progress, leave=False):
        idx, cr, cv = _select(models, evaluator, k)
        explainers["TGT"][k] = lambda i, j, m=models[idx], k=k: m.explanation(i, j, k)
        rows.append({"method": "TGT", "k": k, "l1": models[idx].l1,
                     "correctness": mean_off_diagonal(cr), "coverage": mean_off_diagonal(cv)})
        explainers["DBM"][k] = lambda i, j, k=k: top_k(means[pos[j]] - means[pos[i]], k)
        cr, cv = evaluator.evaluate(explainers["DBM"][k])
        rows.append({"method": "DBM", "k": k, "l1": np.nan,
                     "correctness": mean_off_diagonal(cr), "coverage": mean_off_diagonal(cv)})
    pairs = [(i, j) for i in labels for j in labels if i != j]
    for row in rows:
        k, method = row["k"], row["method"]
        nxt = [k2 for k2 in ks if k2 > k]
        if not nxt:
            row["similarity"] = np.nan
            continue
        e, e_next = explainers[method][k], explainers[method][nxt[0]]
        row["similarity"] = float(np.mean([similarity(e(i, j), e_next(i, j)) for i, j in pairs]))
    logger.info("sparsity sweep: eps=%.4g, %d groups, ks=%s", eps, labels.size, ks)
    return pd.DataFrame(rows, columns=["method", "k", "l1", "correctness", "coverage", "similarity"])
