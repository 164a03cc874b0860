"""Fitted objects answer for themselves (issue 49, item 4): what the application used to look up by
a name (the bound of a row called ``random_mmdt``, the units' kinds, the tables of protocols, display
names, counterfactual methods, compute backends, encoders that fetch weights, ``_target_`` paths
compared as strings) is an attribute of the ``_target_`` object itself."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipeline import metrics
from pipeline.app.configuration.config import compose_config
from pipeline.app.running.runner import run
from pipeline.concepts.units import (
    OriginalUnits,
    PercentileUnits,
    ProbabilityUnits,
    percentile_units,
    units_from_dicts,
    units_to_dicts,
)
from pipeline.trees import MMDT, ConceptMMDT, RandomizedMMDT

QUIET = ["report.figures=false", "report.html=false", "report.summary=false"]


def test_each_mmdt_estimator_names_the_bound_it_satisfies(tmp_path):
    assert MMDT.error_bound is metrics.theorem1_upper_bound and ConceptMMDT.error_bound is metrics.theorem1_upper_bound
    assert RandomizedMMDT.error_bound is metrics.theorem2_upper_bound
    # a randomized tree under another method name still gets Theorem 2 (it was chosen by the name random_mmdt)
    df = run(compose_config(["dataset=iris", "explainer=[random_mmdt,mmdt]", "explainer.random_mmdt.name=randomized",
                             f"paths.output_dir={tmp_path / 'run'}", f"paths.cache_dir={tmp_path / 'cache'}", *QUIET]))
    rows = df.set_index("explainer")
    K = int(rows.loc["reference", "n_leaves"])
    for row, bound in (("random_mmdt", metrics.theorem2_upper_bound), ("mmdt", metrics.theorem1_upper_bound)):
        assert rows.loc[row, "q_bound"] == pytest.approx(float(bound(rows.loc[row, "q"], K)), rel=1e-12)


def test_units_serialise_themselves():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 4))
    units = [percentile_units(X[:, 0]), ProbabilityUnits(1.5, -0.2, percentile_units(X[:, 1])),
             OriginalUnits(np.sort(X[:, 2]), np.sort(X[:, 2]) * 2 + 1, 1.0, 2.0), None]
    records = units_to_dicts(units)
    assert json.loads(json.dumps(records)) == records  # JSON as it is
    assert [r["kind"] for r in records] == ["percentile", "probability", "original", "raw"]
    back = units_from_dicts(records, X)
    assert type(back[0]) is PercentileUnits and back[3] is None
    s = np.linspace(-2, 2, 11)
    for j in (0, 1):
        np.testing.assert_array_equal(back[j](s), units[j](s))
    assert back[1].fallback is not None and np.array_equal(back[1].fallback(s), percentile_units(X[:, 1])(s))
    np.testing.assert_array_equal(back[2](np.array([0.5])), [2.0])  # mean + sd · z
    assert units_to_dicts(None) is None and units_from_dicts(None, X) is None


#: the display names the report printed from its table of names before (issue 49): now each class's title
TITLES = {"mmdt": "MMDT", "random_mmdt": "Randomized MMDT", "concept_mmdt": "Concept-MMDT", "cart": "CART",
          "concept_cart": "Concept-CART", "tao_axis": "TAO (axis)", "imm": "IMM", "emn": "EMN", "exkmc": "ExKMC",
          "tao": "TAO", "spex_clique": "SpEx-Clique", "spex_knn": "SpEx-kNN", "spex_graph": "SpEx-Graph"}
PROTOCOL_OF = {"mmdt": "mixture", "random_mmdt": "mixture", "concept_mmdt": "concept_mixture", "cart": "labels",
               "concept_cart": "labels", "tao_axis": "optional_centers", "imm": "centers", "emn": "centers",
               "exkmc": "centers", "tao": "optional_centers", "spex_clique": "labels", "spex_knn": "labels",
               "spex_graph": "graph"}


def test_display_names_and_fit_protocols_come_from_the_estimator_classes():
    from pipeline.app.configuration.explainers import PROTOCOLS, method_name, protocol, shipped_explainer
    from pipeline.app.report.figures import tree_title
    from pipeline.trees.tree import ExplanationTree

    for name, title in TITLES.items():
        node = shipped_explainer(name)
        assert "fit" not in node  # the class says how it is fitted
        assert method_name(name) == title
        assert protocol(node) is PROTOCOLS[PROTOCOL_OF[name]]
    assert protocol({**shipped_explainer("cart"), "fit": "centers"}) is PROTOCOLS["centers"]  # a row may override
    assert method_name("my_tree") == "my tree" and shipped_explainer("../cart") is None
    t = ExplanationTree.from_dict(__import__("pipeline.trees", fromlist=["CART"]).CART(max_depth=1).fit(
        np.arange(8.0)[:, None], np.repeat([0, 1], 4)).tree_.to_dict())
    assert tree_title("concept_cart", "cart", t).startswith("Concept-CART: ")
    assert tree_title("fast", "cart", t).startswith("fast (CART): ")


def test_compute_backends_are_built_from_their_target():
    from pipeline.app.execution.compute import DaskCompute, LocalCompute, backend_class, make_compute

    cfg = compose_config(["dataset=iris"])
    assert isinstance(make_compute(dict(cfg["compute"])), LocalCompute) and backend_class(None) is LocalCompute
    assert backend_class(dict(compose_config(["dataset=iris", "compute=dask"])["compute"])) is DaskCompute
    from pipeline.validation import InvalidInputError

    with pytest.raises(InvalidInputError, match="compute._target_"):
        make_compute({"_target_": "pipeline.app.execution.compute.NoSuchBackend"})


def test_counterfactual_methods_are_classes_named_by_name_or_path():
    from pipeline.app.stages.counterfactuals import DBMMethod, TGTMethod, methods_of
    from pipeline.validation import InvalidInputError

    assert methods_of({"methods": ["tgt", "dbm", "tgt"]}) == [TGTMethod, DBMMethod] and methods_of({}) == [TGTMethod, DBMMethod]
    assert methods_of({"methods": ["pipeline.app.stages.counterfactuals.DBMMethod"]}) == [DBMMethod]
    with pytest.raises(InvalidInputError, match=r"unknown \['nope'\]; choose from \['tgt', 'dbm'\]"):
        methods_of({"methods": ["nope"]})


def test_what_the_targets_declare_about_themselves(tmp_path):
    from pipeline.app.data.files import load_from_config
    from pipeline.app.stages.cluster import encoder_head
    from pipeline.app.stages.encode import latents_are_inputs
    from pipeline.app.stages.load import reads_by_row_range
    from pipeline.app.models.weights import CLIPEncoder, SBERTEncoder

    np.save(tmp_path / "x.npy", np.zeros((4, 2), np.float32))
    files = compose_config(["dataset=files", f"dataset.path={tmp_path / 'x.npy'}"])
    assert reads_by_row_range(files) and load_from_config.reads_by_row_range(str(tmp_path / "x.npy"))
    assert not reads_by_row_range(compose_config(["dataset=iris"]))
    assert latents_are_inputs(compose_config(["dataset=iris", "encoder=identity"]))
    assert not latents_are_inputs(compose_config(["dataset=digits", "encoder=vade"]))
    assert encoder_head.labels_every_row
    sbert, clip = SBERTEncoder.__new__(SBERTEncoder), CLIPEncoder.__new__(CLIPEncoder)
    sbert.model_name, clip.pretrained = str(tmp_path), "laion2b_s34b_b79k"
    assert not sbert.needs_hub() and clip.needs_hub()
    sbert.model_name, clip.pretrained = "all-MiniLM-L6-v2", str(tmp_path / "x.npy")
    assert sbert.needs_hub() and not clip.needs_hub()
