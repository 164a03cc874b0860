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
that make up ``delta_{i->j}`` (Algorithm 3). Convergence: an exponential moving average of
the sampled losses has not improved (relatively) by ``tol`` for ``patience`` iterations; the
basis at the best moving average is returned.
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
from pipeline.counterfactuals.metrics import top_k
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
        Relative improvement of the loss moving average that counts as progress.
    patience : int, default=1000
        Stop after this many steps without progress (and at least this many steps).
    discount : float, default=0.99
        Decay of the loss moving average.

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
    loss_curve_ : ndarray of shape (n_iter_,)
        Moving average of the sampled loss per step.
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
        discount: float = 0.99,
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
        self.discount = discount

    def _check_params(self) -> None:
        _check_positive(self.l1, "l1 (the l1 weight lambda)", allow_zero=True)
        _check_positive(self.learning_rate, "learning_rate")
        _check_positive(self.clip, "clip")
        _check_positive(self.tol, "tol", allow_zero=True)
        for name in ("n_iter", "consecutive_steps", "patience"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise InvalidInputError(f"{name} must be a positive integer, got {value!r}.")
        if not 0 <= self.discount < 1:
            raise InvalidInputError(f"discount must be in [0, 1), got {self.discount!r}.")

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
        basis, curve = self._optimise(rng)
        self.deltas_ = basis[1:].numpy()
        self.loss_curve_ = np.asarray(curve)
        self.n_iter_ = len(curve)
        self.converged_ = self.n_iter_ < self.n_iter
        logger.info("TGT l1=%g: %d steps, converged=%s, best loss EMA %.4g",
                    self.l1, self.n_iter_, self.converged_, float(np.min(curve)))
        return self

    def _optimise(self, rng) -> tuple[np.ndarray, list[float]]:
        """Algorithm 1 with the updates of Algorithm 3; row 0 of the basis is the reference (fixed 0)."""
        n_groups, dim = self.x_means_.shape
        dtype = encoder_dtype(self.encoder)
        x_means = torch.as_tensor(self.x_means_, dtype=dtype)
        r_means = torch.as_tensor(self.r_means_, dtype=dtype)
        basis = torch.zeros((n_groups, dim), dtype=torch.float64)
        best_basis, best, best_step, ema = basis.clone(), np.inf, 0, None
        curve: list[float] = []
        a = b = 0
        with eval_mode(self.encoder):
            for step in range(self.n_iter):
                if step % self.consecutive_steps == 0:
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
                value = float(loss.detach())
                if not np.isfinite(value):
                    raise InvalidInputError(
                        f"TGT diverged (loss {value}) at step {step}; lower learning_rate (now {self.learning_rate})."
                    )
                ema = value if ema is None else self.discount * ema + (1 - self.discount) * value
                curve.append(ema)
                if ema < best - self.tol * abs(best) or best == np.inf:
                    best, best_step, best_basis = ema, step, basis.clone()
                elif step - best_step > self.patience and step >= self.patience:
                    break
        return best_basis, curve

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
