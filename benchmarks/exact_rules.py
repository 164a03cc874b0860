"""Do printed rules route the training points as the tree does, *without* the training data? (issue 36, item 1)

Fits every tree estimator, prints ``tree_.rules()`` without ``X``, parses each rule back, evaluates
it on the training rows and counts the rows it sends to another leaf than the tree does
(a row counts once, however many rules get it wrong). Oblique rules cut to their largest terms
(``+ n more``) cannot be evaluated and are reported as such.

    PYTHONPATH=src .venv/bin/python benchmarks/exact_rules.py [--glass glass.csv] [--label after]
    PYTHONPATH=/path/to/old/src .venv/bin/python benchmarks/exact_rules.py --glass glass.csv --label before
    PYTHONPATH=src .venv/bin/python benchmarks/exact_rules.py --glass glass.csv --speed   # + what the neighbours cost

Data: near ties (three columns whose values differ in their 6th-12th significant digit, labels
following those differences; 20 seeded draws per estimator) and, with ``--glass``, the UCI glass
identification data (214 rows, RI Na Mg Al Si K Ca Ba Fe, Type) as a CSV — it is not in
../shared/data; one source is the Debian package r-cran-mlbench (``data/Glass.rda``). On glass,
CART and IMM explain GaussianMixture(3, random_state=0) and KMeans(5, n_init=10, random_state=0)
clusterings of the nine columns. Results merge into benchmarks/results/exact_rules.json under
``--label``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
import warnings
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).parent / "results" / "exact_rules.json"
_NUM = r"(-?\d[\d.]*(?:e[+-]?\d+)?)"


# ------------------------------------------------------------------ reading printed rules back
def lhs_values(lhs: str, X: np.ndarray, names) -> np.ndarray:
    """A feature's values, or a printed weighted sum ``2.5·f0 - 0.125·f1`` added left to right."""
    if "·" not in lhs:
        return X[:, names.index(lhs)]
    terms = re.findall(r"(^|[+-]) ?" + r"(\d[\d.]*(?:e[+-]?\d+)?)·(\w+)", lhs.strip())
    if "".join(f"{s}{w}{n}" for s, w, n in terms).replace(" ", "") != lhs.replace(" ", "").replace("·", ""):
        raise ValueError(f"not a weighted sum of named terms: {lhs!r}")
    total = np.zeros(len(X))
    for sign, w, name in terms:
        total = total + (-float(w) if sign == "-" else float(w)) * X[:, names.index(name)]
    return total


def holds(cond: str, X: np.ndarray, names) -> np.ndarray:
    """Rows of ``X`` satisfying one printed condition (``a < lhs <= b``, ``lhs <= t``, ``lhs > t``)."""
    cond = cond.strip()
    m = re.fullmatch(_NUM + r" < (.+) <= " + _NUM, cond)
    if m:
        v = lhs_values(m[2], X, names)
        return (v > float(m[1])) & (v <= float(m[3]))
    m = re.fullmatch(r"(.+) (<=|>) " + _NUM, cond)
    if not m:
        raise ValueError(f"unparsed condition {cond!r}")
    v = lhs_values(m[1], X, names)
    return v <= float(m[3]) if m[2] == "<=" else v > float(m[3])


def rule_selects(text: str, X: np.ndarray, names) -> np.ndarray:
    """Rows of ``X`` a printed rule (``cond and cond → cluster k · annotations``) selects."""
    body = text.split(" → ")[0]
    mask = np.ones(len(X), dtype=bool)
    if body != "always":
        for cond in body.split(" and "):
            mask &= holds(cond, X, names)
    return mask


def misrouted(tree, X: np.ndarray) -> int | str:
    """Training rows some printed rule (``tree.rules()``, no X) routes unlike the tree."""
    names = tree.feature_names or [f"x[{j}]" for j in range(tree.n_features)]
    leaf = tree.apply(X)
    bad = np.zeros(len(X), dtype=bool)
    for rule in tree.rules():
        if "more" in str(rule):
            return "not evaluable: oblique terms cut ('+ n more')"
        bad |= rule_selects(str(rule), X, names) != (leaf == rule.leaf)
    return int(bad.sum())


# ------------------------------------------------------------------ cases
def near_tie_data(seed: int):
    """As tests/test_exact_rules.py draws them: values differing in their 6th-12th significant digit."""
    rng = np.random.default_rng(seed)
    n, digit = int(rng.integers(24, 61)), int(rng.integers(6, 13))
    base = rng.uniform(0.5, 9.5, 3) * 10.0 ** rng.integers(-3, 4, 3) * rng.choice([-1, 1], 3)
    steps = rng.integers(-20, 21, size=(n, 3))
    X = base * (1 + steps * 10.0 ** -digit)
    y = (steps[:, 0] > 0).astype(int) + 2 * (steps[:, 1] > 5)
    return X, np.unique(y, return_inverse=True)[1], rng


def fit(name: str, X, y, rng, names):
    from pipeline import trees as T

    k = int(y.max()) + 1
    if name == "ConceptMMDT":
        C = rng.normal(size=(X.shape[1], X.shape[1])) + 3 * np.eye(X.shape[1])
        est = T.ConceptMMDT(cavs=C, concept_names=names, random_state=0).fit(X, y)
        return est.tree_, est.transform(X)
    est = {
        "MMDT": lambda: T.MMDT(random_state=0), "RandomizedMMDT": lambda: T.RandomizedMMDT(random_state=0),
        "CART": lambda: T.CART(random_state=0), "IMM": lambda: T.IMM(random_state=0),
        "EMN": lambda: T.EMN(random_state=0), "ExKMC": lambda: T.ExKMC(min(k + 2, len(X)), random_state=0),
        "SpExClique": lambda: T.SpExClique(random_state=0),
        "SpExKNN": lambda: T.SpExKNN(k, n_neighbors=5, random_state=0),
        "TAO": lambda: T.TAO(k, depth=2, max_rounds=4, max_tao_iter=3, random_state=0),
    }[name]()
    if name == "TAO":
        est.fit(X, init_labels=y, feature_names=names)
    else:
        est.fit(X, y, feature_names=names)
    return est.tree_, X


ESTIMATORS = ["MMDT", "RandomizedMMDT", "ConceptMMDT", "CART", "IMM", "EMN", "ExKMC", "SpExClique", "SpExKNN", "TAO"]


def near_ties(draws: int = 20) -> dict:
    out = {}
    for name in ESTIMATORS:
        counts, skipped, other = [], 0, set()
        for seed in range(draws):
            X, y, rng = near_tie_data(seed)
            try:
                tree, rows = fit(name, X, y, rng, ["f0", "f1", "f2"])
            except Exception:  # noqa: BLE001 - e.g. means too close for MMDT: no tree to print
                skipped += 1
                continue
            m = misrouted(tree, rows)
            (counts.append(m) if isinstance(m, int) else other.add(m))
        out[name] = {"fits": len(counts) + len(other), "skipped": skipped,
                     "fits_with_misrouted_rows": sum(c > 0 for c in counts), "misrouted_rows": int(sum(counts)),
                     **({"note": sorted(other)[0]} if other else {})}
    return out


def glass(path: Path) -> dict:
    import pandas as pd
    from sklearn.cluster import KMeans
    from sklearn.mixture import GaussianMixture

    from pipeline.trees import CART, IMM

    df = pd.read_csv(path)
    names = [c for c in df.columns if c != "Type"]
    X = df[names].to_numpy(float)
    out = {}
    for label, y in (("GaussianMixture(3, random_state=0)", GaussianMixture(3, random_state=0).fit(X).predict(X)),
                     ("KMeans(5, n_init=10, random_state=0)", KMeans(5, n_init=10, random_state=0).fit_predict(X))):
        for est in (CART(random_state=0), IMM(random_state=0)):
            tree = est.fit(X, y, feature_names=names).tree_
            out[f"{type(est).__name__} on {label}"] = {
                "RI rules": [str(r) for r in tree.rules() if "RI" in str(r)],
                "misrouted_training_rows": misrouted(tree, X),
                "RI cuts (threshold, largest RI going left, smallest going right)": [
                    (float(tree.threshold[n]), float(X[X[:, 0] <= tree.threshold[n], 0].max()),
                     float(X[X[:, 0] > tree.threshold[n], 0].min()))
                    for n in range(tree.n_nodes) if not tree.is_leaf(n) and tree.feature[n] == 0],
            }
    return out


def speed() -> dict:
    """What keeping the neighbours costs: ``record_neighbours`` (run at the end of every fit) against
    the whole fit, medians in one process at 1 thread, on iris and on fair_speed.py's 50k x 512 blobs."""
    from sklearn.cluster import KMeans
    from sklearn.datasets import load_iris, make_blobs

    from pipeline.threads import limit_threads
    from pipeline.trees import CART, IMM, MMDT, ExKMC, SpExClique

    def median(f, reps):
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            f()
            times.append(time.perf_counter() - t)
        return float(np.median(times))

    out = {}
    with limit_threads(1):
        Xi = load_iris().data
        yi = KMeans(3, n_init=3, random_state=0).fit_predict(Xi)
        Xb, _ = make_blobs(50000, 512, centers=10, cluster_std=6, random_state=0)
        yb = KMeans(10, n_init=3, random_state=0).fit_predict(Xb)
        for name, make, X, y, reps in [("IMM iris", lambda: IMM(random_state=0), Xi, yi, 301),
                                       ("ExKMC(6) iris", lambda: ExKMC(6, random_state=0), Xi, yi, 201),
                                       ("CART iris", lambda: CART(random_state=0), Xi, yi, 201),
                                       ("MMDT iris", lambda: MMDT(random_state=0), Xi, yi, 201),
                                       ("IMM 50k x 512", lambda: IMM(random_state=0), Xb, yb, 3),
                                       ("SpExClique 50k x 512", lambda: SpExClique(random_state=0), Xb, yb, 3)]:
            tree = make().fit(X, y).tree_
            fit_s = median(lambda: make().fit(X, y), reps)
            keep_s = median(lambda: tree.record_neighbours(X), reps)
            out[name] = {"fit_ms": round(fit_s * 1e3, 4), "record_neighbours_ms": round(keep_s * 1e3, 4),
                         "share_of_fit": round(keep_s / fit_s, 4), "internal_nodes": (tree.n_nodes - 1) // 2,
                         "load_average": os.getloadavg()[0]}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--glass", type=Path, help="CSV of the UCI glass data (RI ... Fe, Type)")
    ap.add_argument("--draws", type=int, default=20, help="near-tie data sets per estimator")
    ap.add_argument("--label", default="after", help="key of this run in the JSON (e.g. before / after)")
    ap.add_argument("--speed", action="store_true", help="also time record_neighbours against the fits")
    args = ap.parse_args()
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = {"near_ties": near_ties(args.draws), **({"glass": glass(args.glass)} if args.glass else {}),
               **({"speed": speed()} if args.speed else {})}
    run.update(seconds=round(time.perf_counter() - start, 1), load_average=os.getloadavg()[0])
    data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    data[args.label] = run
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(data, indent=1))
    for name, r in run["near_ties"].items():
        print(f"near ties  {name:15s} {r}")
    for case, r in run.get("glass", {}).items():
        print(f"glass      {case}: misrouted {r['misrouted_training_rows']}")
        for text in r["RI rules"]:
            print(f"             {text}")
        print(f"             cuts on RI: {r['RI cuts (threshold, largest RI going left, smallest going right)']}")
    for case, r in run.get("speed", {}).items():
        print(f"speed      {case}: {r}")
    print(f"wrote {RESULTS} [{args.label}]")


if __name__ == "__main__":
    main()
