"""The encoder interface: data -> float32 latents.

The pipeline builds encoders from ``encoder._target_`` (any importable class);
:func:`build_encoder` is a by-name shortcut to this package's own encoders for notebooks.
"""

from __future__ import annotations

import numpy as np

from pipeline.validation import InvalidInputError


class Encoder:
    """Maps a dataset's ``X`` (see :class:`pipeline.app.data.Dataset`) to latents.

    Subclasses set ``trainable`` and implement ``transform``; trainable ones implement
    ``fit``. Encoders with their own clustering (VaDE, contrastive clustering) also
    implement ``predict_clusters`` and, for mixture priors, ``mixture``.
    """

    name = "encoder"
    trainable = False
    # True when loading may pick another model than configured (an offline fallback); such an
    # encoder loads in ``fit`` and names the model it loaded in ``model_used_``.
    may_substitute_model = False

    def fit(self, X, y=None) -> "Encoder":
        return self

    def transform(self, X) -> np.ndarray:
        """Latents of shape (n_samples, latent_dim), dtype float32."""
        raise NotImplementedError

    def predict_clusters(self, X) -> np.ndarray:
        """The encoder's own cluster assignment, shape (n_samples,) int64."""
        raise InvalidInputError(f"encoder {self.name!r} has no cluster head; choose another clustering.")

    def mixture(self):
        """``(weights (K,), means (K, m), covariances (K, m, m))`` of a learned mixture prior
        in latent space, or None if the encoder has none."""
        return None

    def torch_module(self):
        """A differentiable ``torch.nn.Module`` from input features to latents, or None.

        The module maps a float tensor of shape (n, d), in the units of ``Dataset.X`` of
        tabular data (any input scaling the encoder applies is inside the module), to the
        latents (n, m) that ``transform`` returns; it lives on the CPU, in eval mode, with
        frozen parameters. Global counterfactual explanations in input features (TGT,
        ``counterfactuals.space=input``) differentiate through it. None (the default) when
        the encoder has no such module: pretrained image/text encoders (CLIP, SBERT,
        contrastive clustering) take images or texts, which are not explained per feature.
        """
        return None


class IdentityEncoder(Encoder):
    """Raw features as latents (tabular data); images are flattened and scaled to [0, 1]."""

    name = "identity"
    latents_are_inputs = True  # the latents are the inputs as float32: an array on disk is read, never copied

    def transform(self, X) -> np.ndarray:
        if isinstance(X, list):
            raise InvalidInputError("the identity encoder cannot embed texts; use encoder=sbert or encoder=clip.")
        X = np.asarray(X)
        if X.dtype == np.uint8:
            return (X.reshape(len(X), -1) / 255.0).astype(np.float32)
        return X.reshape(len(X), -1).astype(np.float32)

    def torch_module(self):
        """``torch.nn.Identity``: the latents are the input features (tabular data)."""
        import torch

        return torch.nn.Identity()
