"""Readable concept units and exact printed thresholds (issue 25, items 1-2).

The printed rules are parsed back and evaluated on the training data: every point must land
in the leaf the tree sends it to, for any tree, any monotone display units and data with
near ties.
"""

from __future__ import annotations

import re
from decimal import Decimal

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pipeline.concepts.units import (PercentileUnits, ProbabilityUnits, calibrate, concept_units, percentile_units,
                                     probability_units)
from pipeline.trees import CART
from pipeline.trees.display import shortest_decimal
from pipeline.trees.tree import ExplanationTree
from pipeline.validation import InvalidInputError

NAMES = ["f0", "f1", "f2"]


# ------------------------------------------------------------------ shortest decimal
@settings(max_examples=300, deadline=None)
@given(st.floats(-1e6, 1e6, allow_nan=False), st.floats(1e-12, 1e3), st.booleans())
def test_shortest_decimal_is_inside_and_shortest(lo, width, include_low):
    hi = lo + width
    assume(hi > lo)
    d = shortest_decimal(lo, hi, include_low=include_low)
    D, L, H = Decimal(d), Decimal(repr(lo)), Decimal(repr(hi))  # the neighbours as they read
    assert (L <= D if include_low else L < D) and D < H
    places = -D.as_tuple().exponent if D.as_tuple().exponent < 0 else 0
    if places > 0:  # no decimal with one place fewer lies in the interval
        q = Decimal(1).scaleb(-(places - 1))
        first = (L / q).to_integral_value(rounding="ROUND_CEILING")
        if not include_low and first * q == L:
            first += 1
        last = (H / q).to_integral_value(rounding="ROUND_CEILING") - 1
        # none of them reads back (as a float) inside [lo, hi)
        assert last - first < 20 and not any(lo <= float(c * q) < hi for c in range(int(first), int(last) + 1))
    assert lo <= float(d) < hi


def test_shortest_decimal_examples():
    assert shortest_decimal(1.7, 1.8) == "1.75"  # strictly between the values as they read, not "1.7"
    assert shortest_decimal(1.5204, 1.5206) == "1.5205"
    assert shortest_decimal(-0.3, 0.2) == "0"
    assert shortest_decimal(5.0, 6.0, include_low=True) == "5"
    with pytest.raises(ValueError):
        shortest_decimal(1.0, 1.0)


# ------------------------------------------------------------------ parsing printed rules back
_NUM = r"(-?[\d.]+)"


def _parse_lhs(lhs: str, X: np.ndarray) -> np.ndarray:
    """Values of a left-hand side: a feature name, or a weighted sum ``0.25·f0 - 1.2·f1``."""
    if "·" not in lhs:
        return X[:, NAMES.index(lhs)]
    total = np.zeros(len(X))
    for sign, w, name in re.findall(r"(^|[+-]) ?([\d.]+)·(\w+)", lhs.strip()):
        total += (-1.0 if sign == "-" else 1.0) * float(w) * X[:, NAMES.index(name)]
    return total


def _percentiles(u):
    """The percentile map a percentile condition reads in (a probability's fallback in the tails)."""
    return u.fallback if getattr(u, "kind", None) == "probability" else u


def _holds(cond: str, X: np.ndarray, units) -> np.ndarray:
    cond = cond.strip()
    units = [_percentiles(u) if re.search(r" in (bottom|top|percentiles) ", cond) else u for u in units]
    m = re.fullmatch(r"(\w+) in bottom " + _NUM + "%", cond)
    if m:
        return units[NAMES.index(m[1])](X[:, NAMES.index(m[1])]) <= float(m[2])
    m = re.fullmatch(r"(\w+) in top " + _NUM + "%", cond)
    if m:
        return units[NAMES.index(m[1])](X[:, NAMES.index(m[1])]) > 100 - float(m[2])
    m = re.fullmatch(r"(\w+) in percentiles " + _NUM + "–" + _NUM, cond)
    if m:
        p = units[NAMES.index(m[1])](X[:, NAMES.index(m[1])])
        return (p > float(m[2])) & (p <= float(m[3]))
    m = re.fullmatch(_NUM + r" < P\((\w+)\) <= " + _NUM, cond)
    if m:
        p = units[NAMES.index(m[2])](X[:, NAMES.index(m[2])])
        return (p > float(m[1])) & (p <= float(m[3]))
    m = re.fullmatch(r"P\((\w+)\) (<=|>|<) " + _NUM, cond)
    if m:
        p = units[NAMES.index(m[1])](X[:, NAMES.index(m[1])])
        return {"<=": p <= float(m[3]), ">": p > float(m[3]), "<": p < float(m[3])}[m[2]]
    m = re.fullmatch(_NUM + r" < (.+) <= " + _NUM, cond)
    if m:
        v = _parse_lhs(m[2], X)
        return (v > float(m[1])) & (v <= float(m[3]))
    m = re.fullmatch(r"(.+) (<=|>) " + _NUM, cond)
    assert m, f"unparsed condition {cond!r}"
    v = _parse_lhs(m[1], X)
    return v <= float(m[3]) if m[2] == "<=" else v > float(m[3])


def _check_rules_route_exactly(tree: ExplanationTree, X: np.ndarray, units=None) -> None:
    leaf_of = tree.apply(X)
    for rule in tree.rules(X, units=units):
        text = rule.format().split(" → ")[0]
        mask = np.ones(len(X), dtype=bool)
        if text != "always":
            for cond in text.split(" and "):
                mask &= _holds(cond, X, units or [None] * X.shape[1])
        assert np.array_equal(mask, leaf_of == rule.leaf), (text, np.flatnonzero(mask != (leaf_of == rule.leaf))[:5])


# ------------------------------------------------------------------ data with near ties, any units
@st.composite
def near_tie_data(draw):
    n = draw(st.integers(6, 60))
    base = draw(st.lists(st.floats(-50, 50, allow_nan=False), min_size=2, max_size=6))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    eps = draw(st.sampled_from([1e-12, 1e-9, 1e-6, 1e-3]))
    X = rng.choice(base, size=(n, 3)) + eps * rng.integers(-2, 3, size=(n, 3))
    return X, rng


def _random_units(draw, X):
    out = []
    for j in range(X.shape[1]):
        kind = draw(st.sampled_from(["raw", "percentile", "probability"]))
        if kind == "raw":
            out.append(None)
        elif kind == "percentile":
            out.append(percentile_units(X[:, j]))
        else:
            slope = draw(st.floats(0.01, 20)) * draw(st.sampled_from([1.0, -1.0]))
            out.append(ProbabilityUnits(slope, draw(st.floats(-5, 5))))
    return out


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(near_tie_data(), st.data())
def test_printed_rules_route_every_training_point_like_the_tree(data, draw):
    X, rng = data
    y = rng.integers(0, 3, len(X))
    assume(np.unique(y).size > 1)
    tree = CART(4, random_state=0).fit(X, y, feature_names=NAMES).tree_
    units = _random_units(draw.draw, X)
    _check_rules_route_exactly(tree, X)
    _check_rules_route_exactly(tree, X, units)
    # the display never changes the tree: same predictions, same raw thresholds in the JSON
    assert tree.rules(X, units=units)[0].to_dict()["conditions"][0].get("low", None) in (
        None, *[float(t) for t in tree.threshold if t == t])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(near_tie_data(), st.data())
def test_any_tree_any_monotone_units(data, draw):
    """Random trees (thresholds anywhere, also at data values and outside the data), random units."""
    X, rng = data
    tree = ExplanationTree(3, NAMES)
    leaves = [0]
    for k in range(draw.draw(st.integers(1, 5))):
        node = leaves.pop(int(rng.integers(len(leaves))))
        f = int(rng.integers(3))
        t = float(rng.choice(X[:, f])) if rng.random() < 0.5 else float(rng.uniform(-60, 60))
        left, right = tree.split(node, f, t, left_label=k, right_label=k + 1)
        leaves += [left, right]
    _check_rules_route_exactly(tree, X, _random_units(draw.draw, X))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(near_tie_data())
def test_oblique_rules_list_every_term_and_route_exactly(data):
    X, rng = data  # ties down to 1e-12 apart: the tree, its rules and the printed sums add alike
    tree = ExplanationTree(3, NAMES)
    w = {j: float(rng.normal()) * 10 ** float(rng.uniform(-3, 1)) for j in range(3)}
    v = X @ np.array([w[0], w[1], w[2]])
    tree.split_oblique(0, w, float(np.median(v)), left_label=0, right_label=1)
    _check_rules_route_exactly(tree, X)
    text = tree.rules(X)[0].format().split(" → ")[0]
    assert "more" not in text and text.count("·") == 3


def test_an_oblique_sum_that_depends_on_the_order_routes_as_printed():
    """Stored as c, a, b: -1e16 + 1e16 + 2·0.5 = 1, but printed largest |w| first (b, then c and a
    as stored): 2·0.5 - 1e16 + 1e16 = 0. The tree adds the terms in the printed order, so the
    printed rule read left to right routes as the tree does, on any number of rows."""
    X = np.array([[1e16, 0.5, -1e16], [0.0, 2.0, 0.0], [0.0, 0.0, 0.0]])
    tree = ExplanationTree(3, NAMES)
    tree.split_oblique(0, {2: 1.0, 0: 1.0, 1: 2.0}, 0.5, left_label=0, right_label=1)
    assert tree.predict(X).tolist() == [0, 1, 0]  # row 0 sums to 0 <= 0.5
    assert [int(tree.predict(X[i:i + 1])[0]) for i in range(3)] == [0, 1, 0]
    assert tree.predict(np.tile(X, (500, 1))).tolist() == [0, 1, 0] * 500
    assert str(tree.rules(X)[0]).startswith(f"2·{NAMES[1]} + 1·{NAMES[2]} + 1·{NAMES[0]} <= ")
    _check_rules_route_exactly(tree, X)
    _check_rules_route_exactly(tree, np.tile(X, (7, 1)))


def test_display_keeps_raw_thresholds_in_json():
    X = np.array([[1.5110], [1.5200], [1.5209], [1.5340]])
    tree = ExplanationTree(1, ["RI"])
    tree.split(0, 0, 1.5204808, 0, 1)
    rule = tree.rules(X)[0]
    assert str(rule).startswith("RI <= 1.5205")  # not 1.52: 1.5200 < 1.52048 must go left, 1.5209 right
    assert rule.to_dict()["conditions"][0]["high"] == 1.5204808


# ------------------------------------------------------------------ units
def test_probability_units_read_as_p_and_boundary():
    X = np.array([[-2.0], [-1.0], [0.5], [3.0]])
    tree = ExplanationTree(1, ["loop"])
    tree.split(0, 0, 0.0, 0, 1)
    u = [ProbabilityUnits(2.0, 0.0)]
    texts = [r.format().split(" → ")[0] for r in tree.rules(X, units=u)]
    assert texts[0].startswith("P(loop) <= ") and texts[1].startswith("P(loop) > ")
    assert u[0].boundary == 0.0


def test_percentile_units_read_as_top_share():
    X = np.arange(100, dtype=float)[:, None]
    tree = ExplanationTree(1, ["top_heavy"])
    tree.split(0, 0, 87.5, 0, 1)
    texts = [r.format().split(" → ")[0] for r in tree.rules(X, units=[percentile_units(X[:, 0])])]
    assert texts == ["top_heavy in bottom 88%", "top_heavy in top 12%"]


def test_calibrate_recovers_a_logistic_model():
    rng = np.random.default_rng(0)
    s = rng.normal(size=5000) * 2
    y = (rng.random(5000) < 1 / (1 + np.exp(-(1.5 * s - 0.5)))).astype(float)
    a, b = calibrate(s, y)
    assert abs(a - 1.5) < 0.15 and abs(b + 0.5) < 0.15


def test_bad_units_input_says_what_to_do():
    with pytest.raises(InvalidInputError, match="at least 2 data points"):
        percentile_units([1.0])
    with pytest.raises(InvalidInputError, match="probability P\\(concept \\| z\\) is constant"):
        probability_units(0.0, 1.0, name="loop")
    with pytest.raises(InvalidInputError, match="same .* for every data point"):
        probability_units(1e-300, 0.0, np.array([0.0, 1.0]), name="loop")
    with pytest.raises(InvalidInputError, match="not a unit"):
        concept_units("furlongs", np.zeros((3, 1)), ["a"])
    with pytest.raises(InvalidInputError, match="calibrated classifiers"):
        concept_units("probability", np.zeros((3, 1)), ["a"])
    assert concept_units("raw", np.zeros((3, 1)), ["a"]) is None
    assert isinstance(concept_units("percentile", np.arange(3.0)[:, None], ["a"])[0], PercentileUnits)


# ------------------------------------------------------------------ no saturated probabilities (issue 34, item 2)
def test_probabilities_closer_than_rounding_read_as_percentiles():
    """Coordinates 1e-12 apart under a slope of 1e-3 move P by about one ulp, where the computed
    sigmoid is not strictly monotone: a P threshold between them could send a point the wrong way
    (hypothesis found 'P(f0) < 0.731058578630005' misrouting a row), so those cuts read as percentiles."""
    X = np.array([[0, 2, -1], [2, 1, -2], [-1, 2, 0], [-2, 1, 1], [2, -2, -2], [2, -2, 0]]) * 1e-12
    y = np.array([0, 1, 2, 0, 1, 2])
    tree = CART(4, random_state=0).fit(X, y, feature_names=NAMES).tree_
    units = [probability_units(-1e-3, 1.0, X[:, j], NAMES[j]) for j in range(3)]
    _check_rules_route_exactly(tree, X, units)
    assert "P(" not in " ".join(str(r) for r in tree.rules(X, units=units))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(near_tie_data(), st.floats(1e-3, 1e6), st.floats(-50, 50), st.sampled_from([1.0, -1.0]))
def test_no_printed_probability_outside_one_and_99_percent(data, slope, intercept, sign):
    """Any calibration, however steep or shifted: a printed P(...) lies in [0.01, 0.99]; a cut in a
    tail reads as a percentile; every printed rule still routes every training point exactly."""
    X, rng = data
    y = rng.integers(0, 3, len(X))
    assume(np.unique(y).size > 1)
    tree = CART(4, random_state=0).fit(X, y, feature_names=NAMES).tree_
    units = []
    for j in range(3):
        try:
            units.append(probability_units(sign * slope, intercept, X[:, j], NAMES[j]))
        except InvalidInputError:  # the same P for every point: the stage reads such a concept in percentiles
            units.append(percentile_units(X[:, j]))
    _check_rules_route_exactly(tree, X, units)
    for rule in tree.rules(X, units=units):
        for p in re.findall(r"P\(\w+\) (?:<=|>|<) " + _NUM, str(rule)) + \
                [x for pair in re.findall(_NUM + r" < P\(\w+\) <= " + _NUM, str(rule)) for x in pair]:
            assert 0.01 <= float(p) <= 0.99, str(rule)
    text = " ".join(str(r) for r in tree.rules(X, units=units))
    for name in NAMES:  # one concept reads in one kind of unit in the whole tree
        assert not (f"P({name})" in text and re.search(rf"\b{name} in ", text)), text


def test_a_threshold_in_the_tail_prints_as_a_percentile():
    X = np.arange(100, dtype=float)[:, None]
    tree = ExplanationTree(1, ["laced"])
    tree.split(0, 0, 63.5, 0, 1)
    steep = probability_units(5.0, -200.0, X[:, 0], "laced")  # P = 0.5 at 40: every gap above is > 0.99
    texts = [r.format().split(" → ")[0] for r in tree.rules(X, units=[steep])]
    assert texts == ["laced in bottom 64%", "laced in top 36%"]
    mild = probability_units(0.1, -4.0, X[:, 0], "laced")
    texts = [r.format().split(" → ")[0] for r in tree.rules(X, units=[mild])]
    assert texts[0].startswith("P(laced) <= 0.") and texts[1].startswith("P(laced) > 0.")


def test_held_out_platt_scaling_does_not_saturate_on_separable_examples():
    """Examples a CAV separates perfectly: the smoothed, regularised, held-out fit keeps the slope
    finite, so points one class-gap beyond the examples still read inside (0.001, 0.999)."""
    from pipeline.concepts import CAVFitter

    rng = np.random.default_rng(0)
    Z = np.vstack([rng.normal(0, 1, (30, 8)), rng.normal(0, 1, (30, 8)) + 6 * np.eye(8)[0]])
    y = np.r_[np.zeros(30), np.ones(30)]
    fit = CAVFitter(n_repeats=3, cv=2, min_positives=5, random_state=0).fit(Z, y, ["c"])
    (a, b), = fit.calibration(Z, y, ["c"])
    s = Z @ fit.cavs_[0]
    gap = s[y == 1].mean() - s[y == 0].mean()
    assert np.isfinite(a) and a > 0
    p = 1 / (1 + np.exp(-(a * np.array([s[y == 0].mean(), s[y == 1].mean()]) + b)))
    assert 0.001 < p[0] < 0.1 and 0.9 < p[1] < 0.999, (p, gap)
    old = calibrate(s, y)  # the in-sample fit is at least as steep
    assert old[0] >= a * 0.5


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 40), st.integers(1, 4), st.integers(1, 7), st.data())
def test_column_ranges_equal_a_scan_of_each_column(n, m, block, data):
    """column_ranges (row-wise blocks) = each column's finite count, min and max on its own,
    with NaN, ±inf, huge and subnormal values anywhere."""
    from pipeline.concepts.units import column_ranges

    values = st.sampled_from([np.nan, np.inf, -np.inf, 1e300, -1e300, 5e-324, 0.0, -2.5, 3.0, 1.0])
    X = np.array(data.draw(st.lists(values, min_size=n * m, max_size=n * m)), dtype=np.float64).reshape(n, m)
    count, lo, hi = column_ranges(X, block_rows=block)
    for j in range(m):
        col = X[:, j][np.isfinite(X[:, j])]
        assert count[j] == col.size
        if col.size:
            assert lo[j] == col.min() and hi[j] == col.max()
        else:
            assert np.isnan(lo[j]) and np.isnan(hi[j])


def test_percentile_columns_are_sorted_once_and_side_by_side():
    """values: the finite reference values sorted, computed on first use and kept; threads sorting
    different concepts' columns do not wait for one another (no class-wide lock)."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(0)
    columns = [rng.normal(size=2000) for _ in range(6)]
    columns[2][[3, 9]] = [np.nan, np.inf]
    units = [PercentileUnits(c) for c in columns]
    with ThreadPoolExecutor(3) as pool:
        got = list(pool.map(lambda u: u.values, units))
    for u, c, v in zip(units, columns, got):
        assert np.array_equal(v, np.sort(c[np.isfinite(c)])) and u.values is v
    assert units[0](np.array([np.inf]))[0] == 100.0
    import pickle

    again = pickle.loads(pickle.dumps(units[2]))  # the sorted copy and the lock stay behind
    assert set(vars(again)) == {"column"} and np.array_equal(again.values, got[2])


def test_percentile_columns_are_sorted_ahead_only_where_the_bundle_sorts_every_row():
    """The project stage sorts the percentile maps' columns on a thread while the trees are fitted,
    up to the bundle's million rows; beyond them (80 MB a column at 10M rows) and on one thread it
    leaves them to be sorted when a printed percentile asks."""
    import threading

    from pipeline.app.data.budget import PERCENTILE_ROWS
    from pipeline.app.stages.project import sort_ahead

    rng = np.random.default_rng(0)
    small = [PercentileUnits(rng.normal(size=600_000)) for _ in range(2)]
    big = [PercentileUnits(np.zeros(10 * PERCENTILE_ROWS + 1))]
    one = [PercentileUnits(rng.normal(size=600_000)) for _ in range(2)]
    from types import SimpleNamespace

    sort_ahead(SimpleNamespace(threads=2), small)  # the run's plan: its threads
    sort_ahead(SimpleNamespace(threads=2), big)
    sort_ahead(SimpleNamespace(threads=1), one)
    for thread in threading.enumerate():
        if thread.name == "sort-percentiles":
            thread.join()
    assert all("_sorted" in vars(u) for u in small)
    assert "_sorted" not in vars(big[0]) and not any("_sorted" in vars(u) for u in one)


def _calibration_one_concept_at_a_time(fitter, Z, labels, names, n_folds=3, C=1.0):
    """CAVFitter.calibration as first written: each concept drawn and fitted in turn (the brute force)."""
    from sklearn.model_selection import StratifiedKFold

    from pipeline.concepts.cav import _float32_columns
    from pipeline.concepts.fitters import build_fitter

    f = build_fitter(fitter.fitter)
    Zf = _float32_columns(Z)[0]
    rng = np.random.default_rng(fitter.random_state)
    out = np.full((len(fitter.concept_names_), 2), np.nan)
    for m, (name, cav) in enumerate(zip(fitter.concept_names_, fitter.cavs_)):
        y = labels[:, names.index(name)]
        pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
        k = fitter.max_per_class
        idx = np.concatenate([rng.choice(pos, min(k, pos.size), replace=False),
                              rng.choice(neg, min(k, neg.size), replace=False)])
        ys = y[idx]
        s = Z[idx] @ cav
        full_mid = (s[ys == 1].mean() + s[ys == 0].mean()) / 2
        folds = min(n_folds, pos.size, neg.size, k)
        held = np.empty(idx.size)
        for tr, te in StratifiedKFold(folds, shuffle=True, random_state=int(rng.integers(2**31 - 1))).split(idx, ys):
            w, _ = fitter._direction(f, Zf[idx[tr]].astype(np.float64), ys[tr], 0)
            s_tr = Z[idx[tr]] @ w
            held[te] = Z[idx[te]] @ w - (s_tr[ys[tr] == 1].mean() + s_tr[ys[tr] == 0].mean()) / 2
        a, b = calibrate(held, ys, C=C)
        out[m] = (a, b - a * full_mid)
    return out


def test_platt_models_are_the_same_on_any_number_of_threads():
    """calibration draws every concept's examples first, then fits every concept's folds in one batched
    solve: the same Platt models as drawing and fitting them one after the other with scikit-learn (to
    the solver's tolerance), and bit for bit the same numbers on 1 or 3 threads."""
    from pipeline.concepts import CAVFitter
    from pipeline.threads import run_threads

    rng = np.random.default_rng(1)
    Z = rng.normal(size=(240, 6))
    labels = np.column_stack([(Z[:, j] + 0.5 * rng.normal(size=240) > 0).astype(float) for j in range(4)])
    names = [f"c{j}" for j in range(4)]
    fit = CAVFitter(n_repeats=3, cv=2, random_state=0).fit(Z, labels, names)
    want = _calibration_one_concept_at_a_time(fit, Z, labels, names)
    got = {}
    for n in (1, 3):
        with run_threads(n):
            got[n] = fit.calibration(Z, labels, names)
    np.testing.assert_allclose(got[1], want, rtol=1e-3, atol=1e-4)  # folds solved to 1e-6, not to the last bit
    assert np.array_equal(got[1], got[3])
