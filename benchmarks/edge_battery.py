"""Edge-case battery of issue 29: what each estimator does at the edges of the number line, with
bad labels and hostile tree documents (library only; the CLI and disk-full cases are tests).

    PYTHONPATH=src .venv/bin/python benchmarks/edge_battery.py [--label after]
    PYTHONPATH=/path/to/old/src .venv/bin/python benchmarks/edge_battery.py --label before
    PYTHONPATH=src .venv/bin/python benchmarks/edge_battery.py --section issue51 --label issue51-after

The ``issue51`` section (``benchmarks/edge_battery_issue51.py``) tries the surfaces of issue 51 as a
new user and as someone trying to break them: tampered saved explainers, inputs by name and in
other units, settings that cannot work, the explain command's options, shard order; each case is
``clear``, ``handled``, ``silent`` or ``unclear``, and the counts are printed.

The ``issue36`` section (item 9 of issue 36) records TAO's cost on data whose k-means cost lies
beyond float64, ``fit_gaussian_mixture`` given a fitted KMeans, and Concept-MMDT with CAVs
scaled by 1e-300. Each case ends in one outcome: ``same`` (the partition of the unscaled data, ARI 1 against the
estimator's own tree on the base data), ``wrong`` (a different partition, with its ARI),
``error`` (the exception's class and first words) or ``nan-cost``; ``differs`` marks a partition
that legitimately changes (per-feature scaling for Euclidean methods, one more point). Runs of different code
versions merge into benchmarks/results/edge_battery.json under their ``--label``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.datasets import load_iris
from sklearn.metrics import adjusted_rand_score

RESULTS = Path(__file__).parent / "results" / "edge_battery.json"
_EUCLID = "a Euclidean method: the feature scaled by 1e300 now decides every distance"
_NEW_POINT = "the outlier is one more point, which may move a cut"
#: cases whose partition legitimately differs from the unscaled one (a different problem)
EXPECTED_CHANGE = {
    "SpExKNN": {"one feature x 1e300": _EUCLID}, "ExKMC": {"one feature x 1e300": _EUCLID},
    "TAO": {"one feature x 1e300": _EUCLID},
    "CART": {"one 1e300 outlier": _NEW_POINT}, "SpExClique": {"one 1e300 outlier": _NEW_POINT},
    "IMM": {"one 1e300 outlier": _NEW_POINT}, "EMN": {"one 1e300 outlier": _NEW_POINT},
    "MMDT": {"one 1e300 outlier": _NEW_POINT}, "RandomizedMMDT": {"one 1e300 outlier": _NEW_POINT},
    "ConceptMMDT": {"one 1e300 outlier": _NEW_POINT},
}


def estimators():
    from pipeline import trees as T

    return {
        "MMDT": lambda: T.MMDT(), "RandomizedMMDT": lambda: T.RandomizedMMDT(random_state=0),
        "ConceptMMDT": lambda: T.ConceptMMDT(np.eye(4)), "CART": lambda: T.CART(random_state=0),
        "SpExClique": lambda: T.SpExClique(), "SpExKNN": lambda: T.SpExKNN(n_leaves=3, random_state=0),
        "IMM": lambda: T.IMM(), "EMN": lambda: T.EMN(), "ExKMC": lambda: T.ExKMC(n_leaves=6),
        "TAO": lambda: T.TAO(n_clusters=3, depth=2, max_rounds=5, random_state=0),
    }


def fit_predict(name, make, X, y):
    est = make()
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        if name == "TAO":
            est.fit(X, init_labels=y)
        else:
            est.fit(X, y)
        pred = est.predict(X)
    return est, pred


def outcome(name, make, X, y, base=None) -> str:
    try:
        est, pred = fit_predict(name, make, X, y)
    except Exception as exc:  # noqa: BLE001 - the battery records what happened
        return f"error: {type(exc).__name__}: {str(exc)[:110]}"
    if name == "TAO" and np.isnan(est.kmeans_cost_):
        return "nan-cost"
    if base is None:
        return "ok"
    n = min(len(base), len(pred))
    ari = adjusted_rand_score(base[:n], pred[:n])
    return "same" if ari == 1.0 else f"wrong (ARI {ari:.3f} vs the unscaled tree)"


def magnitude_cases(X, y):
    one = np.array([1e300, 1.0, 1.0, 1.0])
    return {
        "one feature x 1e300": (X * one, y),
        "all x 1e300": (X * 1e300, y),
        "all x 1e-300": (X * 1e-300, y),
        "near 1.7e308": (X / np.abs(X).max() * 1.7e308, y),
        "subnormal (x 2**-1060)": (X * 2.0**-1060, y),
        "offset + 2**40": (X + 2.0**40, y),
        "one 1e300 outlier": (np.vstack([X, [[1e300, 5.0, 3.0, 1.0]]]), np.append(y, 0)),
    }


def label_cases(X, y):
    nan = y.astype(float)
    nan[5] = np.nan
    inf = y.astype(float)
    inf[5] = np.inf
    mixed = np.array(["a", "b", "c"], dtype=object)[y]
    mixed[5] = np.nan
    mixed_types = np.array(["a", "b", "c"], dtype=object)[y]
    mixed_types[5] = 2
    return {"NaN label": (X, nan), "inf label": (X, inf), "str labels + NaN": (X, mixed),
            "str + int labels": (X, mixed_types), "labels {-1, 1}": (X, np.where(y == 0, -1, 1))}


def json_cases():
    from pipeline.trees import ExplanationTree

    def chain(depth):
        nodes = []
        for i in range(depth):
            nodes += [{"feature": 0, "threshold": float(i), "left": 2 * i + 1, "right": 2 * i + 2}, {"label": i}]
        return {"format": "explanation-tree", "version": 1, "n_features": 1, "nodes": nodes + [{"label": depth}]}

    def big_label():
        doc = chain(1)
        doc["nodes"][1]["label"] = 10**30
        return ExplanationTree.from_dict(doc).predict(np.array([[-1.0]]))

    cases = {
        "JSON nested 1e5 deep": lambda: ExplanationTree.from_json("[" * 100_000 + "]" * 100_000),
        "tree 5000 deep: rules()": lambda: ExplanationTree.from_dict(chain(5000)).rules(),
        "tree 5000 deep: to_text()": lambda: ExplanationTree.from_dict(chain(5000)).to_text(),
        "leaf label 10**30: load + predict": big_label,
    }
    out = {}
    for name, fn in cases.items():
        try:
            fn()
            out[name] = "ok"
        except Exception as exc:  # noqa: BLE001
            out[name] = f"error: {type(exc).__name__}: {str(exc)[:110]}"
    return out


def degenerate_cases(X, y):
    import scipy.sparse as sp

    from pipeline.trees import TAO, SpExGraph

    cases = {
        "TAO init_labels all 0, n_clusters=3": lambda: TAO(n_clusters=3, random_state=0).fit(X, init_labels=0 * y),
        "TAO init_labels all -1 (noise_label=-1)":
            lambda: TAO(n_clusters=3, noise_label=-1).fit(X, init_labels=0 * y - 1),
        "SpExGraph on an edgeless graph": lambda: SpExGraph(n_leaves=3).fit(X, sp.csr_matrix((len(X), len(X)))),
    }
    return run_cases(cases)


def run_cases(cases: dict, width: int = 110) -> dict:
    """Each case's outcome: its text (a case returning a str), ``ok (n leaves)`` or the error's first words."""
    out = {}
    for name, fn in cases.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = fn()
            out[name] = result if isinstance(result, str) else f"ok ({getattr(result.tree_, 'n_leaves', '?')} leaves)"
        except Exception as exc:  # noqa: BLE001 - the battery records what happened
            out[name] = f"error: {type(exc).__name__}: {str(exc)[:width]}"
    return out


def issue36_cases(X, y):
    """Issue 36, item 9: a cost beyond float64, a KMeans where a mixture is expected, CAVs at 1e-300."""
    from sklearn.cluster import KMeans

    from pipeline.trees import TAO, ConceptMMDT, MMDT, RandomizedMMDT

    def tao_cost(Xs):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            est = TAO(n_clusters=3, depth=2, max_rounds=5, random_state=0).fit(Xs, init_labels=y)
        said = [str(w.message) for w in caught if "k-means cost" in str(w.message)]
        log10 = getattr(est, "kmeans_cost_log10_", None)
        return (f"kmeans_cost_={est.kmeans_cost_:.4g}" + (f", log10={log10:.4f}" if log10 is not None else "")
                + (f"; warns: {said[0][:110]}" if said else "; no warning"))

    km = KMeans(3, n_init=3, random_state=0).fit(X)
    means = np.array([X[y == k].mean(axis=0) for k in range(3)])
    cavs = np.random.default_rng(0).normal(size=(3, X.shape[1]))
    cases = {
        "TAO one feature x 1e300: cost": lambda: tao_cost(X * np.array([1e300, 1.0, 1.0, 1.0])),
        "TAO near 1.7e308: cost": lambda: tao_cost(X / np.abs(X).max() * 1.7e308),
        "TAO all x 1e-300: cost": lambda: tao_cost(X * 1e-300),
        "MMDT.fit_gaussian_mixture(fitted KMeans)": lambda: MMDT().fit_gaussian_mixture(km),
        "RandomizedMMDT.fit_gaussian_mixture(fitted KMeans)": lambda: RandomizedMMDT().fit_gaussian_mixture(km),
        "ConceptMMDT(CAVs x 1e-300).fit_mixture": lambda: ConceptMMDT(cavs * 1e-300).fit_mixture(means, np.cov(X.T)),
        "ConceptMMDT(CAVs x 1e-300).fit": lambda: ConceptMMDT(cavs * 1e-300).fit(X, y),
    }
    return run_cases(cases, width=160)


def vade_case(X, y):
    from pipeline.encoders import VaDEEncoder

    enc = VaDEEncoder(n_clusters=3, latent_dim=2, hidden_dims=(8,), epochs=1, pretrain_epochs=1, n_init=1).fit(X)
    try:
        enc.transform(X * 1e300)
        return "ok"
    except Exception as exc:  # noqa: BLE001
        return f"error: {type(exc).__name__}: {str(exc)[:110]}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--label", default="after", help="key of this run in the JSON (e.g. before / after)")
    ap.add_argument("--section", choices=["all", "issue51"], default="all",
                    help="issue51: only issue 51's cases (benchmarks/edge_battery_issue51.py)")
    args = ap.parse_args()
    if args.section == "issue51":
        return issue51(args.label)
    X, y = load_iris(return_X_y=True)
    start = time.perf_counter()
    makers = estimators()
    magnitudes = {}
    for name, make in makers.items():
        base = fit_predict(name, make, X, y)[1]
        magnitudes[name] = {}
        for case, (Xc, yc) in magnitude_cases(X, y).items():
            result = outcome(name, make, Xc, yc, base)
            if result.startswith("wrong") and case in EXPECTED_CHANGE.get(name, ()):
                result = result.replace("wrong", "differs") + f" - expected: {EXPECTED_CHANGE[name][case]}"
            magnitudes[name][case] = result
    labels = {name: {case: outcome(name, make, Xc, yc) for case, (Xc, yc) in label_cases(X, y).items()}
              for name, make in makers.items() if name != "ConceptMMDT"}
    run = {"magnitudes": magnitudes, "labels": labels, "degenerate": degenerate_cases(X, y), "json": json_cases(),
           "issue36": issue36_cases(X, y),
           "vade_transform_x1e300": vade_case(X, y), "seconds": round(time.perf_counter() - start, 1),
           "load_average": os.getloadavg()[0]}
    data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    data[args.label] = run
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(data, indent=1))
    for section in ("magnitudes", "labels"):
        for name, cases in run[section].items():
            for case, result in cases.items():
                print(f"{section:10s} {name:15s} {case:28s} {result}")
    for section in ("degenerate", "json", "issue36"):
        for case, result in run[section].items():
            print(f"{section:10s} {case:44s} {result}")
    print(f"vade transform of X*1e300: {run['vade_transform_x1e300']}")
    print(f"wrote {RESULTS} [{args.label}]")


def issue51(label: str) -> None:
    """Issue 51's cases, merged into the JSON under ``label`` (key ``issue51``); prints every case and the counts."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from edge_battery_issue51 import run_cases

    start = time.perf_counter()
    cases = run_cases()
    cases.update(seconds=round(time.perf_counter() - start, 1), load_average=os.getloadavg()[0])
    data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    data.setdefault(label, {})["issue51"] = cases
    RESULTS.write_text(json.dumps(data, indent=1))
    for section, found in cases.items():
        if isinstance(found, dict) and section != "counts":
            for case, (result, message) in found.items():
                print(f"{section:9s} {result:8s} {case:72s} {message}")
    print("counts:", cases["counts"], f"({cases['seconds']} s, load {cases['load_average']:.1f})")
    print(f"wrote {RESULTS} [{label}]")


if __name__ == "__main__":
    main()
