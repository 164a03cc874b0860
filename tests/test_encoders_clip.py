"""CLIP through open_clip with a tiny randomly initialised model (no downloads)."""

import numpy as np
import pytest

from pipeline.encoders import CLIPEncoder
from pipeline.validation import InvalidInputError

pytest.importorskip("open_clip", reason="open_clip is not installed (pip install -e '.[clip]')")

TINY = {
    "embed_dim": 16,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 16, "head_width": 16},
    "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}


@pytest.fixture(scope="module")
def clip():
    return CLIPEncoder(pretrained=None, model_config=TINY, device="cpu", batch_size=4, progress=False).fit()


def test_image_embeddings_are_normalised_float32(clip):
    rng = np.random.default_rng(0)
    X = rng.integers(0, 256, (6, 40, 48, 3), dtype=np.uint8)
    Z = clip.transform(X)
    assert Z.shape == (6, 16) and Z.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(Z, axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(Z, clip.transform(X))  # deterministic
    assert not np.allclose(Z[0], Z[1])
    grey = clip.transform(X[..., :1])  # greyscale images are converted to RGB
    assert grey.shape == (6, 16)


def test_text_tower_for_concept_prompts(clip):
    T = clip.encode_text(["a photo of a striped animal", "a red object", "water"])
    assert T.shape == (3, 16) and T.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(T, axis=1), 1.0, atol=1e-5)
    with pytest.raises(InvalidInputError, match="list of strings"):
        clip.encode_text("one string")


@pytest.mark.parametrize("X, match", [(np.zeros((0, 8, 8, 3), np.uint8), "empty"),
                                      (np.zeros((2, 8, 8, 4), np.uint8), "uint8 images"),
                                      (["text"], "encode_text")])
def test_bad_input(clip, X, match):
    with pytest.raises(InvalidInputError, match=match):
        clip.transform(X)


def test_missing_weights_name_the_config_key(tmp_path):
    from pipeline.app.models.weights import CLIPEncoder as AppCLIPEncoder

    with pytest.raises(InvalidInputError, match="does not fetch weights.*pipeline.app.models.weights.CLIPEncoder"):
        CLIPEncoder(pretrained="not-a-known-tag", model_config=TINY, device="cpu").fit()
    enc = AppCLIPEncoder(pretrained="not-a-known-tag", model_config=TINY, cache_dir=str(tmp_path), device="cpu")
    with pytest.raises(InvalidInputError, match="encoder.pretrained"):
        enc.fit()


def test_the_config_builds_the_loading_clip():
    from pipeline.app.models.weights import CLIPEncoder as AppCLIPEncoder

    enc = AppCLIPEncoder()
    assert isinstance(enc, CLIPEncoder)
    assert enc.model_name == "ViT-B-32" and enc.pretrained == "openai" and not enc.trainable
