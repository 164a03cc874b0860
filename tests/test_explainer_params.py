"""A wrong explainer parameter (from the config or the CLI) is one paragraph listing the estimator's parameters."""

import os
import subprocess
import sys

import numpy as np
import pytest
from omegaconf import OmegaConf
from sklearn.datasets import load_iris

from pipeline.app.configuration.config import compose_config
from pipeline.app.configuration.explainers import FitInputs, fit_explainer
from pipeline.validation import InvalidInputError


def inputs():
    X = load_iris().data
    labels = np.repeat([0, 1, 2], 50)
    return FitInputs(X=X, labels=labels, feature_names=list(load_iris().feature_names), n_clusters=3)


def test_misspelt_parameter_names_the_valid_ones():
    cfg = compose_config(["explainer=[cart]", "+explainer.cart.params.max_deth=2"])
    entry = OmegaConf.to_container(cfg.explainer, resolve=True)["cart"]
    with pytest.raises(InvalidInputError, match=r"no parameter\(s\) \['max_deth'\]") as info:
        fit_explainer("cart", entry, inputs(), random_state=0)
    assert "'max_depth', 'min_samples_leaf'" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("override,problem", [
    ("+explainer.cart.params.max_depth=0", r"'max_depth' parameter of CART must be an int in the range \[1, inf\)"),
    ("+explainer.cart.params.min_samples_leaf=-3", "'min_samples_leaf' parameter of CART"),
])
def test_wrong_parameter_lists_the_estimators_parameters(override, problem):
    cfg = compose_config(["explainer=[cart]", override])
    entry = OmegaConf.to_container(cfg.explainer, resolve=True)["cart"]
    with pytest.raises(InvalidInputError, match=problem) as info:
        fit_explainer("cart", entry, inputs(), random_state=0)
    text = str(info.value)
    assert "\n" not in text
    for name in ("n_leaves=None", "max_depth=None", "min_samples_leaf=1", "noise_label=None", "random_state", "n_jobs"):
        assert name in text
    assert "explainer.cart.params.<name>=<value>" in text


def test_cart_max_depth_from_the_config_is_used():
    cfg = compose_config(["explainer=[cart]", "+explainer.cart.params.max_depth=1"])
    entry = OmegaConf.to_container(cfg.explainer, resolve=True)["cart"]
    with pytest.warns(UserWarning, match="fewer leaves than the 3 clusters"):
        est, _, _ = fit_explainer("cart", entry, inputs(), random_state=0)
    assert est.max_depth == 1 and est.tree_.depth == 1


@pytest.mark.slow
@pytest.mark.parametrize("override,words", [
    ("+explainer.cart.params.max_deth=2", ["max_deth", "max_depth", "min_samples_leaf"]),
    ("+explainer.cart.params.max_depth=0", ["'max_depth' parameter of CART", "min_samples_leaf=1"]),
])
def test_cli_wrong_parameter_is_one_paragraph(tmp_path, override, words):
    env = {**os.environ, "PIPELINE_CACHE_DIR": str(tmp_path / "cache"), "PIPELINE_LOG_DIR": str(tmp_path / "logs"),
           "PIPELINE_MODELS_DIR": str(tmp_path / "models"), "HYDRA_FULL_ERROR": "0"}
    proc = subprocess.run([sys.executable, "-m", "pipeline", "dataset=iris", "explainer=[cart]", "report.figures=false",
                           override], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    error = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and all(w in error[0] for w in words), proc.stderr
