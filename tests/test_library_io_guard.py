"""The library performs no I/O when it runs (issue 23): a runtime guard, not a reading of the source.

Every tree estimator is fitted and applied, every CAV fitter fitted, and the encoders' torch
modules trained / applied on tiny data inside :func:`no_io`, which fails on ``builtins.open`` /
``io.open``, writes to ``os.environ``, socket creation, subprocesses and ``torch.hub``. Each
case runs once before the guard (numba compiles and loads its cache, sklearn and threadpoolctl
read what they read once per process), then again under it: what the library itself does on
every call must touch nothing outside the process.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import os
import socket
import subprocess

import numpy as np
import pytest
from sklearn.datasets import make_blobs


class LibraryIOError(AssertionError):
    pass


@contextlib.contextmanager
def no_io():
    """Fail on file opens, ``os.environ`` writes, sockets, subprocesses and torch.hub inside the block."""
    def refuse(what):
        def guard(*args, **kwargs):
            raise LibraryIOError(f"the library did {what} {args[:1]!r}")
        return guard

    patches = [(builtins, "open", refuse("open")), (io, "open", refuse("io.open")),
               (os, "putenv", refuse("os.putenv")), (os, "unsetenv", refuse("os.unsetenv")),
               (type(os.environ), "__setitem__", refuse("os.environ[...] =")),
               (type(os.environ), "__delitem__", refuse("del os.environ[...]")),
               (socket, "socket", refuse("socket.socket")), (socket, "create_connection", refuse("a connection")),
               (subprocess, "Popen", refuse("subprocess.Popen")), (os, "system", refuse("os.system"))]
    try:
        import torch.hub

        patches += [(torch.hub, name, refuse(f"torch.hub.{name}"))
                    for name in ("load", "load_state_dict_from_url", "download_url_to_file")]
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in patches]
    try:
        for obj, name, fn in patches:
            setattr(obj, name, fn)
        yield
    finally:
        for obj, name, fn in saved:
            setattr(obj, name, fn)


def test_the_guard_catches_each_kind():
    import torch.hub

    for act in (lambda: open(os.devnull), lambda: io.open(os.devnull), lambda: os.environ.update(A23="1"),
                lambda: os.environ.pop("PATH"), lambda: socket.socket(), lambda: subprocess.run(["true"]),
                lambda: torch.hub.load("a/b", "c")):
        with no_io(), pytest.raises(LibraryIOError):
            act()
    assert "A23" not in os.environ and "PATH" in os.environ


def run_twice(fn):
    fn()  # compile / load once-per-process state outside the guard
    with no_io():
        return fn()


X, Y = make_blobs(n_samples=120, n_features=4, centers=3, random_state=0)


def _tree_cases():
    from pipeline.trees import (CART, EMN, IMM, MMDT, TAO, ConceptMMDT, ExKMC, RandomizedMMDT, SpExClique,
                                SpExGraph, SpExKNN)
    from pipeline.trees.graphs import knn_graph

    centers = np.stack([X[Y == k].mean(axis=0) for k in range(3)])
    C = np.eye(4)[:3]
    yield "MMDT", lambda: MMDT().fit(X, Y).predict(X)
    yield "MMDT.fit_mixture", lambda: MMDT().fit_mixture(centers, np.ones(4)).predict(X)
    yield "RandomizedMMDT", lambda: RandomizedMMDT(random_state=0).fit(X, Y).predict(X)
    yield "ConceptMMDT", lambda: ConceptMMDT(C).fit_mixture(centers, np.stack([np.eye(4)] * 3)).predict(X)
    yield "CART", lambda: CART(random_state=0).fit(X, Y).predict(X)
    yield "IMM", lambda: IMM().fit(X, Y, centers=centers).predict(X)
    yield "EMN", lambda: EMN().fit(X, Y, centers=centers).predict(X)
    yield "ExKMC", lambda: ExKMC(n_leaves=3).fit(X, Y, centers=centers).predict(X)
    yield "SpExClique", lambda: SpExClique().fit(X, Y).predict(X)
    yield "SpExKNN", lambda: SpExKNN().fit(X, Y).predict(X)
    yield "SpExGraph", lambda: SpExGraph().fit(X, knn_graph(X, 5), y=Y).predict(X)
    yield "TAO", lambda: TAO(n_clusters=3, depth=2, max_rounds=3, random_state=0).fit(X, init_labels=Y).predict(X)


TREE_CASES = dict(_tree_cases())


@pytest.mark.parametrize("name", list(TREE_CASES))
def test_every_tree_estimator_fits_and_predicts_without_io(name):
    pred = run_twice(TREE_CASES[name])
    assert len(pred) == len(X)


@pytest.mark.parametrize("fitter", ["LogisticFitter", "LinearSVMFitter", "SGDFitter", "MeanDifferenceFitter",
                                    "LinearRegressionFitter"])
def test_every_cav_fitter_fits_without_io(fitter):
    from pipeline.concepts import CAVFitter
    from pipeline.concepts import fitters as module

    cls = getattr(module, fitter)
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(80, 6))
    labels = (Z[:, :2] > 0).astype(float) if not cls.continuous else Z[:, :2] + rng.normal(0, 0.1, (80, 2))
    out = run_twice(lambda: CAVFitter(fitter=cls, n_repeats=2, cv=2, min_positives=3, random_state=0)
                    .fit(Z, labels, ["a", "b"]).project(Z))
    assert out.shape[0] == 80


def test_the_reference_clusterings_and_metrics_run_without_io():
    from pipeline import clustering, metrics

    def work():
        gmm = clustering.fit_gmm(X, 3, random_state=0)
        km = clustering.fit_kmeans(X, 3, random_state=0)
        return metrics.ari(Y, gmm.labels), metrics.ami(Y, km.labels), metrics.explainability_to_noise_ratio(
            gmm.means, np.ones(4))

    assert run_twice(work)[0] > 0.5


def test_the_encoders_torch_modules_train_and_embed_without_io():
    torch = pytest.importorskip("torch")
    from pipeline.encoders import IdentityEncoder, TorchModuleEncoder, VaDEEncoder

    def vade():
        enc = VaDEEncoder(n_clusters=3, latent_dim=2, hidden_dims=(8,), pretrain_epochs=1, epochs=1, batch_size=32,
                          progress=False, device="cpu", n_init=1)
        enc.fit(X.astype(np.float32))
        return enc.transform(X.astype(np.float32)), enc.predict_clusters(X.astype(np.float32)), enc.mixture()

    Z, labels, mixture = run_twice(vade)
    assert Z.shape == (len(X), 2) and labels.shape == (len(X),) and mixture[1].shape == (3, 2)
    module = torch.nn.Sequential(torch.nn.Linear(4, 3))
    out = run_twice(lambda: TorchModuleEncoder(module, device="cpu", progress=False).fit(X).transform(X))
    assert out.shape == (len(X), 3)
    assert run_twice(lambda: IdentityEncoder().transform(X)).shape == X.shape


@pytest.mark.slow
def test_the_contrastive_encoder_trains_without_io():
    pytest.importorskip("torchvision")
    from pipeline.encoders import ContrastiveClusteringEncoder

    images = np.random.default_rng(0).integers(0, 255, (8, 32, 32, 3), dtype=np.uint8)

    def fit():
        enc = ContrastiveClusteringEncoder(n_clusters=2, backbone="resnet18", backbone_weights=None, image_size=32,
                                           batch_size=4, epochs=1, progress=False, device="cpu", amp=False)
        return enc.fit(images).transform(images)

    assert run_twice(fit).shape[0] == 8
