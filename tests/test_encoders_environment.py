"""Model cache root / offline switch, device selection and the identity encoder."""

import os

import numpy as np
import pytest
import torch

from pipeline.app.configuration.environment import configure_model_caches
from pipeline.encoders import IdentityEncoder, select_device
from pipeline.encoders.device import seed_everything
from pipeline.app.configuration.environment import OFFLINE_VARIABLES, is_offline, open_clip_cache_dir
from pipeline.validation import InvalidInputError

KEYS = ("TORCH_HOME", "HF_HOME", "HF_HUB_CACHE", "SENTENCE_TRANSFORMERS_HOME", "OPEN_CLIP_CACHE_DIR") + OFFLINE_VARIABLES


@pytest.fixture
def clean_env(monkeypatch):
    for key in KEYS:
        monkeypatch.delenv(key, raising=False)
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_OFFLINE", c.HF_HUB_OFFLINE)
    monkeypatch.setattr(c, "HF_HUB_CACHE", c.HF_HUB_CACHE)
    monkeypatch.setattr(c, "HF_HOME", c.HF_HOME)
    yield
    for key in KEYS:
        os.environ.pop(key, None)


def test_one_cache_root_and_offline_switch(tmp_path, clean_env):
    import huggingface_hub.constants as c

    env = configure_model_caches(tmp_path / "models-cache", offline=True)
    assert os.environ["TORCH_HOME"] == str(tmp_path / "models-cache" / "torch")
    assert os.environ["HF_HOME"].startswith(str(tmp_path)) and os.environ["SENTENCE_TRANSFORMERS_HOME"].startswith(str(tmp_path))
    assert open_clip_cache_dir() == env["OPEN_CLIP_CACHE_DIR"] and (tmp_path / "models-cache" / "open_clip").is_dir()
    assert torch.hub.get_dir().startswith(str(tmp_path))
    assert is_offline() and all(os.environ[k] == "1" for k in OFFLINE_VARIABLES) and c.HF_HUB_OFFLINE is True
    configure_model_caches(None, offline=False)
    assert not is_offline() and c.HF_HUB_OFFLINE is False


def test_device_selection():
    assert select_device("cpu") == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else ("mps" if torch.backends.mps.is_available() else "cpu")
    assert select_device("auto").type == expected
    with pytest.raises(InvalidInputError, match="encoder.device"):
        select_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(InvalidInputError, match="CUDA is not available"):
            select_device("cuda")


def test_device_ordinal_beyond_the_machine_is_a_clear_error(monkeypatch):
    """Found on a one-GPU machine: a checkpoint trained on cuda:7 made torch fail with "invalid
    device ordinal" deep inside loading; select_device refuses it, so loading falls back to auto."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(InvalidInputError, match="has 1 CUDA device"):
        select_device("cuda:7")
    assert select_device("cuda:0") == torch.device("cuda:0")


def test_seed_everything_reproduces():
    seed_everything(3)
    a = torch.randn(4), np.random.rand(2)
    seed_everything(3)
    b = torch.randn(4), np.random.rand(2)
    assert torch.equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def test_identity_encoder():
    enc = IdentityEncoder()
    assert isinstance(enc, IdentityEncoder) and not enc.trainable
    Z = enc.transform(np.arange(6, dtype=np.float64).reshape(3, 2))
    assert Z.dtype == np.float32 and Z.shape == (3, 2)
    imgs = np.full((2, 4, 4, 1), 255, np.uint8)
    np.testing.assert_array_equal(enc.transform(imgs), np.ones((2, 16), np.float32))
    with pytest.raises(InvalidInputError, match="texts"):
        enc.transform(["a"])
