"""The element-wise part of a batch of logistic losses, fused: one pass over a tile's logits.

For a tile's logits ``L`` (rows × problems), counts ``c`` and targets ``t``,
:func:`logistic_terms` returns per problem the loss ``Σ_i c_i (log(1 + e^L) - t L)`` and the
residual sum ``Σ_i c_i (σ(L) - t)``, and overwrites ``L`` with the residuals ``c (σ(L) - t)``
(the operand of the gradient's matrix product); with ``D`` it also fills the Newton weights
``c σ (1 - σ)``. Entries with count 0 (rows a problem does not use) cost no exponential.

The compiled loop (numba, GIL released) and :func:`logistic_terms_numpy` compute the same
values (the same formulas; sums in another order); tests/test_batched_logistic.py compares
them. ``log(1 + e^L)`` is ``log1p(e^-|L|) + max(L, 0)``, ``σ(L)`` is ``1 / (1 + e^-L)`` or
``e^L / (1 + e^L)`` by the sign of ``L``: no overflow for any finite logit. The loss is written
``t·log(1 + e^-L) + (1 - t)·log(1 + e^L)`` (the same function), a sum of non-negative terms
without cancellation, so its rounding error is a few ulps of the loss itself: the line search
compares losses that differ by less than 1e-12 near an optimum.
"""

from __future__ import annotations

import numpy as np

try:
    import numba
except ImportError:  # pragma: no cover - numba is a dependency; the numpy twin is used then
    numba = None

AVAILABLE = numba is not None


def logistic_terms_numpy(L, counts, T, D=None):
    """The numpy twin of :func:`logistic_terms` (same contract)."""
    e = np.exp(-np.abs(L))
    loss = np.log1p(e)
    loss += T * np.maximum(-L, 0.0) + (1.0 - T) * np.maximum(L, 0.0)
    sig = np.where(L >= 0, 1.0, e) / (1.0 + e)
    if D is not None:
        np.multiply(counts * sig, 1.0 - sig, out=D)
    loss_sum = np.einsum("ij,ij->j", counts, loss)
    np.subtract(sig, T, out=L)
    L *= counts
    return loss_sum, L.sum(axis=0)


if AVAILABLE:
    @numba.njit(cache=True, nogil=True)
    def _terms(L, counts, T, D, with_d):  # pragma: no cover - compiled
        n, s = L.shape
        loss = np.zeros(s)
        rsum = np.zeros(s)
        for i in range(n):
            for j in range(s):
                c = counts[i, j]
                if c == 0.0:
                    L[i, j] = 0.0
                    if with_d:
                        D[i, j] = 0.0
                    continue
                z = L[i, j]
                t = T[i, j]
                e = np.exp(-abs(z))
                loss[j] += c * (np.log1p(e) + t * max(-z, 0.0) + (1.0 - t) * max(z, 0.0))
                sig = (1.0 if z >= 0 else e) / (1.0 + e)
                r = c * (sig - t)
                L[i, j] = r
                rsum[j] += r
                if with_d:
                    D[i, j] = c * sig * (1.0 - sig)
        return loss, rsum


def logistic_terms(L, counts, T, D=None):
    """(loss per problem (s,), residual sum per problem (s,)); ``L`` (n, s) becomes the residuals
    and ``D`` (n, s), if given, the Newton weights. ``L``, ``D`` C-contiguous float64."""
    if not AVAILABLE:
        return logistic_terms_numpy(L, counts, T, D)
    if not (counts.flags.c_contiguous and T.flags.c_contiguous):
        counts, T = np.ascontiguousarray(counts), np.ascontiguousarray(T)
    if D is None:
        return _terms(L, counts, T, L, False)
    return _terms(L, counts, T, D, True)
