"""Compiled ``Z Cᵀ`` for concept coordinates: float64 multiply-adds straight from float32 or
float64 latents, at most a few rows widened at a time.

BLAS is slow on this shape: ``Z @ C.T`` with a million rows, 512 features and 20 CAVs runs at
about 9 GFLOP/s on one core (OpenBLAS packs the 20-column operand for every panel), and
float32 latents would first need a float64 copy. This kernel keeps four latent rows (widened
to float64, 16 KB at 512 features) and five CAV rows in the L1/L2 caches and updates a 4 x 5
tile of dot products per step, so every loaded value feeds four or five multiply-adds; numba
vectorises the loop over features (reassociation and contraction allowed, nothing else) with
256-bit vectors on this CPU: about 46 GFLOP/s per core with the data in cache, that width's
ceiling, and 37 GFLOP/s streaming 1M x 512 float32 latents from memory on one thread
(`benchmarks/million_end_to_end.py` measures it in GB/s beside a plain read and the float64
floor).

Each output element is the dot product of one latent row with one CAV row, summed in the same
vectorised order whatever the other rows of its tile are, so the result does not depend on
how the rows are split among threads, and float32 latents give the same bits as their float64
widening.
"""

from __future__ import annotations

import numpy as np

try:
    import numba
except ImportError:  # pragma: no cover - numba is a dependency; the caller falls back to BLAS
    numba = None

#: Latent rows per tile (the rows widened together; the kernel below is written out for 4
#: rows x 5 CAVs): the caller splits rows among threads at multiples of it.
ROWS = 4

AVAILABLE = numba is not None

if AVAILABLE:
    @numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
    def project_rows(Z, C, out, norms, r0, r1):  # pragma: no cover - compiled
        """``out[r] = C @ float64(Z[r])`` for rows r0 <= r < r1 (C: (M, d) float64, out: (n, M));
        ``norms[r] = ||float64(Z[r])||²`` too unless ``norms`` is empty (shape (0,))."""
        d = Z.shape[1]
        M = C.shape[0]
        buf = np.zeros((4, d))
        with_norms = norms.shape[0] > 0
        for r in range(r0, r1, 4):
            nr = min(4, r1 - r)
            for a in range(nr):
                for k in range(d):
                    buf[a, k] = Z[r + a, k]
                if with_norms:
                    q = 0.0
                    for k in range(d):
                        q += buf[a, k] * buf[a, k]
                    norms[r + a] = q
            z0 = buf[0]
            z1 = buf[1]
            z2 = buf[2]
            z3 = buf[3]
            for m in range(0, M, 5):
                c0 = C[m]
                c1 = C[min(m + 1, M - 1)]
                c2 = C[min(m + 2, M - 1)]
                c3 = C[min(m + 3, M - 1)]
                c4 = C[min(m + 4, M - 1)]
                s00 = s01 = s02 = s03 = s04 = 0.0
                s10 = s11 = s12 = s13 = s14 = 0.0
                s20 = s21 = s22 = s23 = s24 = 0.0
                s30 = s31 = s32 = s33 = s34 = 0.0
                for k in range(d):
                    a0 = z0[k]
                    a1 = z1[k]
                    a2 = z2[k]
                    a3 = z3[k]
                    b0 = c0[k]
                    b1 = c1[k]
                    b2 = c2[k]
                    b3 = c3[k]
                    b4 = c4[k]
                    s00 += a0 * b0
                    s01 += a0 * b1
                    s02 += a0 * b2
                    s03 += a0 * b3
                    s04 += a0 * b4
                    s10 += a1 * b0
                    s11 += a1 * b1
                    s12 += a1 * b2
                    s13 += a1 * b3
                    s14 += a1 * b4
                    s20 += a2 * b0
                    s21 += a2 * b1
                    s22 += a2 * b2
                    s23 += a2 * b3
                    s24 += a2 * b4
                    s30 += a3 * b0
                    s31 += a3 * b1
                    s32 += a3 * b2
                    s33 += a3 * b3
                    s34 += a3 * b4
                _store(out, r, m, nr, M, 0, s00, s01, s02, s03, s04)
                _store(out, r, m, nr, M, 1, s10, s11, s12, s13, s14)
                _store(out, r, m, nr, M, 2, s20, s21, s22, s23, s24)
                _store(out, r, m, nr, M, 3, s30, s31, s32, s33, s34)

    @numba.njit(inline="always")
    def _store(out, r, m, nr, M, a, v0, v1, v2, v3, v4):  # pragma: no cover - compiled
        if a < nr:
            row = out[r + a]
            row[m] = v0
            if m + 1 < M:
                row[m + 1] = v1
            if m + 2 < M:
                row[m + 2] = v2
            if m + 3 < M:
                row[m + 3] = v3
            if m + 4 < M:
                row[m + 4] = v4


if AVAILABLE:
    @numba.njit(cache=True, nogil=True)
    def nearest_from_products(P, m, mu_sq, sq, bound, mu_norm, labels, unsure):  # pragma: no cover - compiled
        """Per row r: ``labels[r]`` = the first k minimising ``mu_sq[k] - 2 P[r, m + k]`` (np.argmin's
        choice), and ``unsure[r]`` = True when the two best differ by no more than
        ``bound * (sqrt(sq[r]) + mu_norm)²`` (finite rows only). Returns the unsure count."""
        K = mu_sq.shape[0]
        count = 0
        for r in range(P.shape[0]):
            best = mu_sq[0] - 2.0 * P[r, m]
            second = np.inf
            label = 0
            for k in range(1, K):
                s = mu_sq[k] - 2.0 * P[r, m + k]
                if s < best:
                    second = best
                    best = s
                    label = k
                elif s < second:
                    second = s
            labels[r] = label
            tol = np.sqrt(sq[r]) + mu_norm
            flag = np.isfinite(sq[r]) and not (second - best > bound * tol * tol)
            unsure[r] = flag
            count += flag
        return count
