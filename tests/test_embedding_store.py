"""The embedding store (pipeline.app.stores.embedding_store) behind the encode stage: rows reused across
subsets, resume after a kill, changed shards re-embedded, another encoder's store refused, nothing
half-written, and the same Z as one ``transform`` on the whole array (docs/encoders.md)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipeline.app.configuration.config import compose_config
from pipeline.app.stores.embedding_store import EmbeddingStore, identity_id, item_hashes, store_root
from pipeline.app.running.runner import run
from pipeline.encoders.base import Encoder
from pipeline.validation import InvalidInputError

ROOT = Path(__file__).resolve().parents[1]
_W = np.random.default_rng(0).standard_normal((64, 5)).astype(np.float32)


class Counting(Encoder):
    """A frozen encoder that counts the items it embeds. Its latents depend on the batches it is
    given (each row gets 1e-3 x its batch's mean), so chunks that cut a batch change them: the
    store must chunk at multiples of ``batch_size`` to give the same Z as one call on the whole array."""

    name = "counting_test"
    embedded = 0
    calls = 0
    fail_at_call = None  # raise in this call (1-based): a run killed mid-way
    kill_at_call = None  # SIGKILL the process in this call (the subprocess test)

    def __init__(self, batch_size: int = 256, scale: float = 1.0):
        self.batch_size = batch_size
        self.scale = scale

    def transform(self, X):
        Counting.calls += 1
        if Counting.kill_at_call == Counting.calls:
            import signal

            os.kill(os.getpid(), signal.SIGKILL)
        if Counting.fail_at_call == Counting.calls:
            raise RuntimeError("killed mid-way (test)")
        Counting.embedded += len(X)
        if isinstance(X, list):  # texts: letter counts
            A = np.array([[t.lower().count(c) for c in "etaoinshrdlucmfwypvbgkjqxz"] + [len(t)] * 38
                          for t in X], dtype=np.float32)
        else:
            A = np.asarray(X, dtype=np.float32).reshape(len(X), -1)[:, :64]
        Z = A @ _W[:A.shape[1]] * self.scale
        for start in range(0, len(Z), self.batch_size):
            Z[start:start + self.batch_size] += 1e-3 * Z[start:start + self.batch_size].mean(0)
        return Z


@pytest.fixture(autouse=True)
def reset_counts():
    Counting.embedded = Counting.calls = 0
    Counting.fail_at_call = Counting.kill_at_call = None
    yield
    Counting.fail_at_call = Counting.kill_at_call = None


ENC = ["encoder=identity", "concepts=none", "encoder._target_=test_embedding_store.Counting", "encoder.name=counting_test", "encoder.batch_size=16",
       "clustering=kmeans", "explainer=[cart]", "report.figures=false", "report.summary=false"]


def config(tmp_path, out, *extra, dataset=("dataset=digits", "dataset.classes=[0,1,2]")):
    return compose_config([f"paths.output_dir={tmp_path / out}", f"paths.cache_dir={tmp_path / 'cache'}",
                           *dataset, *ENC, *extra])


def encoded(tmp_path, out) -> np.ndarray:
    """The Z of run ``out``'s encode entry."""
    status = json.loads((tmp_path / out / "status.json").read_text())
    key = next(e["key"] for e in status["cache"] if e["stage"] == "encode")
    with np.load(tmp_path / "cache" / "encode" / key / "arrays.npz") as data:
        return data["Z"]


def store_dir(tmp_path) -> Path:
    (root,) = (tmp_path / "cache" / "embeddings").iterdir()
    return root


def digits(classes):
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return X[np.isin(y, classes)]


# ------------------------------------------------------------------ through the pipeline
def test_z_is_one_transform_of_the_whole_array_and_a_subset_embeds_nothing(tmp_path):
    run(config(tmp_path, "all"))
    X = digits([0, 1, 2])
    assert Counting.embedded == len(X)
    # the default chunk (4096 rounded to a multiple of batch_size 16) holds whole batches: the
    # same numbers as one call on the whole array, bit for bit
    np.testing.assert_array_equal(encoded(tmp_path, "all"), Counting(batch_size=16).transform(X))
    Counting.embedded = 0

    # a later run on a subset (two of the three classes): every row comes from the store
    run(config(tmp_path, "subset", dataset=("dataset=digits", "dataset.classes=[0,2]")))
    assert Counting.embedded == 0
    whole = dict(zip(item_hashes(X), encoded(tmp_path, "all")))
    sub = digits([0, 2])
    np.testing.assert_array_equal(encoded(tmp_path, "subset"), np.stack([whole[h] for h in item_hashes(sub)]))


def test_chunk_rows_chunks_the_embedding_and_a_killed_run_resumes_after_its_last_chunk(tmp_path):
    n = len(digits([0, 1, 2]))
    Counting.fail_at_call = 4  # three chunks of 64 finished, the fourth fails
    with pytest.raises(RuntimeError, match="killed mid-way"):
        run(config(tmp_path, "a", "dataset.chunk_rows=64"))
    root = store_dir(tmp_path)
    assert len(list((root / "shards").glob("*.npy"))) == 3 and not list(root.rglob("*.part"))
    assert len(EmbeddingStore(root, json.loads((root / "meta.json").read_text())["identity"])) == 3 * 64
    Counting.embedded = 0
    run(config(tmp_path, "b", "dataset.chunk_rows=64"))
    assert Counting.embedded == n - 3 * 64  # only the items not in finished shards
    # chunks of whole batches: the resumed Z is the uninterrupted one, bit for bit
    np.testing.assert_array_equal(encoded(tmp_path, "b"), Counting(batch_size=16).transform(digits([0, 1, 2])))
    assert len(list((root / "shards").glob("*.npy"))) == -(-(n - 192) // 64) + 3


def test_texts_go_through_the_store_in_chunks(tmp_path):
    texts = ("dataset=files", f"dataset.path={ROOT / 'examples/small_text/texts.csv'}", "dataset.text_column=text",
             "dataset.labels=topic")
    run(config(tmp_path, "t", "dataset.chunk_rows=7", "clustering.n_clusters=4", dataset=texts))
    assert Counting.embedded == 40 and Counting.calls == 6  # 40 sentences in chunks of 7
    Counting.embedded = 0
    run(config(tmp_path, "t2", "dataset.chunk_rows=7", "clustering.n_clusters=3", "+force=encode", dataset=texts))
    assert Counting.embedded == 40  # +force=encode embeds again, whatever the store holds


def test_an_array_on_disk_is_hashed_and_embedded_chunk_by_chunk(tmp_path):
    X = np.random.default_rng(1).standard_normal((300, 64)).astype(np.float32)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", np.arange(300) % 3)
    files = ("dataset=files", f"dataset.path={tmp_path / 'X.npy'}", f"dataset.labels={tmp_path / 'y.npy'}")
    run(config(tmp_path, "f", "dataset.chunk_rows=96", "clustering.n_clusters=3", dataset=files))
    assert Counting.embedded == 300 and Counting.calls == 4
    np.testing.assert_array_equal(encoded(tmp_path, "f"), Counting(batch_size=16).transform(X))


def test_another_encoder_configuration_gets_its_own_store(tmp_path):
    run(config(tmp_path, "a"))
    run(config(tmp_path, "b", "+encoder.params.scale=2.0"))
    assert len(list((tmp_path / "cache" / "embeddings").iterdir())) == 2
    np.testing.assert_allclose(encoded(tmp_path, "b"), 2 * encoded(tmp_path, "a"), rtol=1e-5)


@pytest.mark.slow
def test_sigkill_mid_run_then_the_rerun_embeds_only_the_rest(tmp_path):
    """A real SIGKILL of ``python -m pipeline`` in its fourth chunk."""
    launcher = tmp_path / "launch.py"
    launcher.write_text("import runpy, sys\nimport test_embedding_store as t\nt.Counting.kill_at_call = int(sys.argv[1])\n"
                        "sys.argv = ['pipeline', *sys.argv[2:]]\nrunpy.run_module('pipeline', run_name='__main__')\n")
    args = [f"paths.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'run'}", "dataset=digits",
            "dataset.classes=[0,1,2]", "dataset.chunk_rows=64", *ENC]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")])}
    proc = subprocess.run([sys.executable, str(launcher), "4", *args], env=env, capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr[-2000:]
    root = store_dir(tmp_path)
    assert len(list((root / "shards").glob("*.json"))) == 3
    proc = subprocess.run([sys.executable, str(launcher), "0", *args[:1], f"hydra.run.dir={tmp_path / 'run2'}",
                           *args[2:]], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    log = (tmp_path / "run2" / "__main__.log").read_text()
    n = len(digits([0, 1, 2]))
    assert f"{3 * 64} of {n} items stored; embedding {n - 3 * 64} in" in log


@pytest.mark.slow
def test_compute_dask_embeds_chunks_as_tasks(tmp_path):
    run(config(tmp_path, "local", "dataset.chunk_rows=100"))
    local = encoded(tmp_path, "local")
    run(config(tmp_path.joinpath("d"), "dask", "dataset.chunk_rows=100", "compute=dask", "compute.n_workers=2"))
    np.testing.assert_array_equal(encoded(tmp_path / "d", "dask"), local)
    assert len(list(store_dir(tmp_path / "d").glob("shards/*.npy"))) == -(-len(local) // 100)


def test_a_dask_worker_without_the_weights_gets_one_paragraph(tmp_path):
    from pipeline.app.stores.artifacts import TrainArtifact
    from pipeline.app.stages.encode import worker_encoder

    cfg = compose_config([f"paths.cache_dir={tmp_path / 'cache'}", f"paths.models_dir={tmp_path / 'm'}",
                          "dataset=digits", "encoder=vade"])
    missing = str(tmp_path / "m" / "vade" / "abc.pt")
    with pytest.raises(InvalidInputError, match=r"a Dask worker could not build the vade encoder.*encoder\.checkpoint="):
        worker_encoder(cfg, TrainArtifact(checkpoint=missing, checkpoint_sha256="0" * 64))


def test_a_dask_worker_without_a_weights_file_is_told_the_key(tmp_path):
    from pipeline.app.stores.artifacts import TrainArtifact
    from pipeline.app.stages.encode import worker_encoder

    cfg = compose_config([f"paths.cache_dir={tmp_path / 'cache'}", "dataset=iris", "encoder=torch",
                          "encoder.model._target_=torchvision.models.resnet18", f"encoder.weights={tmp_path / 'w.pt'}"])
    with pytest.raises(InvalidInputError, match=r"could not build the torch encoder.*set encoder\.weights=<a copy of"):
        worker_encoder(cfg, TrainArtifact())


def test_bad_chunk_rows_is_refused():
    from pipeline.app.stages.encode import chunk_items

    assert chunk_items({"dataset": {}, "encoder": {"batch_size": 16}}) == 4096
    assert chunk_items({"dataset": {}, "encoder": {"batch_size": 100}}) == 4100
    assert chunk_items({"dataset": {"chunk_rows": 500}, "encoder": {"batch_size": 16}}) == 500
    from pipeline.app.startup.settings_checks import check_dataset_settings

    with pytest.raises(InvalidInputError, match="dataset.chunk_rows=0"):  # refused by the run's plan, before any stage
        check_dataset_settings({"chunk_rows": 0})


# ------------------------------------------------------------------ the store itself
IDENTITY = {"encoder": "e", "layer": "blocks.6", "config": {"a": 1}, "checkpoint_sha256": None, "model_used": None}


def test_item_hashes_key_content_shape_and_dtype():
    x = np.arange(12, dtype=np.uint8).reshape(3, 2, 2)
    h = item_hashes(x)
    assert len(set(h)) == 3 and h == item_hashes(x.copy())
    assert item_hashes(x[1:]) == h[1:]  # an item's key does not depend on its neighbours
    assert item_hashes(x.astype(np.float32)) != h and item_hashes(x.reshape(3, 4)) != h
    assert item_hashes(["a", "é"]) == item_hashes(["a", "é"]) and len(set(item_hashes(["a", "b", "a"]))) == 2
    with pytest.raises(InvalidInputError, match="text item 1 is a NoneType"):
        item_hashes(["a", None])


def test_a_store_of_another_layer_under_the_same_key_is_refused(tmp_path):
    root = store_root(tmp_path, IDENTITY)
    EmbeddingStore(root, IDENTITY).add(["h1"], np.ones((1, 2), np.float32))
    with pytest.raises(InvalidInputError) as err:
        EmbeddingStore(root, {**IDENTITY, "layer": "bn2"})
    msg = str(err.value)
    assert "was written by e at blocks.6" in msg and "embeds with e at bn2" in msg and "never mixed" in msg
    assert "layer" in msg and str(root) in msg
    assert identity_id(IDENTITY) != identity_id({**IDENTITY, "layer": "bn2"})
    (root / "meta.json").write_text("{not json")
    with pytest.raises(InvalidInputError, match="unreadable meta.json"):
        EmbeddingStore(root, IDENTITY)


def test_a_changed_shard_is_dropped_with_a_warning_and_its_items_are_missing(tmp_path, caplog):
    store = EmbeddingStore(tmp_path / "s", IDENTITY)
    a = store.add(["a", "b"], np.array([[1, 2], [3, 4]], np.float32))
    store.add(["c"], np.array([[5, 6]], np.float32))
    Z, found = store.read(["c", "a", "b", "x"])
    assert found.tolist() == [True, True, True, False]
    np.testing.assert_array_equal(Z[:3], [[5, 6], [1, 2], [3, 4]])
    shard = tmp_path / "s" / "shards" / f"{a}.npy"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 1  # one bit of one number, as a bad copy would
    shard.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="pipeline.app.stores.embedding_store"):
        Z, found = store.read(["c", "a", "b"])
    assert found.tolist() == [True, False, False]
    assert str(shard) in caplog.text and "changed on disk" in caplog.text and "embedded again" in caplog.text
    assert not shard.exists() and len(store) == 1
    store.add(["a", "b"], np.array([[1, 2], [3, 4]], np.float32))  # re-embedded
    assert store.read(["a", "b"])[1].all()


def test_nothing_half_written_is_ever_read(tmp_path, monkeypatch):
    import pipeline.app.stores.embedding_store as es

    store = EmbeddingStore(tmp_path / "s", IDENTITY)
    store.add(["a"], np.ones((1, 2), np.float32))

    write = es._write_atomic

    def killed(path, data):  # the process dies after the shard's rename, before its record
        if path.suffix == ".json":
            raise KeyboardInterrupt
        write(path, data)

    monkeypatch.setattr(es, "_write_atomic", killed)
    with pytest.raises(KeyboardInterrupt):
        store.add(["b"], np.ones((1, 2), np.float32))
    monkeypatch.undo()
    (tmp_path / "s" / "shards" / ".x.123.part").write_bytes(b"half a shard")
    assert len(list((tmp_path / "s" / "shards").glob("*.npy"))) == 2  # the unrecorded one is on disk
    store = EmbeddingStore(tmp_path / "s", IDENTITY)  # the next run opens the store
    assert sorted(p.name for p in (tmp_path / "s" / "shards").iterdir()) == sorted(
        f"{es.hashlib.sha256(b'a').hexdigest()[:24]}{s}" for s in (".json", ".npy"))
    assert store.read(["a", "b"])[1].tolist() == [True, False]


def test_a_later_commit_of_an_item_wins(tmp_path):
    store = EmbeddingStore(tmp_path / "s", IDENTITY)
    store.add(["a", "b"], np.zeros((2, 2), np.float32))
    store.add(["b", "c"], np.ones((2, 2), np.float32))
    Z, found = store.read(["a", "b", "c"])
    assert found.all() and Z[:, 0].tolist() == [0, 1, 1]
    with pytest.raises(InvalidInputError, match="3-wide embeddings"):
        store.add(["d"], np.zeros((1, 3), np.float32))


# ------------------------------------------------------------------ docs/encoders.md, "Embedding store"
def _idx(path: Path, arr: np.ndarray) -> None:
    header = (0x0800 | arr.ndim).to_bytes(4, "big") + b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
    path.write_bytes(header + np.ascontiguousarray(arr, dtype=np.uint8).tobytes())


@pytest.mark.slow
def test_documented_store_commands_run_on_a_tiny_fashion_mnist(tmp_path, caplog):
    """The section's two commands, on 60 + 20 real Fashion-MNIST images written as IDX files
    (dataset.root=): the second (three classes) embeds nothing."""
    import re
    import shlex

    from pipeline.app.data.fashion_mnist import DEBIAN_ROOT, read_split

    text = (ROOT / "docs" / "encoders.md").read_text()
    section = text[text.index("## Embedding store"):text.index("## Checkpoints")]
    lines = [ln for block in re.findall(r"```bash\n(.*?)```", section, flags=re.S) for ln in block.splitlines()
             if ln.startswith("python -m pipeline")]
    assert len(lines) == 2
    if not DEBIAN_ROOT.is_dir():
        pytest.skip(f"Fashion-MNIST not installed in {DEBIAN_ROOT}")
    for split, n in (("train", 60), ("test", 20)):
        X, y = read_split(DEBIAN_ROOT, split)
        prefix = "train" if split == "train" else "t10k"
        _idx(tmp_path / f"{prefix}-images-idx3-ubyte", X[:n])
        _idx(tmp_path / f"{prefix}-labels-idx1-ubyte", y[:n])
    counts = []
    for i, line in enumerate(lines):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="pipeline.app.stages.encode"):
            run(compose_config([*shlex.split(line)[3:], f"dataset.root={tmp_path}", "encoder.image_size=64",
                                f"paths.output_dir={tmp_path / f'out{i}'}", f"paths.cache_dir={tmp_path / 'cache'}",
                                "report.figures=false", "report.summary=false"]))
        counts.append(re.search(r"(\d+) of (\d+) items stored; embedding (\d+) in", caplog.text).groups())
    assert counts[0] == ("0", "80", "80")
    n_subset = int(counts[1][1])
    assert n_subset > 0 and counts[1] == (str(n_subset), str(n_subset), "0")


def test_each_dask_worker_embeds_on_a_gpu_of_its_own():
    """encoder.device=cuda (or auto) on workers that see several GPUs: one GPU per worker, by the
    worker's number (LocalCluster: 0, 1, ...; dask-jobqueue: <cluster>-<job>-<i>); one GPU or an
    explicit device is kept."""
    from pipeline.app.stages.encode import worker_device

    assert [worker_device("cuda", name, 2) for name in (0, 1, 2, 3)] == ["cuda:0", "cuda:1", "cuda:0", "cuda:1"]
    assert worker_device("auto", "SLURMCluster-3-5", 4) == "cuda:1"
    assert worker_device("cuda", "tcp://10.0.0.7:40123", 8) == "cuda:3"  # the last number of the name
    assert worker_device("cuda", "gpu-worker", 2) == "cuda:0"
    assert worker_device("cuda", 1, 1) == "cuda"  # one GPU (a SLURM job's own): kept
    assert worker_device("cuda:1", 0, 2) == "cuda:1" and worker_device("cpu", 1, 2) == "cpu"
