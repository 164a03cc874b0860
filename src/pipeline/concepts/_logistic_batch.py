"""The machinery of :func:`pipeline.concepts.batched_logistic.fit_logistic_batch`: tiles of shared
rows, each problem's scaled coordinates and objective, and the lockstep Newton and L-BFGS solvers
(the module docstring there says what each does and why)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.concepts._logistic_kernel import lbfgs_directions, logistic_terms
from pipeline.validation import InvalidInputError

#: ``solver="auto"`` takes Newton's method up to this many columns, L-BFGS above (benchmarks/
#: batched_cavs.py: as fast at 10 columns, L-BFGS 1.7x faster at 20; Newton's Hessians then take
#: d² per row)
NEWTON_MAX_FEATURES = 10
#: ``solver="auto"`` on wider rows: L-BFGS iterations before the problems not solved yet go to Newton
LBFGS_BEFORE_NEWTON = 150
#: a matrix product with few columns is bound by reading its rows: it costs about as much as this
#: many more columns (the greedy tiling's cost model, :func:`_tile_ids`)
TILE_FLOOR = 8
#: at most this many (row, problem) entries per tile (a few arrays of this size are live per tile)
TILE_MAX_ENTRIES = 1 << 21
#: at most this many problems per tile: a product with more columns is no faster per column, and
#: smaller tiles share out better among threads
TILE_MAX_PROBLEMS = 128
_MEMORY = 10  # L-BFGS pairs
_C1 = 1e-4  # Armijo constant
_MAX_HALVINGS = 40
_STEP_RATIO = 100.0  # converged: gradient <= tol and the last step <= _STEP_RATIO * tol of the weights
_EXACT = 1e-14  # a relative gradient this small is converged whatever the step
_EPS = np.finfo(np.float64).eps
#: "auto" checks L-BFGS's answer with Newton where the penalty holds less than 1/this of a
#: column's starting curvature (condition numbers up to about this much are safe for L-BFGS)
_WEAK_PENALTY = 1e4
_POLISH_ITER = 20  # Newton iterations allowed beyond max_iter to finish what L-BFGS left


# --------------------------------------------------------------------------- tiles


@dataclass
class _Tile:
    X: np.ndarray  # (n_k, d) the rows, scaled and centred
    problems: np.ndarray  # (s,) problem ids
    counts: np.ndarray  # (n_k, s)
    targets: np.ndarray  # (n_k, s)
    outer: np.ndarray | None = None  # (n_k, d(d+1)/2) packed outer products (Newton)


def _tile_ids(idx: list[np.ndarray], n_rows: int, blocks) -> list[np.ndarray]:
    """The tile of every (problem, row) entry: the row's block, else the problem's greedy group.

    Greedy: a tile of ``U`` rows and ``s`` problems costs about ``U (s + TILE_FLOOR)`` per pass (a
    matrix product with few columns is bound by reading the rows, as ``TILE_FLOOR`` more columns
    would cost); a problem joins the current tile when that grows the cost by no more than the
    problem would cost alone, ``n (1 + TILE_FLOOR)``, and the tile stays under
    ``TILE_MAX_ENTRIES`` entries."""
    if blocks is not None:
        blocks = np.asarray(blocks)
        if blocks.shape != (n_rows,) or blocks.dtype.kind not in "iu":
            raise InvalidInputError(f"blocks must be one integer label per row of Z (shape ({n_rows},)), got "
                                    f"{blocks.dtype} of shape {blocks.shape}.")
        _, blocks = np.unique(blocks, return_inverse=True)
        return [blocks[i] for i in idx]
    mark = np.zeros(n_rows, dtype=bool)
    group, members, union, out = 0, [], 0, []
    for i in idx:
        new = np.unique(i[~mark[i]]).size
        s = len(members)
        grow = (union + new) * (s + 1 + TILE_FLOOR) - union * (s + TILE_FLOOR)
        if members and (grow > i.size * (1 + TILE_FLOOR) or (union + new) * (s + 1) > TILE_MAX_ENTRIES):
            for j in members:
                mark[j] = False
            group, members, union, new = group + 1, [], 0, np.unique(i).size
        mark[i] = True
        members.append(i)
        union += new
        out.append(np.full(i.size, group, dtype=np.int64))
    return out


def _tiles(X: np.ndarray, pos: list[np.ndarray], targets, tile_of) -> list[_Tile]:
    """Tiles from each entry's row of ``X`` (``pos``), target and tile id."""
    prob = np.concatenate([np.full(i.size, b, dtype=np.int64) for b, i in enumerate(pos)])
    row = np.concatenate(pos)
    t = np.concatenate(targets)
    tile = np.concatenate(tile_of)
    order = np.argsort(tile, kind="stable")
    prob, row, t, tile = prob[order], row[order], t[order], tile[order]
    starts = np.flatnonzero(np.r_[True, tile[1:] != tile[:-1]])
    out = []
    for lo, hi in zip(starts, np.r_[starts[1:], tile.size]):
        rows_k, ri = np.unique(row[lo:hi], return_inverse=True)
        probs_k, pi = np.unique(prob[lo:hi], return_inverse=True)
        # a block shared by many problems is split so no tile holds more than TILE_MAX_ENTRIES entries
        # or TILE_MAX_PROBLEMS problems (tiles are what threads share)
        per = max(1, min(TILE_MAX_PROBLEMS, TILE_MAX_ENTRIES // max(rows_k.size, 1)))
        Xk = X[rows_k]  # shared by the block's tiles that use all its rows
        for c0 in range(0, probs_k.size, per):
            sel = (pi >= c0) & (pi < c0 + per)
            shape = (rows_k.size, min(per, probs_k.size - c0))
            counts, tsum = np.zeros(shape), np.zeros(shape)
            np.add.at(counts, (ri[sel], pi[sel] - c0), 1.0)
            np.add.at(tsum, (ri[sel], pi[sel] - c0), t[lo:hi][sel])
            used = counts.any(axis=1)
            tk = tsum / np.maximum(counts, 1.0)
            whole = used.all()
            out.append(_Tile(X=Xk if whole else Xk[used], problems=probs_k[c0:c0 + per],
                             counts=counts if whole else counts[used], targets=tk if whole else tk[used]))
    return out


# --------------------------------------------------------------------------- scales


def _column_powers(Z: np.ndarray) -> np.ndarray:
    """Powers of two ``f`` (d,) with max |Z[:, j] / f_j| in [0.5, 1) (1 for all-zero columns)."""
    if Z.shape[0] == 0:
        return np.ones(Z.shape[1])
    top = np.maximum(Z.max(axis=0), -Z.min(axis=0))  # no |Z| temporary
    return np.ldexp(1.0, np.where(top > 0, np.frexp(top)[1], 0))


def _scaled_penalty(setting, var: np.ndarray, f: np.ndarray) -> np.ndarray:
    """Penalty scales on the columns divided by ``f`` for one problem whose scaled columns have
    variances ``var``: ``s_j / f_j`` with ``s`` the scale of the original columns (cav.py's rule,
    computed without forming the original, possibly overflowing, variances)."""
    one = 1.0 / f
    if setting is None:
        return one
    e = np.frexp(f)[1]
    top = e.max()
    ratio = np.ldexp(1.0, np.clip(top - e, -600, 600))  # F / f_j, exact (clamped far beyond any effect)
    rel = np.ldexp(1.0, np.clip(e - top, -600, 600)) ** 2 * var  # (f_j / F)² var_j: original variances / F²
    if setting == "common":
        total = np.sqrt(rel.sum())
        out = ratio * total
        return one if total == 0 else out
    lam = float(setting)
    out = np.hypot(np.sqrt((1.0 - lam) * var), ratio * np.sqrt(lam * rel.mean()))  # no square overflows
    return np.where(out > 0, out, one)


# --------------------------------------------------------------------------- the batch


class Batch:
    """Tiles, per-problem scalings and the objective in scaled coordinates ``θ = [q ⊙ w', qc (a' + m·w')]``."""

    def __init__(self, Z, idx, targets, C, settings, penalty_scale, scale_from, blocks, newton: bool):
        B, d = len(idx), Z.shape[1]
        self.B, self.d = B, d
        self.map = map  # how tiles are shared among threads (fit_logistic_batch sets a pool's map)
        self.packed = newton and d <= NEWTON_MAX_FEATURES  # Newton's Hessians from packed outer products
        used = np.unique(np.concatenate(idx))  # only rows some problem uses are copied
        X = Z[used] if used.size < Z.shape[0] else Z.copy()
        self.f = _column_powers(X)
        X /= self.f
        self.mu = X.mean(axis=0)
        X -= self.mu
        pos = np.split(np.searchsorted(used, np.concatenate(idx)), np.cumsum([i.size for i in idx])[:-1])
        self.tiles = _tiles(X, pos, targets, _tile_ids(idx, Z.shape[0], blocks))
        n, s1, s2 = np.zeros(B), np.zeros((B, d)), np.zeros((B, d))
        for t in self.tiles:
            n[t.problems] += t.counts.sum(axis=0)
            s1[t.problems] += t.counts.T @ t.X
            s2[t.problems] += t.counts.T @ (t.X * t.X)
            if self.packed:
                iu, ju = np.triu_indices(d)
                t.outer = t.X[:, iu] * t.X[:, ju]
        self.n = n
        self.m = s1 / n[:, None]
        var = np.maximum(s2 / n[:, None] - self.m**2, 0.0)
        if penalty_scale is not None:
            p = penalty_scale / self.f
        else:
            p = np.empty((B, d))
            for b, s in enumerate(settings):
                # plain z-scores: the exact variances of the problem's rows (a column constant on them must get
                # scale 1 exactly as in cav.py); the other settings only need them to rounding
                v = X[pos[b]].var(axis=0) if s == 0.0 and not isinstance(s, str) else var[b]
                p[b] = _scaled_penalty(s, v, self.f)
        if scale_from is not None:
            p = p[np.where(scale_from >= 0, scale_from, np.arange(B))]
        p = np.clip(p, 2.0**-600, 2.0**600)
        self.C = C
        a = np.sqrt(C[:, None] * n[:, None] / 4.0 * var)
        self.q = np.hypot(p, a)
        self.rho2 = (p / self.q) ** 2
        self.qc = np.sqrt(C * n / 4.0)
        self.scale = np.sqrt(C * n)  # the size of the gradient at the start: the criterion is relative to it
        self.log_odds = np.array([np.log(np.mean(t) / (1.0 - np.mean(t))) for t in targets])

    # parameters <-> original columns
    def to_theta(self, coef, intercept):
        return self.to_theta_of(np.arange(self.B), coef, intercept)

    def to_theta_of(self, which, coef, intercept):
        """θ of the problems ``which`` from weights and intercepts on the original columns."""
        w = coef * self.f
        a = intercept + w @ self.mu
        return np.column_stack([self.q[which] * w, self.qc[which] * (a + np.einsum("ij,ij->i", self.m[which], w))])

    def from_theta(self, theta, which=None):
        """(coef, intercept) on the original columns from θ of the problems ``which`` (default all)."""
        which = np.arange(self.B) if which is None else which
        w = theta[:, :-1] / self.q[which]
        a = theta[:, -1] / self.qc[which] - np.einsum("ij,ij->i", self.m[which], w)
        return w / self.f, a - w @ self.mu

    def start(self):
        theta = np.zeros((self.B, self.d + 1))
        theta[:, -1] = self.qc * self.log_odds
        return theta

    def _tile_terms(self, t: _Tile, pos, w, a, m, hessian: bool):
        """One tile's part of the objective of the active problems (``pos``: position of each problem
        among them, -1 if not active): (positions, loss, X'r, Σr[, Σ D, packed or centred D-sums, Σ D (x - m)])."""
        loc = pos[t.problems]
        cols = np.flatnonzero(loc >= 0)
        if cols.size == 0:
            return None
        whole = cols.size == loc.size
        ap = loc if whole else loc[cols]
        counts = t.counts if whole else t.counts[:, cols]
        T = t.targets if whole else t.targets[:, cols]
        L = t.X @ w[ap].T
        L += a[ap]
        D = np.empty_like(L) if hessian else None
        loss, rsum = logistic_terms(L, counts, T, D)  # L now holds the residuals
        out = (ap, loss, L.T @ t.X, rsum)
        if not hessian:
            return out
        if self.packed:  # all problems of the tile in one product with the rows' outer products
            return out + (D.sum(axis=0), D.T @ t.outer, D.T @ t.X)
        M, s1 = np.empty((ap.size, self.d, self.d)), np.empty((ap.size, self.d))
        for j, b in enumerate(ap):  # wide rows: one product per problem, on its own rows, centred
            used = counts[:, j] > 0
            Xc = t.X[used] - m[b]
            Dj = D[used, j]
            M[j] = (Xc * Dj[:, None]).T @ Xc
            s1[j] = Dj @ Xc
        return out + (D.sum(axis=0), M, s1)

    def evaluate(self, act: np.ndarray, theta: np.ndarray, hessian: bool = False):
        """Objective (A,), gradient (A, d+1) [and Hessian (A, d+1, d+1)] of the problems ``act``.
        The tiles are shared among the threads (``self.map``); their parts are added in tile
        order, so any count of threads gives the same bits."""
        A, d = act.size, self.d
        pos = np.full(self.B, -1)
        pos[act] = np.arange(A)
        q, m = self.q[act], self.m[act]
        w = theta[:, :d] / q
        a = theta[:, d] / self.qc[act] - np.einsum("ij,ij->i", m, w)
        F, G, S = np.zeros(A), np.zeros((A, d)), np.zeros(A)
        if hessian:  # Σ D (x - m)(x - m)ᵀ, Σ D (x - m), Σ D per problem (D: the Newton weights)
            M, s1, S0 = np.zeros((A, d, d)), np.zeros((A, d)), np.zeros(A)
            packed = np.zeros((A, d * (d + 1) // 2)) if self.packed else None
        for part in self.map(lambda t: self._tile_terms(t, pos, w, a, m, hessian), self.tiles):
            if part is None:
                continue
            ap = part[0]
            F[ap] += part[1]
            G[ap] += part[2]
            S[ap] += part[3]
            if hessian:
                S0[ap] += part[4]
                (packed if self.packed else M)[ap] += part[5]
                s1[ap] += part[6]
        C, v, rho2, qc = self.C[act], theta[:, :d], self.rho2[act], self.qc[act]
        grad = np.empty((A, d + 1))
        grad[:, :d] = rho2 * v + C[:, None] * (G - m * S[:, None]) / q
        grad[:, d] = C * S / qc
        F = C * F + 0.5 * np.einsum("ij,ij->i", rho2 * v, v)
        if not hessian:
            return F, grad
        if self.packed:  # the sums about the centre of Z, moved to each problem's mean
            iu, ju = np.triu_indices(d)
            M[:, iu, ju] = packed
            M[:, ju, iu] = packed
            M -= m[:, :, None] * s1[:, None, :] + s1[:, :, None] * m[:, None, :]
            M += S0[:, None, None] * m[:, :, None] * m[:, None, :]
            s1 -= S0[:, None] * m
        H = np.empty((A, d + 1, d + 1))
        H[:, :d, :d] = C[:, None, None] * M / q[:, :, None] / q[:, None, :]
        H[:, np.arange(d), np.arange(d)] += rho2
        hc = C[:, None] * s1 / q / qc[:, None]
        H[:, :d, d] = hc
        H[:, d, :d] = hc
        H[:, d, d] = C * S0 / qc**2
        return F, grad, H


# --------------------------------------------------------------------------- solvers


def _line_search(batch, act, theta, F, g, direction, hessian):
    """One step from ``theta`` along ``direction`` for each problem of ``act``; returns (accepted
    mask, new θ, F, gradient[, Hessian]) (rejected rows unchanged).

    A step is taken when it decreases the objective by Armijo's rule or, where the change of the
    objective is below its rounding (near the optimum of an ill-conditioned problem), when the
    slope along the direction at the new point shows a decrease of a quadratic model (less than
    0.9 of the starting slope's magnitude uphill). Otherwise the step shrinks: quadratic
    interpolation of the objective, or in the rounding regime the secant root of the slope."""
    A = act.size
    slope = np.einsum("ij,ij->i", g, direction)
    alpha = np.ones(A)
    ok = np.zeros(A, dtype=bool)
    new_theta, new_F, new_g = theta.copy(), F.copy(), g.copy()
    new_H = np.zeros((A, theta.shape[1], theta.shape[1])) if hessian else None
    todo = np.flatnonzero(slope < 0)  # not a descent direction: nothing to gain (converged to rounding)
    for _ in range(_MAX_HALVINGS):
        if todo.size == 0:
            break
        trial = theta[todo] + alpha[todo, None] * direction[todo]
        out = batch.evaluate(act[todo], trial, hessian)
        Ft, s0, a0 = out[0], slope[todo], alpha[todo]
        st = np.einsum("ij,ij->i", out[1], direction[todo])
        quiet = np.abs(Ft - F[todo]) <= 64 * _EPS * np.maximum(np.abs(F[todo]), np.abs(Ft))
        good = (Ft <= F[todo] + _C1 * a0 * s0) | (quiet & (st <= -0.9 * s0))
        acc = todo[good]
        new_theta[acc], new_F[acc], new_g[acc] = trial[good], Ft[good], out[1][good]
        if hessian:
            new_H[acc] = out[2][good]
        ok[acc] = True
        bad = ~good
        with np.errstate(divide="ignore", invalid="ignore"):
            interp = -s0 * a0**2 / (2 * (Ft - F[todo] - a0 * s0))  # minimum of the quadratic through F, slope, Ft
            secant = a0 * -s0 / (st - s0)  # the root of the slope, linear in the step
        new = np.where(quiet, np.clip(np.nan_to_num(secant, nan=0.5 * a0), 0.1 * a0, 0.9 * a0),
                       np.clip(np.nan_to_num(interp, nan=0.5 * a0), 0.1 * a0, 0.5 * a0))
        alpha[todo[bad]] = new[bad]
        todo = todo[bad]
    return ok, new_theta, new_F, new_g, new_H


def _small_step(step, th, rtol):
    """Whether a step is at most ``rtol`` of the weights' size (weights and intercept each)."""
    v = np.abs(th[:, :-1]).max(axis=1) if th.shape[1] > 1 else np.zeros(th.shape[0])
    small_v = (np.abs(step[:, :-1]).max(axis=1) if th.shape[1] > 1 else 0.0) <= rtol * v
    return small_v & (np.abs(step[:, -1]) <= rtol * np.maximum(np.abs(th[:, -1]), v))


def _finish(batch, act, g, gnorm):
    """Relative gradients of ``act`` (stored in ``gnorm``) and whether each is at rounding level."""
    rel = np.abs(g).max(axis=1) / batch.scale[act]
    gnorm[act] = rel
    return rel, rel <= _EXACT


def _newton(batch, theta, act, tol, max_iter, n_iter, conv, gnorm):
    """Newton steps for the problems ``act`` from ``theta`` (updated in place, as are the outputs).
    A problem has converged when its last Newton step was at most ``_STEP_RATIO · tol`` of its
    weights (Newton's error after that step is about its square) or its gradient is at rounding level."""
    th = theta[act]
    F, g, H = batch.evaluate(act, th, hessian=True)
    while act.size:
        rel, exact = _finish(batch, act, g, gnorm)
        conv[act[exact]] = True
        keep = ~exact & (n_iter[act] < max_iter)
        act, th, F, g, H, rel = act[keep], th[keep], F[keep], g[keep], H[keep], rel[keep]
        if act.size == 0:
            break
        p = H.shape[1]
        H = H + (1e-13 * np.abs(H[:, np.arange(p), np.arange(p)]).max(axis=1))[:, None, None] * np.eye(p)
        direction = -np.linalg.solve(H, g[:, :, None])[:, :, 0]
        small = _small_step(direction, th, _STEP_RATIO * tol[act])
        ok, th_new, F_new, g_new, H_new = _line_search(batch, act, th, F, g, direction, hessian=True)
        n_iter[act] += 1
        theta[act[ok]] = th_new[ok]
        # a small Newton step leaves an error of about its square: done (where no step was possible
        # either, the objective is flat to rounding there)
        done = small
        conv[act[done]] = True
        if done.any():
            _finish(batch, act[done & ok], g_new[done & ok], gnorm)
        keep = ok & ~done
        act, th, F, g, H = act[keep], th_new[keep], F_new[keep], g_new[keep], H_new[keep]


def _lbfgs(batch, theta, act, tol, max_iter, n_iter, conv, gnorm):
    """L-BFGS steps for the problems ``act`` from ``theta`` (updated in place, as are the outputs).
    A problem has converged when its gradient is at most ``tol`` and its next quasi-Newton step
    at most ``_STEP_RATIO · tol`` of its weights. The history of problem ``act[i]`` at the start is row
    ``i`` of (memory, n, p) arrays (``hist`` maps the active problems to their rows), newest pair
    in slot ``it % _MEMORY``; a pair without positive curvature gets ``rho = 0`` and so does nothing."""
    p, n0 = batch.d + 1, act.size
    th = theta[act]
    F, g = batch.evaluate(act, th)
    S, Y, rho = np.zeros((_MEMORY, n0, p)), np.zeros((_MEMORY, n0, p)), np.zeros((_MEMORY, n0))
    gamma = np.ones(n0)
    hist = np.arange(n0)
    for it in range(max_iter + 1):
        rel, exact = _finish(batch, act, g, gnorm)
        order = [(it - 1 - k) % _MEMORY for k in range(min(it, _MEMORY))]
        direction = -lbfgs_directions(S, Y, rho, gamma, g, hist, order, first=it == 0)
        # the quasi-Newton step estimates the distance to the optimum: done when both it and the
        # gradient are small (at the first iteration there is no curvature yet to tell)
        done = exact | ((rel <= tol[act]) & (it > 0) & _small_step(direction, th, _STEP_RATIO * tol[act]))
        conv[act[done]] = True
        keep = ~done & (n_iter[act] < max_iter)
        if not keep.all():
            act, hist, th, F, g, direction = act[keep], hist[keep], th[keep], F[keep], g[keep], direction[keep]
        if act.size == 0:
            break
        ok, th_new, F_new, g_new, _ = _line_search(batch, act, th, F, g, direction, hessian=False)
        n_iter[act] += 1
        slot = it % _MEMORY
        s, y = th_new - th, g_new - g
        S[slot, hist], Y[slot, hist] = s, y
        sy = np.einsum("ij,ij->i", s, y)
        good = ok & (sy > 1e-12 * np.linalg.norm(s, axis=1) * np.linalg.norm(y, axis=1))
        with np.errstate(divide="ignore", invalid="ignore"):
            rho[slot, hist] = np.where(good, 1.0 / sy, 0.0)
            gamma[hist] = np.where(good, sy / np.einsum("ij,ij->i", y, y), gamma[hist])
        theta[act[ok]] = th_new[ok]
        if not ok.all():  # no step possible along the direction: stop (not converged; "auto" hands it to Newton)
            act, hist = act[ok], hist[ok]
        th, F, g = th_new[ok], F_new[ok], g_new[ok]


def solve(batch, theta, act, solver, tol, max_iter, n_iter, conv, gnorm) -> set:
    """Run ``solver`` on the problems ``act`` (``tol``: one per problem of the batch); "auto": Newton
    on narrow rows, else L-BFGS for at most ``LBFGS_BEFORE_NEWTON`` iterations and Newton for the
    problems it has not solved by then (ill-conditioned ones, where L-BFGS crawls). Returns the
    solvers that ran."""
    if act.size == 0:
        return set()
    if solver == "newton" or (solver == "auto" and batch.d <= NEWTON_MAX_FEATURES):
        _newton_chunks(batch, theta, act, tol, max_iter, n_iter, conv, gnorm)
        return {"newton"}
    _lbfgs(batch, theta, act, tol, max_iter if solver == "lbfgs" else min(max_iter, LBFGS_BEFORE_NEWTON),
           n_iter, conv, gnorm)
    if solver == "lbfgs":
        return {"lbfgs"}
    # L-BFGS's criteria can pass with an error well above tol when a direction has almost no
    # curvature: a weak penalty (rho² = the penalty's share of the starting curvature) on columns the
    # data barely bend. Newton finishes those, and the problems L-BFGS has not solved.
    weak = batch.rho2[act].min(axis=1) * _WEAK_PENALTY < 1.0
    rest = act[~conv[act] | weak]
    if rest.size == 0:
        return {"lbfgs"}
    conv[rest] = False
    _newton_chunks(batch, theta, rest, tol, max_iter + _POLISH_ITER, n_iter, conv, gnorm)
    return {"lbfgs", "newton"}


def _newton_chunks(batch, theta, act, tol, max_iter, n_iter, conv, gnorm):
    """Newton on ``act`` in groups whose Hessians take at most ~64 MB each."""
    per = max(1, (1 << 23) // (batch.d + 1) ** 2)
    for lo in range(0, act.size, per):
        _newton(batch, theta, act[lo:lo + per], tol, max_iter, n_iter, conv, gnorm)
