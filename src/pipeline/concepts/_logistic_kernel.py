"""Compiled loops of the batched logistic solver: the element-wise part of a tile's losses, fused
into one pass over its logits, and L-BFGS's two-loop recursion for many problems at once.

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

:func:`lbfgs_directions` is the two-loop recursion (Nocedal & Wright, Algorithm 7.4) for each
active problem over its stored pairs, read in place from the whole history (no copy of the
active rows); the numpy twin :func:`lbfgs_directions_numpy` does the same with whole-array operations.
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


def lbfgs_directions_numpy(S, Y, rho, gamma, g, rows, order, first):
    """The numpy twin of :func:`lbfgs_directions` (same contract)."""
    r = g.copy()
    alphas = []
    for k in order:
        al = rho[k, rows] * np.einsum("ij,ij->i", S[k, rows], r)
        r -= al[:, None] * Y[k, rows]
        alphas.append(al)
    if first:
        r /= np.maximum(1.0, np.linalg.norm(r, axis=1))[:, None]
    else:
        r *= gamma[rows, None]
    for k, al in zip(order[::-1], alphas[::-1]):
        be = rho[k, rows] * np.einsum("ij,ij->i", Y[k, rows], r)
        r += (al - be)[:, None] * S[k, rows]
    return r


if AVAILABLE:
    @numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
    def _directions(S, Y, rho, gamma, g, rows, order, first):  # pragma: no cover - compiled
        A, p = g.shape
        m = order.size
        r = np.empty((A, p))
        al = np.empty(m)
        for i in range(A):
            b = rows[i]
            for j in range(p):
                r[i, j] = g[i, j]
            for t in range(m):
                k = order[t]
                dot = 0.0
                for j in range(p):
                    dot += S[k, b, j] * r[i, j]
                al[t] = rho[k, b] * dot
                for j in range(p):
                    r[i, j] -= al[t] * Y[k, b, j]
            if first:
                nrm = 0.0
                for j in range(p):
                    nrm += r[i, j] * r[i, j]
                f = 1.0 / max(1.0, np.sqrt(nrm))
            else:
                f = gamma[b]
            for j in range(p):
                r[i, j] *= f
            for t in range(m - 1, -1, -1):
                k = order[t]
                dot = 0.0
                for j in range(p):
                    dot += Y[k, b, j] * r[i, j]
                c = al[t] - rho[k, b] * dot
                for j in range(p):
                    r[i, j] += c * S[k, b, j]
        return r


def lbfgs_directions(S, Y, rho, gamma, g, rows, order, first: bool):
    """L-BFGS's ``H g`` for the active problems: ``S``, ``Y`` (memory, n, p) the stored steps and
    gradient changes of all problems, ``rho`` (memory, n) their ``1 / sᵀy`` (0: a pair to skip),
    ``gamma`` (n,) the initial scalings, ``g`` (A, p) the gradients of the problems in rows ``rows``
    (A,) of the history, ``order`` the slots newest first; ``first``: no pairs yet (a step of
    length at most 1 along ``g``)."""
    order = np.asarray(order, dtype=np.int64)
    if not AVAILABLE:
        return lbfgs_directions_numpy(S, Y, rho, gamma, g, rows, order, first)
    return _directions(S, Y, rho, gamma, np.ascontiguousarray(g), rows, order, first)
