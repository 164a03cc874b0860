"""The batched logistic solver (pipeline.concepts.batched_logistic) against scikit-learn's
LogisticRegression (tight tolerance), a brute-force scipy minimisation of the objective, and
CAVFitter's own standardised fits; its fused kernel against the numpy twin; its edge cases."""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy.optimize import minimize
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold

from pipeline.concepts import _logistic_kernel as kernel
from pipeline.concepts.batched_logistic import fit_logistic_batch, standardization_scales
from pipeline.concepts.cav import CAVFitter, standardize_shrinkage
from pipeline.concepts.fitters import LogisticFitter
from pipeline.validation import InvalidInputError

COEF_TOL = 1e-6  # the bound: coefficients within 1e-6 of scikit-learn's, relative to their scale
ACC_TOL = 1e-3  # held-out accuracy within 1e-3


def sklearn_fit(Z, rows, y, scale, C=1.0):
    """scikit-learn on the problem's rows standardised by ``scale`` (centred on their mean), mapped
    back to the original columns: the reference the batch must equal."""
    X = Z[rows]
    m = X.mean(axis=0)
    lr = LogisticRegression(C=C, solver="newton-cholesky", tol=1e-12, max_iter=1000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        lr.fit((X - m) / scale, y)
    coef = lr.coef_[0] / scale
    return coef, lr.intercept_[0] - coef @ m


def assert_same_fit(Z, rows, coef, intercept, ref_coef, ref_intercept, test_X=None, test_y=None):
    scale = np.abs(ref_coef).max()
    assert np.abs(coef - ref_coef).max() <= COEF_TOL * scale
    logits, ref = Z[rows] @ coef + intercept, Z[rows] @ ref_coef + ref_intercept
    assert np.abs(logits - ref).max() <= COEF_TOL * max(1.0, np.abs(ref).max())
    if test_X is not None:
        acc = np.mean((test_X @ coef + intercept > 0) == (test_y == 1))
        ref_acc = np.mean((test_X @ ref_coef + ref_intercept > 0) == (test_y == 1))
        assert abs(acc - ref_acc) <= ACC_TOL


def random_problems(seed, B, d, n, pool, balance, spread):
    """``B`` problems of ``n`` rows drawn from ``pool`` shared rows with columns on scales
    10^±spread, labels from a noisy linear rule with positives' share about ``balance``, both
    classes in every problem; plus a held-out set from the same rule."""
    rng = np.random.default_rng(seed)
    scales = 10.0 ** rng.uniform(-spread, spread, d)
    offsets = rng.uniform(-3, 3, d) * scales
    w = rng.standard_normal(d) / scales

    def draw(k):
        X = rng.standard_normal((k, d)) * scales + offsets
        logit = (X - offsets) @ w * rng.uniform(0.5, 3)
        cut = np.quantile(logit, 1 - balance)
        return X, (logit + rng.standard_normal(k) > cut).astype(float)

    Z, y = draw(pool)
    y[:2] = [0, 1]
    rows = [np.r_[0, 1, rng.choice(np.arange(2, pool), n - 2, replace=False)] for _ in range(B)]
    test_X, test_y = draw(400)
    return Z, y, rows, test_X, test_y


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), B=st.integers(1, 5), d=st.integers(1, 6), n=st.integers(12, 60),
       C=st.floats(1e-2, 1e2), balance=st.floats(0.15, 0.85),
       standardize=st.sampled_from([None, True, 0.3, "common", "auto"]),
       solver=st.sampled_from(["auto", "newton", "lbfgs"]))
def test_equals_sklearn(seed, B, d, n, C, balance, standardize, solver):
    Z, y, rows, test_X, test_y = random_problems(seed, B, d, n, pool=n + 20, balance=balance,
                                                 spread=1.0 if standardize is None else 3.0)
    labels = [y[r] for r in rows]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        res = fit_logistic_batch(Z, rows, labels, C=C, standardize=standardize, solver=solver)
    # plain L-BFGS may crawl on an ill-conditioned problem (few rows, weak penalty): then it says so
    assert res.converged.all() or (solver == "lbfgs" and len(caught) == 1)
    scales = standardization_scales(Z, rows, standardize)
    for b in np.flatnonzero(res.converged):
        ref = sklearn_fit(Z, rows[b], labels[b], scales[b], C)
        assert_same_fit(Z, rows[b], res.coef[b], res.intercept[b], *ref, test_X, test_y)


@pytest.mark.parametrize("d,n,B", [(10, 400, 8), (40, 150, 6), (120, 100, 4)])
def test_equals_sklearn_wider(d, n, B):
    """The shapes of real CAVs (n >= 10 d: z-scores; n < 10 d: one common scale), both solvers."""
    Z, y, rows, test_X, test_y = random_problems(d, B, d, n, pool=2 * n, balance=0.5, spread=1.0)
    labels = [y[r] for r in rows]
    scales = standardization_scales(Z, rows, "auto")
    refs = [sklearn_fit(Z, rows[b], labels[b], scales[b]) for b in range(B)]
    for solver in ("newton", "lbfgs"):
        res = fit_logistic_batch(Z, rows, labels, standardize="auto", solver=solver)
        for b in range(B):
            assert_same_fit(Z, rows[b], res.coef[b], res.intercept[b], *refs[b], test_X, test_y)


def brute_force(Z, rows, targets, scale, C):
    """scipy's exact-Hessian trust region on the objective as written, counts from repeated rows."""
    X, t = Z[rows], targets
    d = X.shape[1]

    def f(x):
        w, c = x[:d], x[d]
        z = X @ w + c
        p = 1 / (1 + np.exp(-z))
        loss = np.logaddexp(0, z) - t * z
        g = np.r_[scale**2 * w + C * X.T @ (p - t), C * (p - t).sum()]
        return 0.5 * np.sum((scale * w) ** 2) + C * loss.sum(), g

    def hess(x):
        z = X @ x[:d] + x[d]
        D = 1 / (1 + np.exp(-z))
        D = D * (1 - D)
        Xa = np.column_stack([X, np.ones(len(X))])
        return C * (Xa.T * D) @ Xa + np.diag(np.r_[scale**2, 0.0])

    x = minimize(f, np.zeros(d + 1), jac=True, hess=hess, method="trust-exact", options={"gtol": 1e-12}).x
    for _ in range(3):  # trust-exact may stop at a gradient of 1e-7: polish by plain Newton steps
        x = x - np.linalg.solve(hess(x), f(x)[1])
    return x[:d], x[d]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), B=st.integers(1, 4), d=st.integers(1, 4), n=st.integers(6, 30),
       soft=st.booleans(), repeats=st.booleans(), solver=st.sampled_from(["newton", "lbfgs"]))
def test_equals_brute_force(seed, B, d, n, soft, repeats, solver):
    """Soft targets, rows listed twice, a C and penalty scales per problem: the objective itself."""
    rng = np.random.default_rng(seed)
    Z = rng.standard_normal((40, d)) * rng.uniform(0.3, 3, d)
    rows = [rng.choice(40, n, replace=repeats) for _ in range(B)]
    targets = [rng.uniform(0, 1, n) if soft else (rng.uniform(size=n) < 0.5).astype(float) for _ in range(B)]
    for t in targets:
        t[:2] = [0.0, 1.0]
    C = 10.0 ** rng.uniform(-1, 1, B)
    scale = rng.uniform(0.2, 3, (B, d))
    res = fit_logistic_batch(Z, rows, targets, C=C, penalty_scale=scale, solver=solver)
    for b in range(B):
        ref = brute_force(Z, rows[b], targets[b], scale[b], C[b])
        assert_same_fit(Z, rows[b], res.coef[b], res.intercept[b], *ref)


def test_cav_directions_and_heldout_scores():
    """CAVFitter's standardised fit and its held-out scores, with a tight scikit-learn fitter, are
    what the batch gives: folds standardised with the draw's statistics (scale_from) and started
    from the draw's fit (warm_from)."""

    class Tight(LogisticFitter):
        def direction(self, Z, y, random_state):
            return LogisticRegression(C=self.C, solver="newton-cholesky", tol=1e-12, max_iter=1000).fit(Z, y).coef_[0]

    rng = np.random.default_rng(3)
    d = 12
    Z = rng.standard_normal((300, d)) * rng.uniform(0.1, 3, d)
    y = (Z[:, 0] / 3 + Z[:, 1] + rng.standard_normal(300) > 0).astype(float)
    cf, fitter = CAVFitter(cv=3, standardize=None), Tight()
    cf._column_scale = None
    for n in (60, 200):  # "auto": one common scale with < 10 rows per feature, z-scores with more
        idx = np.r_[rng.choice(np.flatnonzero(y == 1), n // 2, replace=False),
                    rng.choice(np.flatnonzero(y == 0), n // 2, replace=False)]
        ys, seed = y[idx], 7
        direction, Zs = cf._direction(fitter, Z[idx], ys, seed)
        folds = list(StratifiedKFold(3, shuffle=True, random_state=seed).split(idx, ys))
        rows = [idx] + [idx[tr] for tr, _ in folds]
        res = fit_logistic_batch(Z, rows, [y[r] for r in rows], standardize=standardize_shrinkage("auto", n, d),
                                 scale_from=[-1, 0, 0, 0], warm_from=[-1, 0, 0, 0])
        unit = res.coef[0] / np.linalg.norm(res.coef[0])
        assert np.abs(unit - direction).max() <= COEF_TOL
        scores = [fitter.score(res.coef[1 + k], Z[idx[tr]], ys[tr], Z[idx[te]], ys[te])
                  for k, (tr, te) in enumerate(folds)]
        assert abs(np.mean(scores) - cf._heldout(fitter, Zs, ys, seed)) <= ACC_TOL


def test_inputs_in_every_form_agree():
    """Index lists, boolean masks, labels per row of Z, blocks, greedy tiles and warm starts: one answer."""
    Z, y, rows, _, _ = random_problems(5, 6, 8, 50, pool=120, balance=0.4, spread=1.0)
    labels = [y[r] for r in rows]
    base = fit_logistic_batch(Z, rows, labels, standardize="auto")
    masks = np.zeros((6, 120), dtype=bool)
    for b, r in enumerate(rows):
        masks[b, r] = True
    per_row = np.tile(y, (6, 1))
    blocks = np.arange(120) // 17
    for kw in (dict(rows=masks, labels=per_row), dict(rows=rows, labels=labels, blocks=blocks),
               dict(rows=rows, labels=labels, warm_from=[-1, 0, 0, -1, 3, 3], solver="lbfgs"),
               dict(rows=rows, labels=labels, coef_init=base.coef * 1.5, intercept_init=base.intercept - 1)):
        out = fit_logistic_batch(Z, standardize="auto", **kw)
        np.testing.assert_allclose(out.coef, base.coef, rtol=0, atol=1e-8 * np.abs(base.coef).max())
        np.testing.assert_allclose(out.intercept, base.intercept, rtol=0,
                                   atol=1e-8 * max(1, np.abs(base.intercept).max()))


def test_any_thread_count_gives_the_same_bits():
    Z, y, rows, _, _ = random_problems(9, 40, 30, 50, pool=300, balance=0.5, spread=1.0)
    labels = [y[r] for r in rows]
    for solver in ("newton", "lbfgs", "auto"):
        one = fit_logistic_batch(Z, rows, labels, standardize="common", solver=solver, n_jobs=1)
        two = fit_logistic_batch(Z, rows, labels, standardize="common", solver=solver, n_jobs=2)
        assert np.array_equal(one.coef, two.coef) and np.array_equal(one.intercept, two.intercept)


def test_separable_and_constant_columns():
    rng = np.random.default_rng(0)
    Z = rng.standard_normal((200, 5))
    Z[:, 3] = 3.5  # constant (exactly its mean: the reference, centred, sees an exact zero column)
    y = (Z[:, 0] > 0).astype(float)  # separable: finite because of the penalty
    rows = [np.arange(100), np.arange(50, 200)]
    for standardize in (None, True, 0.5, "common"):
        res = fit_logistic_batch(Z, rows, [y[r] for r in rows], standardize=standardize)
        assert res.converged.all() and np.isfinite(res.coef).all()
        assert np.abs(res.coef[:, 3]).max() <= 1e-12 * np.abs(res.coef).max()
        scales = standardization_scales(Z, rows, standardize)
        for b in range(2):
            assert_same_fit(Z, rows[b], res.coef[b], res.intercept[b], *sklearn_fit(Z, rows[b], y[rows[b]], scales[b]))


@pytest.mark.parametrize("k", [1000, -1000, 1020, -1020])
def test_extreme_scales(k):
    """Columns near 1e±300 (and 2^±1000 apart): standardised fits are scale-free, so the answer on
    Z·2^k is the answer on Z divided by 2^k, exactly (the solver divides columns by powers of two)."""
    rng = np.random.default_rng(1)
    Z = rng.standard_normal((150, 4))
    y = (Z[:, 1] + rng.standard_normal(150) > 0).astype(float)
    rows = [np.arange(100), np.arange(30, 150)]
    labels = [y[r] for r in rows]
    for standardize in (True, 0.4, "common"):
        base = fit_logistic_batch(Z, rows, labels, standardize=standardize)
        f = 2.0 ** k if standardize != True else 2.0 ** np.array([k, -k, 0, k // 2])  # noqa: E712
        out = fit_logistic_batch(Z * f, rows, labels, standardize=standardize)
        assert out.converged.all()
        np.testing.assert_allclose(out.coef * f, base.coef, rtol=1e-12)
        np.testing.assert_allclose(out.intercept, base.intercept, rtol=1e-12, atol=1e-12)
    raw = fit_logistic_batch(Z * 2.0**k, rows, labels)  # unstandardised: finite, converged
    assert raw.converged.all() and np.isfinite(raw.coef).all()


def test_refused_and_empty():
    Z = np.random.default_rng(0).standard_normal((20, 3))
    with pytest.raises(InvalidInputError, match=r"one class only.*\[1, 2\]"):
        fit_logistic_batch(Z, [np.arange(10), np.arange(5), np.arange(0)], [np.r_[0, np.ones(9)], np.ones(5), []])
    with pytest.raises(InvalidInputError, match="outside"):
        fit_logistic_batch(Z, [np.array([0, 25])], [np.array([0, 1])])
    with pytest.raises(InvalidInputError, match=r"\[0, 1\]"):
        fit_logistic_batch(Z, [np.arange(4)], [np.array([0, 1, 2, 1])])
    with pytest.raises(InvalidInputError, match="4 entries but problem 0 has 3 rows"):
        fit_logistic_batch(Z, [np.arange(3)], [np.array([0, 1, 1, 0])])
    with pytest.raises(InvalidInputError, match="one level"):
        fit_logistic_batch(Z, [np.arange(6)] * 3, [np.r_[0, 1, 0, 1, 0, 1]] * 3, warm_from=[-1, 0, 1])
    empty = fit_logistic_batch(Z, [], [])
    assert empty.coef.shape == (0, 3) and empty.intercept.shape == (0,)


def test_not_converged_is_flagged():
    Z, y, rows, _, _ = random_problems(2, 3, 20, 60, pool=100, balance=0.5, spread=1.0)
    with pytest.warns(ConvergenceWarning, match="3 of 3 logistic regressions did not converge"):
        res = fit_logistic_batch(Z, rows, [y[r] for r in rows], solver="lbfgs", max_iter=2)
    assert not res.converged.any() and (res.n_iter == 2).all() and (res.gradient > 1e-10).all()


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 40), s=st.integers(1, 7))
def test_kernel_equals_numpy_twin(seed, n, s):
    rng = np.random.default_rng(seed)
    L = rng.standard_normal((n, s)) * 10.0 ** rng.uniform(-2, 2.5)
    counts = rng.integers(0, 3, (n, s)).astype(float)
    T = np.where(rng.uniform(size=(n, s)) < 0.5, rng.uniform(size=(n, s)), rng.integers(0, 2, (n, s)))
    L1, L2, D1, D2 = L.copy(), L.copy(), np.empty_like(L), np.empty_like(L)
    loss1, r1 = kernel.logistic_terms(L1, counts, T, D1)
    loss2, r2 = kernel.logistic_terms_numpy(L2, counts, T, D2)
    np.testing.assert_allclose(loss1, loss2, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(r1, r2, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(L1, L2, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(D1, D2, rtol=1e-12, atol=1e-15)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 9), p=st.integers(1, 12), m=st.integers(0, 10),
       first=st.booleans())
def test_lbfgs_directions_equal_numpy_twin(seed, n, p, m, first):
    rng = np.random.default_rng(seed)
    S, Y = rng.standard_normal((10, n, p)), rng.standard_normal((10, n, p))
    rho = np.where(rng.uniform(size=(10, n)) < 0.2, 0.0, rng.uniform(0.1, 2, (10, n)))
    gamma = rng.uniform(0.1, 3, n)
    rows = rng.permutation(n)[:max(1, n - 2)]
    g = rng.standard_normal((rows.size, p))
    order = [(7 - k) % 10 for k in range(m)]
    np.testing.assert_allclose(kernel.lbfgs_directions(S, Y, rho, gamma, g, rows, order, first),
                               kernel.lbfgs_directions_numpy(S, Y, rho, gamma, g, rows, np.array(order, dtype=np.int64),
                                                             first), rtol=1e-10, atol=1e-10)
