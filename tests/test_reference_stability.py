"""The reference clustering's stability (issue 36, item 3; issue 50, item 3): GMM restarts fitted
one by one are scikit-learn's n_init bit for bit, a restart with a degenerate component is not
chosen, and every run reports beside the base ARI how far the kept restart is from the others and
which of its clusters the others found again; it warns only when a cluster the rules end in was
found by the kept restart alone, on the console and in report.html alike."""


import numpy as np
import pandas as pd
import pytest
from sklearn.mixture import GaussianMixture

from pipeline.app.report.stability import stability_text
from pipeline.clustering import FOUND_AGAIN, choose_restart, cluster_recovery, fit_gmm, gmm_restarts, restart_stability


def _blobs(seed=0, n=300, d=4):
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.normal(c, 1.0, size=(n // 3, d)) for c in (0.0, 5.0, 10.0)])


def test_restarts_one_by_one_are_sklearns_n_init():
    X = np.random.default_rng(1).normal(size=(400, 3))  # no structure: restarts differ
    for seed in (0, 3):
        ref = GaussianMixture(4, n_init=3, random_state=seed).fit(X)
        c = fit_gmm(X, 4, random_state=seed, n_init=3)
        assert np.array_equal(ref.predict(X), c.labels) and np.array_equal(ref.means_, c.means)
        assert c.scores["stability"]["restarts"] == 3 and 0 <= c.stability < 1


def test_stability_is_the_mean_pairwise_ari():
    a, b = np.array([0, 0, 1, 1]), np.array([1, 1, 0, 0])
    assert restart_stability([a, b, a]) == 1.0 and restart_stability([a]) is None
    c = fit_gmm(_blobs(), 3, random_state=0, n_init=4)
    assert c.stability == 1.0  # three separated blobs: every restart finds them


def test_a_degenerate_restart_is_not_chosen():
    class Fit:  # the likeliest restart has a component of 3 members in 4 dimensions
        def __init__(self, bound, weights):
            self.lower_bound_, self.weights_, self.covariance_type = bound, np.array(weights), "full"
            self.means_ = np.zeros((len(weights), 4))

    fits = [Fit(-5.0, [0.5, 0.5]), Fit(-1.0, [0.99, 0.01]), Fit(-3.0, [0.4, 0.6])]
    assert choose_restart(fits, 300) == (2, [False, True, False])
    assert choose_restart(fits, 300, skip_degenerate=False)[0] == 1  # scikit-learn's rule
    assert len(gmm_restarts(_blobs(), 3, {"n_init": 2}, 0)) == 2


def test_cluster_recovery_is_the_best_jaccard_index_by_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(20):
        kept, other = rng.integers(0, 4, 60), rng.integers(0, 5, 60)
        got = cluster_recovery(kept, [other, kept])
        for row, c in enumerate(np.unique(kept)):
            a = set(np.flatnonzero(kept == c))
            best = max(len(a & set(np.flatnonzero(other == d))) / len(a | set(np.flatnonzero(other == d)))
                       for d in np.unique(other))
            assert got[row, 0] == pytest.approx(best) and got[row, 1] == 1.0


def test_the_scores_say_which_kept_clusters_each_restart_found_again():
    X = np.concatenate([_blobs(), np.random.default_rng(5).normal(5.0, 4.0, size=(60, 4))])
    c = fit_gmm(X, 5, random_state=0, n_init=4)
    s = c.scores["stability"]
    assert s["clusters"] == sorted(set(c.labels.tolist())) and len(s["cluster_jaccard"]) == len(s["clusters"])
    assert all(len(row) == 3 for row in s["cluster_jaccard"])
    others = [a for i, a in enumerate(s["chosen_agreement"]) if i != s["chosen"]]
    assert c.stability == pytest.approx(np.mean(others)) and s["chosen_agreement"][s["chosen"]] == 1.0


def test_a_warning_only_when_a_cluster_was_found_by_no_more_than_half_of_the_restarts():
    stable = {"clusters": [0, 1, 2], "kept_ari": 0.97, "cluster_jaccard": [[0.99, 0.98], [0.97, 0.9], [0.95, 0.8]]}
    text, warn = stability_text(stable)
    assert not warn and "All 3 clusters were found by each of the GMM's 3 restarts" in text and "0.97" in text
    partly = {**stable, "kept_ari": 0.8, "cluster_jaccard": [[0.99, 0.98], [0.97, 0.5], [0.95, 0.4]]}
    text, warn = stability_text(partly)
    assert not warn and text.startswith("Cluster 0 was found by all 3, 1 and 2 by 2 of the GMM's 3 restarts")
    assert "found by most restarts" in text
    lost = {**stable, "kept_ari": 0.55, "cluster_jaccard": [[0.99, 0.98], [0.6, 0.5], [0.95, 0.4]]}
    text, warn = stability_text(lost)
    assert warn and text.startswith("cluster 1 was found by 1 of the GMM's 3 restarts (the kept one), so with "
                                    "another seed the rules ending in it may describe another group; cluster 0 "
                                    "was found by all 3, 2 by 2")
    assert "clustering.params.n_init" in text and f"at least {FOUND_AGAIN}" in text and "stability 0.55" in text
    # ten restarts, each cluster found by three: most restarts end elsewhere (the e-mails, issue 50)
    few = {"clusters": [0, 1], "kept_ari": 0.42, "cluster_jaccard": [[0.9, 0.8] + [0.1] * 7] * 2}
    text, warn = stability_text(few)
    assert warn and text.startswith("clusters 0 and 1 were found by 3 of the GMM's 10 restarts, so")
    assert stability_text(None) == (None, False) and stability_text({"kept_ari": None}) == (None, False)


def test_a_run_reports_the_stability_beside_the_base_ari(tmp_path, capsys):
    from pipeline.app.configuration.config import compose_config
    from pipeline.app.running.runner import run

    df = run(compose_config([f"paths.output_dir={tmp_path / 'run'}", f"paths.cache_dir={tmp_path / 'cache'}",
                             "dataset=iris", "explainer=[cart]", "report.figures=false", "report.html=false"]))
    ref = df.set_index("explainer").loc["reference"]
    assert 0 < ref["stability"] <= 1
    assert "stability" in pd.read_csv(tmp_path / "run" / "results.csv").columns
    header = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("explainer"))
    assert header.split()[:4] == ["explainer", "method", "ari", "stability"]


def test_the_report_shows_the_console_warning_word_for_word(tmp_path, capsys):
    """A run whose reference has a cluster only its kept restart found (the wine table's GMM, seed 0):
    the same sentence on the console and in report.html, beside the same figure."""
    import html

    from pipeline.app.configuration.config import compose_config
    from pipeline.app.running.runner import run

    df = run(compose_config([f"paths.output_dir={tmp_path / 'run'}", f"paths.cache_dir={tmp_path / 'cache'}",
                             "dataset=wine", "dataset.standardize=true", "explainer=[cart]", "report.figures=false"]))
    warning = next(line for line in capsys.readouterr().out.splitlines()
                   if line.startswith("warning: ") and "of the GMM's 3 restarts" in line)
    page = html.unescape((tmp_path / "run" / "report.html").read_text())
    assert warning in page and f"stability {df.set_index('explainer').loc['reference', 'stability']:.2f}" in warning
