"""TGT: Transitive Global Translations (Plumb et al., ICML 2020, Algorithms 1-3).

TGT explains the differences between ``l`` groups of points with one translation per
non-reference group, ``delta_g = t_{ref -> g}``. Any pairwise explanation is composed from
these basis translations (Algorithm 2)::

    delta_{i->j} = delta_j - delta_i        (delta_ref = 0)

so the explanations are symmetric (``delta_{j->i} = -delta_{i->j}``) and transitive
(``delta_{i->k} = delta_{i->j} + delta_{j->k}``) by construction. The basis is learned by
repeatedly sampling a pair ``i != j`` and taking a (clipped) gradient step on the
compressed-sensing loss (Eq. 9), with ``x_i`` / ``r_j`` the group means in input / representation
space::

    v(delta_{i->j}) = ||r(x_i + delta_{i->j}) - r_j||_2^2 + l1 * ||delta_{i->j}||_1

whose gradient (autograd through the encoder ``r``) is split between the basis translations
that make up ``delta_{i->j}`` (Algorithm 3). Convergence (the paper defers it to its code):
the full objective -- Eq. 9 averaged over all ordered pairs, evaluated in one batched
forward pass every ``consecutive_steps`` steps -- has not improved by a relative ``tol`` for
``patience`` steps; the basis with the best full objective is returned. (The authors' code
tracks a moving average of the sampled single-pair losses instead, which is noisy because
pairs differ in difficulty.)
"""

from __future__ import annotations

import logging

import numpy as np
import torch
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from pipeline.counterfactuals._checks import (
    check_encoder,
    check_group_label,
    check_groups,
    check_k,
    encode,
    encoder_dtype,
    eval_mode,
)
from pipeline.counterfactuals.quality import top_k
from pipeline.validation import InvalidInputError

logger = logging.getLogger(__name__)


def _check_positive(value, name: str, *, allow_zero: bool = False) -> float:
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool) and np.isfinite(value)
    if not ok or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise InvalidInputError(f"{name} must be a finite number {bound}, got {value!r}.")
    return float(value)


class TGT(BaseEstimator):
    """Transitive Global Translations between groups of points, through a differentiable encoder.

    Parameters
    ----------
    encoder : callable torch module
        The representation ``r``: maps a float tensor (n, d) to (n, m), differentiably in
        its input. It is used in eval mode and never modified.
    l1 : float, default=0.01
        Weight ``lambda >= 0`` of the l1 penalty on every pairwise translation; larger gives
        sparser explanations. Tune it per sparsity level with
        :func:`pipeline.counterfactuals.tune_l1`.
    learning_rate : float, default=0.01
        Step size ``alpha`` of Algorithm 3.
    n_iter : int, default=5000
        Maximum number of gradient steps.
    random_state : int, RandomState or None
        Seeds the sampling of group pairs.
    consecutive_steps : int, default=10
        Steps taken on one sampled pair before sampling the next.
    clip : float, default=5.0
        Each gradient entry is clipped to ``[-clip, clip]`` before the update.
    tol : float, default=1e-4
        Relative improvement of the full objective (Eq. 9 averaged over all ordered pairs,
        evaluated every ``consecutive_steps`` steps) that counts as progress.
    patience : int, default=1000
        Stop after this many steps without progress of the full objective.

    Attributes
    ----------
    groups_ : ndarray of shape (l,)
        Sorted group labels; ``groups_[0]`` is the reference group.
    reference_ : int
        Label of the reference group.
    deltas_ : ndarray of shape (l - 1, d)
        Basis translations ``delta_g = t_{reference -> g}`` for ``g = groups_[1:]``.
    x_means_ : ndarray of shape (l, d)
        Group means in input space.
    r_means_ : ndarray of shape (l, m)
        Group means in representation space (mean of ``r(x)``, not ``r`` of the mean).
    loss_curve_ : ndarray of shape (n_checks,)
        The full objective at every check (every ``consecutive_steps`` steps) and at the end.
    n_iter_ : int
        Steps taken.
    converged_ : bool
        Whether the convergence criterion stopped the run before ``n_iter``.
    """

    def __init__(
        self,
        encoder=None,
        l1: float = 0.01,
        learning_rate: float = 0.01,
        n_iter: int = 5000,
        random_state=None,
        *,
        consecutive_steps: int = 10,
        clip: float = 5.0,
        tol: float = 1e-4,
        patience: int = 1000,
    ):
        self.encoder = encoder
        self.l1 = l1
        self.learning_rate = learning_rate
        self.n_iter = n_iter
        self.random_state = random_state
        self.consecutive_steps = consecutive_steps
        self.clip = clip
        self.tol = tol
        self.patience = patience

    def _check_params(self) -> None:
        _check_positive(self.l1, "l1 (the l1 weight lambda)", allow_zero=True)
        _check_positive(self.learning_rate, "learning_rate")
        _check_positive(self.clip, "clip")
        _check_positive(self.tol, "tol", allow_zero=True)
        for name in ("n_iter", "consecutive_steps", "patience"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise InvalidInputError(f"{name} must be a positive integer, got {value!r}.")

    def fit(self, X, groups, y=None) -> "TGT":
        """Learn the basis translations.

        Parameters
        ----------
        X : array-like of shape (n, d)
            Points in input space (the encoder's input).
        groups : array-like of shape (n,)
            Integer group labels, e.g. clusters of ``r(X)``; -1 (noise) is ignored. At least
            two groups of at least two points each.

        Returns
        -------
        self
        """
        self._check_params()
        X, groups, labels = check_groups(X, groups)
        check_encoder(self.encoder, X.shape[1])
        rng = check_random_state(self.random_state)
        self.groups_ = labels
        self.reference_ = int(labels[0])
        self.x_means_ = np.stack([X[groups == g].mean(axis=0) for g in labels])
        self.r_means_ = np.stack([encode(self.encoder, X[groups == g]).mean(axis=0) for g in labels])
        basis, curve, steps = self._optimise(rng)
        self.deltas_ = basis[1:].numpy()
        self.loss_curve_ = np.asarray(curve)
        self.n_iter_ = steps
        self.converged_ = steps < self.n_iter
        logger.info("TGT l1=%g: %d steps, converged=%s, best objective %.4g",
                    self.l1, self.n_iter_, self.converged_, float(np.min(curve)))
        return self

    def _objective(self, basis: torch.Tensor, pairs: tuple[torch.Tensor, torch.Tensor], x_means, r_means) -> float:
        """Eq. 9 averaged over all ordered pairs of groups (one batched forward pass)."""
        a, b = pairs
        deltas = (basis[b] - basis[a]).to(x_means.dtype)
        with torch.no_grad():
            reps = self.encoder(x_means[a] + deltas)
            losses = ((reps - r_means[b]) ** 2).sum(1) + self.l1 * deltas.abs().sum(1)
        return float(losses.double().mean())

    def _optimise(self, rng) -> tuple[torch.Tensor, list[float], int]:
        """Algorithm 1 with the updates of Algorithm 3; row 0 of the basis is the reference (fixed 0).

        Every ``consecutive_steps`` steps a new pair is sampled and the full objective
        (Eq. 9 averaged over all ordered pairs) is evaluated; the run stops once it has not
        improved by a relative ``tol`` for ``patience`` steps, returning the best basis seen.
        """
        n_groups, dim = self.x_means_.shape
        dtype = encoder_dtype(self.encoder)
        x_means = torch.as_tensor(self.x_means_, dtype=dtype)
        r_means = torch.as_tensor(self.r_means_, dtype=dtype)
        grid = torch.cartesian_prod(torch.arange(n_groups), torch.arange(n_groups))
        grid = grid[grid[:, 0] != grid[:, 1]]
        pairs = (grid[:, 0], grid[:, 1])
        basis = torch.zeros((n_groups, dim), dtype=torch.float64)
        best_basis, best, best_step = basis.clone(), np.inf, 0
        curve: list[float] = []
        a = b = 0
        step = 0
        with eval_mode(self.encoder):
            for step in range(self.n_iter):
                if step % self.consecutive_steps == 0:
                    value = self._objective(basis, pairs, x_means, r_means)
                    if not np.isfinite(value):
                        raise InvalidInputError(
                            f"TGT diverged (objective {value}) at step {step}; lower learning_rate "
                            f"(now {self.learning_rate})."
                        )
                    curve.append(value)
                    if best == np.inf or value < best - self.tol * abs(best):
                        best, best_step, best_basis = value, step, basis.clone()
                    elif step - best_step > self.patience:
                        break
                    a, b = (int(v) for v in rng.choice(n_groups, size=2, replace=False))
                delta = (basis[b] - basis[a]).to(dtype).requires_grad_(True)
                rep = self.encoder((x_means[a] + delta).unsqueeze(0))[0]
                loss = ((rep - r_means[b]) ** 2).sum() + self.l1 * delta.abs().sum()
                (grad,) = torch.autograd.grad(loss, delta)
                step_vec = self.learning_rate * grad.to(torch.float64).clamp_(-self.clip, self.clip)
                # Algorithm 3: split the gradient of delta_{a->b} = basis[b] - basis[a].
                if a == 0:
                    basis[b] -= step_vec
                elif b == 0:
                    basis[a] += step_vec
                else:
                    basis[b] -= 0.5 * step_vec
                    basis[a] += 0.5 * step_vec
            else:
                step = self.n_iter
            final = self._objective(basis, pairs, x_means, r_means)
        if final < best:
            best_basis = basis.clone()
        curve.append(final)
        return best_basis, curve, step

    def explanation(self, i, j, k: int | None = None) -> np.ndarray:
        """The translation ``delta_{i->j}`` from group ``i`` to group ``j`` (Algorithm 2).

        Parameters
        ----------
        i, j : int
            Group labels (values of ``groups_``).
        k : int or None
            Keep only the ``k`` largest-magnitude changes (Sec. 3.3); None keeps all.
            Thresholded explanations are no longer exactly transitive.

        Returns
        -------
        ndarray of shape (d,)
        """
        check_is_fitted(self, "deltas_")
        a = check_group_label(i, self.groups_, "i")
        b = check_group_label(j, self.groups_, "j")
        basis = np.vstack([np.zeros((1, self.deltas_.shape[1])), self.deltas_])
        check_k(k, basis.shape[1])
        return top_k(basis[b] - basis[a], k)
