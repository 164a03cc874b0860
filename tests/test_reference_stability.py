"""The reference clustering's stability (issue 36, item 3): GMM restarts fitted one by one are
scikit-learn's n_init bit for bit, a restart with a degenerate component is not chosen, and every
run reports the mean ARI between restarts beside the base ARI, with a warning when it is low."""

import math

import numpy as np
import pandas as pd
from sklearn.mixture import GaussianMixture

from pipeline.app.report.summary import stability_warning
from pipeline.clustering import STABILITY_THRESHOLD, choose_restart, fit_gmm, gmm_restarts, restart_stability


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


def test_the_warning_names_the_figure_and_the_threshold():
    df = pd.DataFrame([{"explainer": "reference", "ari": 0.47, "stability": 0.55}, {"explainer": "cart", "ari": 0.4,
                                                                                       "stability": math.nan}])
    text = stability_warning(df)
    assert "unstable" in text and "0.550" in text and str(STABILITY_THRESHOLD) in text
    df.loc[0, "stability"] = 0.95
    assert stability_warning(df) is None
    df.loc[0, "stability"] = math.nan  # a method without restarts
    assert stability_warning(df) is None


def test_a_run_reports_the_stability_beside_the_base_ari(tmp_path, capsys):
    from pipeline.app.config import compose_config
    from pipeline.app.runner import run

    df = run(compose_config([f"paths.output_dir={tmp_path / 'run'}", f"paths.cache_dir={tmp_path / 'cache'}",
                             "dataset=iris", "explainer=[cart]", "report.figures=false", "report.html=false"]))
    ref = df.set_index("explainer").loc["reference"]
    assert 0 < ref["stability"] <= 1
    assert "stability" in pd.read_csv(tmp_path / "run" / "results.csv").columns
    header = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("explainer"))
    assert header.split()[:4] == ["explainer", "method", "ari", "stability"]
