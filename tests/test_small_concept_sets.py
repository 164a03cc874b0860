"""Small concept sets work with the defaults, and a tree that cannot be fitted never aborts the
run (issue 34, item 3)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline.app.configuration.config import compose_config
from pipeline.app.running.runner import run
from pipeline.concepts import CAVFitter
from pipeline.concepts.cav import standardize_shrinkage
from pipeline.validation import InvalidInputError


def planted_sentences(n_pos: int, seed: int = 0, d: int = 384, scale: float = 1.0):
    """'Sentence embeddings' of norm ``scale`` (d dims, a few dead dimensions, constant up to
    rounding at ~1e-27 of the norm, as SBERT's are) of 4 concepts, each n_pos examples along its
    own planted direction, and 12 random negatives."""
    rng = np.random.default_rng(seed)
    directions = np.linalg.qr(rng.normal(size=(d, 4)))[0].T  # 4 orthonormal concept directions
    directions[:, :3] = 0.0
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    rows, labels = [], []
    for m in range(4):
        rows.append(0.6 * directions[m] + rng.normal(0, 0.04, (n_pos, d)))
        lab = np.full((n_pos, 4), np.nan)
        lab[:, m] = 1.0
        labels.append(lab)
    rows.append(rng.normal(0, 0.04, (12, d)))
    labels.append(np.zeros((12, 4)))
    Z = np.vstack(rows)
    Z *= scale / np.linalg.norm(Z, axis=1, keepdims=True)
    Z[:, :3] = rng.normal(0, 1e-27 * scale, (len(Z), 3))  # dead dimensions: constant up to rounding
    return Z.astype(np.float32), np.vstack(labels), directions


@pytest.mark.parametrize("n_pos, scale", [(5, 1.0), (7, 1e-6), (10, 1e6)])
def test_cavs_from_5_to_10_examples_stay_distinct_on_planted_directions(n_pos, scale):
    """Embeddings of any scale (unit norm, 1e-6, 1e6): the default CAVs of 5-10 examples each."""
    Z, labels, directions = planted_sentences(n_pos, scale=scale)
    names = ["sport", "food", "software", "plants"]
    fit = CAVFitter(min_positives=5, random_state=0).fit(Z, labels, names)  # the defaults otherwise
    assert fit.concept_names_ == names and not fit.dropped_
    G = np.abs(fit.cavs_ @ fit.cavs_.T)
    np.fill_diagonal(G, 0)
    assert G.max() < 0.5, G
    agreement = fit.cavs_ @ directions.T  # each CAV closest to its own planted direction
    assert (np.argmax(agreement, axis=1) == np.arange(4)).all() and np.diag(agreement).min() > 0.5
    assert (fit.cavs_[:, :3] ** 2).sum(axis=1).max() < 1e-6  # no weight on the dead dimensions
    # what the defaults did before (plain z-scores): every CAV in the 3 dead dimensions, none
    # near its concept
    old = CAVFitter(min_positives=5, random_state=0, standardize=True).fit(Z, labels, names)
    assert (old.cavs_[:, :3] ** 2).sum(axis=1).min() > 0.9
    assert np.abs(old.cavs_ @ directions.T).max() < 0.3


def test_auto_standardisation_needs_ten_rows_per_feature():
    assert standardize_shrinkage("auto", 1600, 10) == 0.0  # MNIST's VaDE latents: z-scores, as before
    assert standardize_shrinkage("auto", 16, 384) == "common"  # a concept folder in SBERT space: one scale
    assert standardize_shrinkage("auto", 1600, 1280) == "common"  # EfficientNet features
    assert standardize_shrinkage(True, 5, 5) == 0.0 and standardize_shrinkage(False, 5, 5) is None
    assert standardize_shrinkage(0.3, 5, 5) == 0.3 and standardize_shrinkage(None, 5, 5) is None
    Z, labels, _ = planted_sentences(10)
    shrunk = CAVFitter(min_positives=5, random_state=0, standardize=0.5).fit(Z, labels)
    assert len(shrunk.concept_names_) == 4
    with pytest.raises(ValueError, match="standardize"):
        CAVFitter(standardize="sometimes").fit(Z, labels)


def _identical_concept_means(d):
    """Three blobs; two share every value of coordinate 0 (the only one the concept reads), so
    their concept means C·μ_k are equal: Concept-MMDT cannot be fitted, CART can."""
    rng = np.random.default_rng(0)
    a = rng.normal(0, 0.3, (40, 2)) + [6.0, 0.0]
    b = rng.normal(0, 0.3, (40, 2)) + [0.0, 5.0]
    c = np.column_stack([b[::-1, 0], rng.normal(0, 0.3, 40) - 5.0])  # b's coordinate 0, reversed
    X = np.vstack([a, b, c]).astype(np.float64)
    np.save(d / "emb.npy", X)
    (d / "labels.csv").write_text("\n".join(["a"] * 40 + ["b"] * 40 + ["c"] * 40) + "\n")
    pos = np.column_stack([rng.normal(6, 0.3, 20), np.zeros(20)])
    neg = np.column_stack([rng.normal(0, 0.3, 20), np.zeros(20)])
    np.savez(d / "cex.npz", right=pos, random=neg)


def test_a_tree_row_that_cannot_be_fitted_does_not_abort_the_run(tmp_path, capsys):
    _identical_concept_means(tmp_path)
    common = [f"paths.output_dir={tmp_path / 'out'}", f"paths.cache_dir={tmp_path / 'cache'}",
              "report.figures=false", "report.html=false", "dataset=files", f"dataset.path={tmp_path / 'emb.npy'}",
              f"dataset.labels={tmp_path / 'labels.csv'}", "concepts=examples", f"concepts.path={tmp_path / 'cex.npz'}",
              "cav=mean_difference", "clustering=gmm", "clustering.n_clusters=3"]
    df = run(compose_config([*common, "explainer=[concept_mmdt,concept_cart]"]))
    out = capsys.readouterr().out
    rows = df.set_index("explainer")
    assert rows.loc["concept_cart", "ref_ari"] > 0  # the other row is fitted and reported
    assert "Assumption 3" in rows.loc["concept_mmdt", "error"]
    assert "concept_mmdt could not be fitted" in out and "concept_cart rules:" in out
    assert "explainer=[concept_cart]" in out and "concepts=none explainer=[mmdt,cart]" in out  # the options that fix it
    assert (tmp_path / "out" / "trees" / "concept_cart.json").exists()
    assert "error" in pd.read_csv(tmp_path / "out" / "results.csv").columns
    # only when every row fails is there nothing to report: the run stops with the row's reason
    with pytest.raises(InvalidInputError, match="Assumption 3"):
        run(compose_config([*common, "explainer=[concept_mmdt]", f"paths.output_dir={tmp_path / 'out2'}"]))


EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "small_text"


@pytest.mark.slow
def test_the_small_text_example_runs_with_the_defaults(tmp_path, capsys):
    """docs/own-data.md's small text run: 40 sentences in 4 topics, concept folders of 10 sentences,
    SBERT, defaults only. Before issue 34 the `software` CAV collapsed onto `food` and
    Concept-MMDT aborted the run."""
    pytest.importorskip("sentence_transformers")
    df = run(compose_config([f"paths.output_dir={tmp_path / 'out'}", f"paths.cache_dir={tmp_path / 'cache'}",
                             "report.figures=false", "report.html=false", "offline=true", "dataset=files",
                             f"dataset.path={EXAMPLE / 'texts.csv'}", "dataset.text_column=text",
                             "dataset.labels=topic", "encoder=sbert", "concepts=examples",
                             f"concepts.path={EXAMPLE / 'concepts'}", "explainer=[concept_mmdt,concept_cart]"]))
    out = capsys.readouterr().out
    rows = df.set_index("explainer")
    assert "error" not in df.columns or rows["error"].isna().all()
    assert rows.loc["concept_mmdt", "ari"] > 0.6 and rows.loc["concept_cart", "ari"] > 0.6
    assert "CAVs not used" not in out  # all four concepts kept, none a duplicate
    assert "How much the 4 concepts explain" in out and "4 random directions" in out
    for line in out.splitlines():  # no saturated probabilities
        for p in re.findall(r"P\(\w+\) (?:<=|>) ([\d.]+)", line):
            assert 0.01 <= float(p) <= 0.99, line
