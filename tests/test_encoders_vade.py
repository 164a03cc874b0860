"""VaDE: tiny configurations that actually train on a digits subset."""

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from pipeline.encoders import VaDEEncoder
from pipeline.encoders.training import occupancy
from pipeline.validation import InvalidInputError

TINY = dict(n_clusters=3, latent_dim=4, hidden_dims=(32, 32), pretrain_epochs=3, epochs=3, lr=2e-3,
            batch_size=64, progress=False, device="cpu")
# enough pre-training steps (~200) for the tiny network to separate 0 / 1 / 6
GOOD = {**TINY, "pretrain_epochs": 25, "epochs": 6, "pretrain_lr": 3e-3, "batch_size": 32}


@pytest.fixture(scope="module")
def digits3():
    X, y = load_digits(return_X_y=True)
    keep = np.flatnonzero(np.isin(y, [0, 1, 6]))[:240]
    return X[keep], y[keep]


@pytest.fixture(scope="module")
def fitted(digits3):
    X, y = digits3
    return VaDEEncoder(**GOOD).fit(X, y)


def test_elbo_loss_decreases_and_prior_has_k_components(fitted, digits3):
    X, _ = digits3
    train = [h["loss"] for h in fitted.history_ if h["phase"] == "train"]
    pre = [h["loss"] for h in fitted.history_ if h["phase"] == "pretrain"]
    assert len(train) == 6 and len(pre) == 25
    assert train[-1] < train[0]
    assert pre[-1] < pre[0]
    weights, means, covs = fitted.mixture()
    assert weights.shape == (3,) and means.shape == (3, 4) and covs.shape == (3, 4, 4)
    assert np.isclose(weights.sum(), 1.0)
    assert np.all(np.linalg.eigvalsh(covs) > 0)
    Z = fitted.transform(X)
    assert Z.dtype == np.float32 and Z.shape == (len(X), 4)
    labels = fitted.predict_clusters(X)
    assert labels.dtype == np.int64 and labels.shape == (len(X),) and labels.max() < 3
    proba = fitted.predict_proba(X)
    assert np.allclose(proba.sum(1), 1.0) and np.array_equal(proba.argmax(1), labels)


def test_occupancy_logged_each_epoch_and_metrics(fitted):
    train = [h for h in fitted.history_ if h["phase"] == "train"]
    assert all(len(h["occupancy"]) == 3 and abs(sum(h["occupancy"]) - 1) < 1e-3 for h in train)
    assert "collapsed" in fitted.metrics_ and "ari" in fitted.metrics_


def test_three_clusters_recovered_reasonably(fitted, digits3):
    from sklearn.metrics import adjusted_rand_score

    X, y = digits3
    assert adjusted_rand_score(y, fitted.predict_clusters(X)) > 0.6


@pytest.mark.slow
def test_same_seed_reproduces_on_cpu(digits3, fitted):
    X, y = digits3
    again = VaDEEncoder(**GOOD).fit(X, y)
    np.testing.assert_array_equal(again.transform(X), fitted.transform(X))


@pytest.mark.slow
def test_several_seeds_choose_lowest_negative_elbo_without_labels(digits3):
    X, _ = digits3
    enc = VaDEEncoder(**{**TINY, "epochs": 2, "n_init": 2}).fit(X)
    losses = [r["selection_loss"] for r in enc.seed_report_]
    assert len(losses) == 2 and enc.metrics_["loss"] == min(losses)
    assert enc.seed_ == enc.seed_report_[int(np.argmin(losses))]["seed"]
    assert enc.metrics_["loss_spread"] == pytest.approx(max(losses) - min(losses))
    # the criterion is the whole-data -ELBO of the chosen model, reproducible (fixed z draws)
    assert enc._selection_loss(enc._prepare(X, fitting=False)) == pytest.approx(min(losses), rel=1e-6)


def test_decoder_starts_at_the_mean_image(digits3):
    X, _ = digits3
    enc = VaDEEncoder(**{**TINY, "pretrain_epochs": 0, "epochs": 1})
    enc.device_ = torch.device("cpu")
    data = enc._prepare(X, fitting=True)
    enc.module_ = enc._build_module()
    enc._init_output_bias(data)
    mean = data.mean(0).clamp(1e-3, 1 - 1e-3).numpy()
    np.testing.assert_allclose(enc.module_.decoder[-1].bias.detach().numpy(), np.log(mean / (1 - mean)), rtol=1e-5)


def test_pretraining_is_cached(digits3, tmp_path, caplog):
    X, _ = digits3
    from pipeline.app.stores.checkpoint import StateDir  # the app's store; VaDE itself never touches files

    params = {**TINY, "epochs": 1, "pretrain_cache": StateDir(tmp_path)}
    first = VaDEEncoder(**params).fit(X)
    files = list(tmp_path.glob("vade-ae-*.pt"))
    assert len(files) == 1 and files[0].with_suffix(".json").is_file()
    with caplog.at_level("INFO"):
        second = VaDEEncoder(**params).fit(X)
    assert "loaded cached autoencoder pre-training" in caplog.text
    assert [h["loss"] for h in second.history_] == [h["loss"] for h in first.history_]
    VaDEEncoder(**{**params, "pretrain_epochs": 2}).fit(X)  # other settings -> another cache entry
    assert len(list(tmp_path.glob("vade-ae-*.pt"))) == 2


def test_collapse_is_reported():
    occ = occupancy(np.array([0] * 95 + [1] * 5), 3)
    np.testing.assert_allclose(occ, [0.95, 0.05, 0.0])
    enc = VaDEEncoder(**{**TINY, "collapse_threshold": 0.0})  # any occupancy counts as collapse
    X = np.random.default_rng(0).random((40, 16))
    enc.fit(X)
    assert enc.metrics_["collapsed"] is True


def test_default_vade_architecture():
    enc = VaDEEncoder(n_clusters=4)
    assert isinstance(enc, VaDEEncoder) and enc.trainable and enc.get_params()["hidden_dims"] == [500, 500, 2000]


@pytest.mark.parametrize(
    "X, params, match",
    [
        (np.zeros((0, 5)), {}, "empty"),
        (np.random.default_rng(0).random((2, 5)), {}, "exceeds the number of samples"),
        (["a text"] * 5, {}, "sbert"),
        (np.full((10, 3), 2.0) + np.arange(3), {"input_scaling": "none"}, r"\[0, 1\]"),
        (np.random.default_rng(0).random((10, 3)), {"reconstruction": "poisson"}, "reconstruction"),
        (np.array([[np.nan, 1.0]] * 5), {}, "NaN"),
    ],
)
def test_bad_input(X, params, match):
    with pytest.raises(InvalidInputError, match=match):
        VaDEEncoder(**{**TINY, **params}).fit(X)


@pytest.mark.parametrize(
    "params, match",
    [
        ({"epochs": 0}, "'epochs' parameter"),
        ({"epochs": -1}, "'epochs' parameter"),
        ({"n_clusters": 1}, "'n_clusters' parameter"),
        ({"lr": 0.0}, "'lr' parameter"),
        ({"lr": -1.0}, "'lr' parameter"),
        ({"pretrain_lr": -1e-3}, "'pretrain_lr' parameter"),
        ({"latent_dim": 0}, "'latent_dim' parameter"),
        ({"pretrain_epochs": -1}, "'pretrain_epochs' parameter"),
        ({"lr_decay": 0.0}, "'lr_decay' parameter"),
        ({"batch_size": 1}, "'batch_size' parameter"),
        ({"n_init": 0}, "'n_init' parameter"),
        ({"reconstruction": "poisson"}, "'reconstruction' parameter"),
        ({"hidden_dims": [32, 0]}, "hidden_dims must be positive integers"),
        ({"collapse_threshold": 1.5}, "'collapse_threshold' parameter"),
        ({"lr": float("nan")}, "'lr' parameter"),
        ({"pretrain_lr": float("nan")}, "'pretrain_lr' parameter"),
        ({"lr": float("inf")}, "'lr' parameter"),
        ({"pretrain_noise": 1.0}, "'pretrain_noise' parameter"),
        ({"prior_n_init": 0}, "'prior_n_init' parameter"),
        ({"lr_schedule": "linear"}, "'lr_schedule' parameter"),
        ({"pretrain_schedule": "step"}, "'pretrain_schedule' parameter"),
        ({"pretrain_batch_size": 1}, "'pretrain_batch_size' parameter"),
        ({"augment_shift": -1}, "'augment_shift' parameter"),
        ({"augment_rotation": 200}, "'augment_rotation' parameter"),
        ({"augment_shift": 2}, "augment_shift=0"),  # 6 features: not a square image
    ],
)
def test_parameters_are_validated_at_fit(params, match):
    X = np.random.default_rng(0).random((20, 6))
    with pytest.raises(InvalidInputError, match=match) as err:
        VaDEEncoder(**{**TINY, **params}).fit(X)
    assert "encoder.params." in str(err.value)


def test_transform_checks_width_and_fitted(fitted):
    from sklearn.exceptions import NotFittedError

    with pytest.raises(InvalidInputError, match="features"):
        fitted.transform(np.zeros((3, 10)))
    with pytest.raises(NotFittedError):
        VaDEEncoder().transform(np.zeros((3, 10)))


@pytest.mark.slow
def test_recipe_options_anneal_and_denoise(digits3):
    """Cosine schedules reach ~0 at the end, step decay keeps its old rates, denoising trains."""
    enc = VaDEEncoder(**{**TINY, "epochs": 10, "pretrain_epochs": 4, "lr_schedule": "cosine",
                         "pretrain_schedule": "cosine", "pretrain_noise": 0.2, "pretrain_batch_size": 16,
                         "prior_n_init": 2})
    assert enc._elbo_lr(0) == TINY["lr"] and enc._elbo_lr(9) < 0.03 * TINY["lr"]
    assert enc._pretrain_lr(0) == enc.pretrain_lr and enc._pretrain_lr(3) < 0.2 * enc.pretrain_lr
    step = VaDEEncoder(**{**TINY, "lr_decay": 0.5})
    assert [step._elbo_lr(e) for e in (0, 9, 10, 25)] == [TINY["lr"], TINY["lr"], TINY["lr"] / 2, TINY["lr"] / 4]
    enc.fit(digits3[0])
    assert np.isfinite(enc.transform(digits3[0])).all() and len(enc.history_) == 14


def test_augmentation_shifts_and_rotates_each_image_afresh():
    """DEC-DA's augmentation: nothing at 0 / 0; an integer shift bound keeps the centre of mass
    within that bound; fresh draws per call, the same draws from the same generator state."""
    from pipeline.encoders.augment import random_shift_rotate

    X = torch.from_numpy(load_digits().data[:50].astype(np.float32) / 16)
    g = torch.Generator().manual_seed(0)
    torch.testing.assert_close(random_shift_rotate(X, 8, 0, 0, g), X, atol=1e-6, rtol=0)
    a, b = random_shift_rotate(X, 8, 1, 0, g), random_shift_rotate(X, 8, 1, 0, g)
    assert not torch.equal(a, b)
    g2 = torch.Generator().manual_seed(0)
    random_shift_rotate(X, 8, 0, 0, g2)
    assert torch.equal(random_shift_rotate(X, 8, 1, 0, g2), a)
    grid = torch.arange(8, dtype=torch.float32)

    def centre(img):  # (n, 64) -> (n, 2) centre of mass (row, column)
        img = img.reshape(-1, 8, 8)
        mass = img.sum((1, 2))
        return torch.stack([(img.sum(2) * grid).sum(1) / mass, (img.sum(1) * grid).sum(1) / mass], 1)

    moved = (centre(a) - centre(X)).abs()
    assert moved.max() <= 1.3 and moved.mean() > 0.1  # digits touching the border lose a little mass
    # a rotation keeps the centre of a digit near the image centre (~ +-25 degrees at most)
    rotated = random_shift_rotate(X, 8, 0, 25, g)
    assert (centre(rotated) - centre(X)).abs().max() < 1.5 and not torch.allclose(rotated, X, atol=1e-3)


@pytest.mark.slow
def test_augmented_training_is_seeded_and_changes_the_cache_key(digits3):
    params = {**TINY, "augment_shift": 1, "augment_rotation": 10, "augment_elbo": True}
    a, b = VaDEEncoder(**params).fit(digits3[0]), VaDEEncoder(**params).fit(digits3[0])
    np.testing.assert_array_equal(a.transform(digits3[0]), b.transform(digits3[0]))
    plain = VaDEEncoder(**TINY).fit(digits3[0])
    assert not np.array_equal(plain.transform(digits3[0]), a.transform(digits3[0]))
    data = a._prepare(digits3[0], fitting=False)
    assert a._pretrain_key(data) != plain._pretrain_key(data)
