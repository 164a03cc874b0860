"""The default deep run end to end on a small digits subset, concept selection, bad concept configs."""

import json

import numpy as np
import pandas as pd
import pytest

from pipeline.concepts import concept_mixture
from pipeline.metrics import concept_explainability_to_noise_ratio
from pipeline.app.configuration.config import compose_config
from pipeline.app.running.runner import run
from pipeline.encoders.base import Encoder
from pipeline.validation import InvalidInputError

SMALL_VADE = ["experiment=concept_digits", "dataset.n_samples=400", "encoder.params.hidden_dims=[64,64,128]", "encoder.params.pretrain_epochs=3",
              "encoder.params.epochs=3", "encoder.device=cpu", "cav.params.n_repeats=2", "cav.params.cv=2"]


def compose(tmp_path, *overrides):
    return compose_config([f"paths.output_dir={tmp_path / 'run'}", f"paths.cache_dir={tmp_path / 'cache'}",
                           f"paths.models_dir={tmp_path / 'models'}", "report.figures=false", *overrides])


def test_concept_digits_experiment_is_the_deep_concept_run():
    cfg = compose_config(["experiment=concept_digits", "paths.output_dir=/tmp/unused"])
    assert cfg.dataset.name == "digits" and cfg.encoder.name == "vade"
    assert cfg.clustering.name == "encoder" and cfg.concepts.name == "mnist_geometric"
    assert {e.name for e in cfg.explainer.values()} == {"concept_mmdt", "cart"}


def test_deep_concept_run_end_to_end_on_small_digits(tmp_path, capsys):
    df = run(compose(tmp_path, *SMALL_VADE))
    out = capsys.readouterr().out
    assert "Table 2 layout" in out and "MMDT ARI" in out
    rows = df.set_index("explainer")
    assert set(rows.index) >= {"reference", "concept_mmdt", "concept_cart"}
    assert rows.loc["reference", "method"] == "encoder"
    for row in ("concept_mmdt", "concept_cart"):
        assert np.isfinite(rows.loc[row, "ari"]) and rows.loc[row, "n_leaves"] >= 2
    table2 = pd.read_csv(tmp_path / "run" / "concepts" / "table2.csv")
    assert table2.loc[0, "samples"] == 400 and table2.loc[0, "CAVs"] == 4 and table2.loc[0, "model"] == "vade"
    rules = (tmp_path / "run" / "trees" / "concept_mmdt.rules.txt").read_text()
    assert any(c in rules for c in ("loop", "vertical_line", "horizontal_line", "curvature"))
    meta = json.loads((tmp_path / "run" / "concepts" / "run.json").read_text())
    kept_out = set(meta.get("excluded") or {})  # concepts that failed their tests on this run (issue 48)
    assert [r["concept"] for r in meta["cav_summary"] if r["concept"] not in kept_out] == meta["concept_names"]
    # The tree's q is Eq. 6 on the VaDE prior projected onto the CAVs.
    from pipeline.app.running.runner import run_stages
    from pipeline.app.stores.cache import StageCache
    from pipeline.app.running.runner import to_plain

    plain = to_plain(compose(tmp_path, *SMALL_VADE))
    done, _, _ = run_stages(plain, StageCache(tmp_path / "cache"))  # warm: all cache hits
    cl, cc = done["cluster"].artifact, done["project"].artifact  # the CAVs the trees cut on
    mu, sig = concept_mixture(cc.cavs, cl.means, cl.covariances)
    assert rows.loc["concept_mmdt", "q"] == pytest.approx(concept_explainability_to_noise_ratio(mu, sig), rel=1e-6)


@pytest.mark.slow
def test_concept_selection_keeps_the_best_subset(tmp_path, capsys):
    df = run(compose(tmp_path, "encoder=identity", "clustering=gmm", "dataset.n_samples=400", "concepts=mnist_geometric",
                     "explainer=[concept_mmdt,concept_cart]",
                     "concepts.params.select=2", "cav.params.n_repeats=2", "cav.params.cv=0"))
    assert "concept selection kept" in capsys.readouterr().out
    meta = json.loads((tmp_path / "run" / "concepts" / "run.json").read_text())
    sel = meta["selection"]
    # selection chooses among every concept whose CAV was kept (mnist_geometric: 4, minus a complement dropped)
    assert len(meta["concept_names"]) == 2 == len(sel["selected"])
    assert len(sel["all_concepts"]) == len(meta["cav_summary"]) >= 3
    assert sel["q_path"][-1] <= sel["q_all"] + 1e-12
    assert np.isfinite(df.set_index("explainer").loc["concept_mmdt", "ari"])


def test_concept_set_for_another_dataset_fails_clearly(tmp_path):
    with pytest.raises(InvalidInputError, match="defined for datasets"):
        run(compose(tmp_path, "dataset=iris", "encoder=identity", "clustering=gmm", "concepts=awa2_predicates"))


def test_text_prompts_need_a_text_tower(tmp_path):
    with pytest.raises(InvalidInputError, match="text"):
        run(compose(tmp_path, "dataset=iris", "encoder=identity", "clustering=gmm", "concepts=text_prompts"))


class FakeTextTower(Encoder):  # deterministic stand-in for CLIP: one axis per prompt word
    name = "fake_text_tower"

    def transform(self, X):
        return np.zeros((len(X), 8), np.float32)

    def encode_text(self, texts):
        out = np.zeros((len(texts), 8), np.float32)
        for i, t in enumerate(texts):
            for word in t.split():
                out[i, sum(map(ord, word)) % 8] += 1.0
        return out


def build_cavs(cfg: dict, dataset, Z):
    """The concepts stage on a dataset and its latents (an untrained encoder: no checkpoint)."""
    from pipeline.app.stores.artifacts import EncodeArtifact
    from pipeline.app.stages.concepts import CONCEPTS
    from pipeline.app.stages.load import dataset_to_artifact

    encode = EncodeArtifact(Z=Z, latent_names=[f"z{j}" for j in range(Z.shape[1])])
    return CONCEPTS.compute(cfg, load=dataset_to_artifact(dataset), encode=encode)


def test_text_prompts_are_embedded_by_the_encoders_text_tower(tmp_path):
    from pipeline.app.data import Dataset

    cfg = to_plain_cfg(tmp_path, ["concepts=text_prompts", "encoder._target_=test_concepts_pipeline.FakeTextTower",
                                  "encoder.name=fake_text_tower", "dataset=iris"])
    ds = Dataset(name="iris", X=np.zeros((5, 4)), y=None, kind="tabular")
    out = build_cavs(cfg, ds, np.zeros((5, 8), np.float32))
    assert out.cavs.shape[1] == 8 and out.cav_fitter == "mean_difference"
    assert "animal" in out.concept_names and out.n_concept_examples > 30
    np.testing.assert_allclose(np.linalg.norm(out.cavs, axis=1), 1.0)


def to_plain_cfg(tmp_path, overrides):
    from pipeline.app.running.runner import to_plain

    return to_plain(compose(tmp_path, *overrides))


def test_broden_images_go_through_the_data_encoder(tmp_path):
    from test_concepts_sets import write_broden

    from pipeline.app.data import Dataset

    write_broden(tmp_path / "broden", n=24)
    cfg = to_plain_cfg(tmp_path, ["concepts=broden", "encoder=identity", f"+concepts.params.root={tmp_path / 'broden'}",
                                  "concepts.params.min_positives=4", "concepts.params.n_negatives=24",
                                  "cav.params.n_repeats=3", "cav.params.cv=2", "cav.params.min_positives=3"])
    ds = Dataset(name="cifar10", X=np.zeros((3, 8, 8, 3), np.uint8), y=None, kind="image")
    out = build_cavs(cfg, ds, np.zeros((3, 8 * 8 * 3), np.float32))
    # The fake images are flat grey levels, so both CAVs point along the same direction: one is
    # dropped as a duplicate (logged), the other lives in the data's 192-d latent space.
    # (the run's three blank images are copies of blank concept examples: marked by content, issue 48)
    assert {n.rstrip("†‡") for n in set(out.concept_names) | set(out.cav_dropped)} == {"sky", "street"}
    assert out.cavs.shape[1] == 192 and out.n_concept_examples == 24


def test_share_above_counts_each_concept_beyond_its_boundary():
    """The CAV table's share above each boundary: the rows' count per concept (NaN rows never
    above), NaN for concepts without a boundary or not in the coordinates; the same again when asked twice."""
    from pipeline.app.report.concept_run import share_above

    rng = np.random.default_rng(0)
    X = rng.standard_normal((3000, 4))
    X[5, 1] = np.nan
    summary = [{"concept": "a", "boundary": 0.5}, {"concept": "b", "boundary": -0.2},
               {"concept": "c", "boundary": float("nan")}, {"concept": "zz", "boundary": 0.0}]
    names = ["b", "a", "c", "d"]
    want = [100.0 * np.count_nonzero(X[:, 1] > 0.5) / 3000, 100.0 * np.count_nonzero(X[:, 0] > -0.2) / 3000, np.nan, np.nan]
    for _ in range(2):
        np.testing.assert_array_equal(share_above(summary, names, X), want)
    np.testing.assert_array_equal(share_above(summary, names, X.astype(np.float32)),
                                  [100.0 * np.count_nonzero(X.astype(np.float32)[:, 1] > 0.5) / 3000,
                                   100.0 * np.count_nonzero(X.astype(np.float32)[:, 0] > -0.2) / 3000, np.nan, np.nan])
