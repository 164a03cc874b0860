"""End-to-end runs through Hydra's compose API: results, trees, cache hits, resume, errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline.app.configuration.config import compose_config
from pipeline.app.running.runner import run
from pipeline.trees.tree import ExplanationTree
from pipeline.encoders.base import Encoder
from pipeline.validation import InvalidInputError

from shared_data import BENCHMARKS, needs_benchmarks


def make_cfg(tmp_path: Path, *overrides: str, out: str = "out"):
    return compose_config([f"paths.output_dir={tmp_path / out}", f"paths.cache_dir={tmp_path / 'cache'}",
                           f"paths.benchmark_dir={BENCHMARKS}", f"paths.models_dir={tmp_path / 'models'}",
                           *overrides])


def cache_events(tmp_path: Path, out: str = "out") -> dict:
    status = json.loads((tmp_path / out / "status.json").read_text())
    assert status["status"] == "ok"
    return {(e["stage"], e["key"]): e["hit"] for e in status["cache"]}


def test_digits_subset_end_to_end(tmp_path, capsys):
    df = run(make_cfg(tmp_path, "experiment=raw_features", "dataset.n_samples=400"))
    out = tmp_path / "out"
    printed = capsys.readouterr().out
    assert f"results written to {out / 'results.csv'}" in printed
    table = pd.read_csv(out / "results.csv")
    assert {"explainer", "ari", "ami", "ref_ari", "fit_seconds"} <= set(table.columns)
    assert list(table["explainer"]) == ["reference", "mmdt", "cart"]
    ref = table.set_index("explainer").loc["reference"]
    assert ref["ref_ari"] == 1.0 and ref["method"] == "gmm"
    # A GMM on raw digits pixels finds real structure; trees reproduce part of it.
    assert 0.3 < ref["ari"] <= 1.0
    for row in ("mmdt", "cart"):
        r = table.set_index("explainer").loc[row]
        assert 0.1 < r["ref_ari"] <= 1.0 and r["fit_seconds"] >= 0 and r["n_leaves"] == 10
        doc = json.loads((out / "trees" / f"{row}.json").read_text())
        tree = ExplanationTree.from_dict(doc["tree"])
        assert tree.n_leaves == 10 and "pixel_" in (out / "trees" / f"{row}.rules.txt").read_text()
        assert (out / "figures" / f"{row}.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "results.md").read_text().startswith("| dataset |")
    assert df.shape[0] == 3


@needs_benchmarks("sipu/r15")
def test_benchmark_file_with_dbscan_noise_and_second_run_hits_cache(tmp_path):
    # the stage cache itself: a rerun reads every stage back (not the run's files, test_run_outputs.py)
    overrides = ("dataset=clustbench", "dataset.name=sipu/r15", "clustering=dbscan", "explainer=[mmdt,cart]",
                 "report.figures=false", "cache.reuse_files=false")
    first = run(make_cfg(tmp_path, *overrides, out="a")).set_index("explainer")
    assert first.loc["reference", "ari"] > 0.8  # R15 is well separated
    assert first.loc["reference", "n_noise"] > 0  # DBSCAN's outliers are reported...
    assert first.loc["mmdt", "ref_ari"] > 0.8  # ...and left out of tree fitting
    events_a = cache_events(tmp_path, "a")
    assert not any(events_a.values())
    second = run(make_cfg(tmp_path, *overrides, out="b")).set_index("explainer")
    events_b = cache_events(tmp_path, "b")
    assert events_b.keys() == events_a.keys() and all(events_b.values())  # every cached stage was a hit
    pd.testing.assert_frame_equal(first.drop(columns="fit_seconds"), second.drop(columns="fit_seconds"))
    # A changed upstream config changes the keys of the stages after it, not before it.
    run(make_cfg(tmp_path, *overrides[:2], "clustering=kmeans", "explainer=[cart]", "report.figures=false", out="c"))
    hits = {stage: hit for (stage, _), hit in cache_events(tmp_path, "c").items()}
    assert hits == {"load": True, "encode": True, "cluster": False, "concepts": True, "fit": False}


def test_force_recomputes_a_stage(tmp_path):
    run(make_cfg(tmp_path, "dataset=iris", "explainer=[cart]", "report.figures=false", out="a"))
    run(make_cfg(tmp_path, "dataset=iris", "explainer=[cart]", "report.figures=false", "+force=cluster", out="b"))
    hits = {stage: hit for (stage, _), hit in cache_events(tmp_path, "b").items()}
    assert hits["cluster"] is False and hits["load"] is True and hits["fit"] is True


def test_resume_after_crash_between_stages(tmp_path, monkeypatch):
    import pipeline.app.stages.fit as fit

    real_fit_row = fit.fit_row

    def crash(*args):
        raise RuntimeError("simulated crash after the cluster stage")

    monkeypatch.setattr(fit, "fit_row", crash)
    with pytest.raises(RuntimeError, match="simulated crash"):
        run(make_cfg(tmp_path, "dataset=wine", "report.figures=false", out="a"))
    status = json.loads((tmp_path / "a" / "status.json").read_text())
    assert status["status"] == "failed" and "simulated crash" in status["error"]
    assert not (tmp_path / "a" / "results.csv").exists()
    assert not list((tmp_path / "cache").rglob(".tmp-*"))
    monkeypatch.setattr(fit, "fit_row", real_fit_row)
    run(make_cfg(tmp_path, "dataset=wine", "report.figures=false", out="b"))
    hits = {stage: hit for (stage, _), hit in cache_events(tmp_path, "b").items()}
    assert hits == {"load": True, "encode": True, "cluster": True, "concepts": True, "fit": False}
    assert (tmp_path / "b" / "results.csv").exists()


@needs_benchmarks("sipu/r15")  # the other runs of experiment=mmdt_table1 are left out below
def test_experiment_table_has_published_values_beside_ours(tmp_path):
    cfg = make_cfg(tmp_path, "experiment=mmdt_table1", "report.figures=false",
                   "~study.runs.synthetic_gmm", "~study.runs.d31", "~study.runs.aggregation",
                   "~study.runs.pathbased", "~study.runs.wine", "clustering.candidates=[gmm,dbscan]")
    run(cfg)
    comparison = pd.read_csv(tmp_path / "out" / "comparison.csv")
    iris = comparison[(comparison["run"] == "iris")].set_index("explainer")
    assert iris.loc["mmdt", "ari_paper"] == 0.89 and iris.loc["reference", "base_paper"] == "GMM"
    assert iris.loc["reference", "ari"] > 0.8 and iris.loc["mmdt", "ari"] > 0.6
    assert set(pd.read_csv(tmp_path / "out" / "results.csv")["run"]) == {"r15", "iris"}
    assert (tmp_path / "out" / "r15" / "results.csv").exists()


# ----------------------------------------------------------------------------------- errors
def assert_failed_cleanly(tmp_path: Path, out: str = "out"):
    status = json.loads((tmp_path / out / "status.json").read_text())
    assert status["status"] == "failed"
    assert not (tmp_path / out / "results.csv").exists() and not (tmp_path / out / "trees").exists()


def test_unknown_explainer_class(tmp_path):
    with pytest.raises(InvalidInputError, match=r"_target_='pipeline.trees.Nope' cannot be imported"):
        run(make_cfg(tmp_path, "dataset=iris", "explainer.cart._target_=pipeline.trees.Nope"))
    assert_failed_cleanly(tmp_path)
    assert not list((tmp_path / "cache").rglob("meta.json"))  # failed before any stage ran


def test_unknown_estimator_parameter_fails_before_any_stage(tmp_path):
    with pytest.raises(InvalidInputError, match=r"explainer.cart: .*CART has no parameter\(s\) \['foo'\].*n_leaves"):
        run(make_cfg(tmp_path, "dataset=iris", "explainer=[cart]", "+explainer.cart.params.foo=1"))
    assert_failed_cleanly(tmp_path)
    assert not list((tmp_path / "cache").rglob("meta.json"))


def test_any_importable_estimator_plugs_in_from_the_config(tmp_path):
    df = run(make_cfg(tmp_path, "dataset=iris", "explainer=[cart]", "explainer.cart._target_=pipeline.trees.cart.CART",
                      "+explainer.cart.params.n_leaves=5", "report.figures=false")).set_index("explainer")
    assert df.loc["cart", "n_leaves"] == 5  # a value in params wins over the one the stage offers


def test_explainer_needing_centres_with_spectral_reference(tmp_path):
    with pytest.raises(InvalidInputError, match=r"'imm'.*needs centers.*clustering=kmeans"):
        run(make_cfg(tmp_path, "dataset=iris", "clustering=spectral", "explainer=[cart,imm]"))
    assert_failed_cleanly(tmp_path)
    assert not list((tmp_path / "cache").rglob("meta.json"))  # failed before any stage ran


def test_explainer_needing_a_graph(tmp_path):
    with pytest.raises(InvalidInputError, match=r"needs graph.*clustering=spectral"):
        run(make_cfg(tmp_path, "dataset=iris", "clustering=kmeans", "explainer=[spex_graph]"))


def test_missing_benchmark_dir(tmp_path):
    cfg = make_cfg(tmp_path, "dataset=clustbench", "dataset.name=sipu/r15", f"paths.benchmark_dir={tmp_path}/none")
    with pytest.raises(InvalidInputError, match=r"not found under .*none.*Expected layout.*paths.benchmark_dir"):
        run(cfg)
    assert_failed_cleanly(tmp_path)


def test_clustering_with_fewer_than_two_clusters(tmp_path):
    with pytest.raises(InvalidInputError, match=r"found 0 cluster\(s\).*at least 2"):
        run(make_cfg(tmp_path, "dataset=iris", "clustering=dbscan", "+clustering.params.eps=1e-6"))
    assert_failed_cleanly(tmp_path)


class NaNEncoder(Encoder):
    """Latents with one NaN (plugged in with encoder._target_=test_pipeline_run.NaNEncoder)."""

    name = "nan_test"

    def transform(self, X):
        Z = np.asarray(X, dtype=np.float32).copy()
        Z[3, 1] = np.nan
        return Z


def test_nan_embeddings(tmp_path):
    with pytest.raises(InvalidInputError, match=r"produced 1 NaN/inf values in 1 of 150 embeddings"):
        run(make_cfg(tmp_path, "dataset=iris", "encoder._target_=test_pipeline_run.NaNEncoder", "encoder.name=nan_test"))
    assert_failed_cleanly(tmp_path)
    assert not list((tmp_path / "cache").glob("encode/*/meta.json"))  # nothing cached for the bad stage


@pytest.mark.parametrize("clustering, explainers", [
    ("spectral", ["spex_graph", "spex_knn", "spex_clique"]),  # spex_graph gets the spectral affinity graph
    ("kmeans", ["imm", "emn", "exkmc", "random_mmdt"]),  # centre-based trees get the k-means centres
])
def test_explainers_run_with_the_clustering_that_provides_their_needs(tmp_path, clustering, explainers):
    df = run(make_cfg(tmp_path, "dataset=iris", f"clustering={clustering}", f"explainer=[{','.join(explainers)}]",
                      "report.figures=false", "report.summary=false")).set_index("explainer")
    assert list(df.index) == ["reference", *explainers]
    assert (df.loc[explainers, "ref_ari"] > 0.5).all() and (df.loc[explainers, "n_leaves"] == 3).all()


def test_figures_start_before_the_report_and_stop_with_a_run_that_fails(tmp_path, monkeypatch):
    """The figures stage hands the trees' figures to worker processes once the trees are evaluated;
    the report stage writes them. A run that fails in between stops those workers."""
    from pipeline.app.execution import encoding
    from pipeline.app.stages import declared_stages, report
    from pipeline.app.running.runner import to_plain

    cfg = make_cfg(tmp_path, "dataset=iris", "explainer=[cart]", "threads=2")
    names = [s.name for s in declared_stages(to_plain(cfg))]
    assert names.index("evaluate") < names.index("figures") < names.index("report")
    closed = []
    real_close = encoding.Encoder.close
    monkeypatch.setattr(encoding.Encoder, "close", lambda self, wait=True: (closed.append(self._pool is not None),
                                                                            real_close(self, wait)))

    def broken(*args, **kwargs):
        raise InvalidInputError("the report could not be written")

    monkeypatch.setattr(report, "_write_files", broken)
    with pytest.raises(InvalidInputError, match="could not be written"):
        run(cfg)
    assert closed == [True]  # the workers had started, and were stopped once
    monkeypatch.undo()
    run(make_cfg(tmp_path, "dataset=iris", "explainer=[cart]", "threads=2", out="again"))
    assert sorted(p.name for p in (tmp_path / "again" / "figures").iterdir())[:3] == [
        "cart.column.pdf", "cart.column.png", "cart.pdf"]
