"""Input checks and torch plumbing shared by the counterfactual modules.

The encoder ``r`` is any callable torch module mapping a float tensor of shape (n, d) to
one of shape (n, m). These helpers validate it (it must be differentiable in its input),
apply it to numpy arrays without building a graph, and validate group labels.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import numpy as np
import torch

from pipeline.validation import InvalidInputError, check_labels, check_matrix, check_vector

_BATCH = 4096


def encoder_dtype(encoder) -> torch.dtype:
    """The floating dtype of the encoder's first parameter or buffer (float32 if it has none)."""
    for attr in ("parameters", "buffers"):
        tensors = getattr(encoder, attr, None)
        if callable(tensors):
            for p in tensors():
                if p.is_floating_point():
                    return p.dtype
    return torch.float32


@contextlib.contextmanager
def eval_mode(encoder) -> Iterator[None]:
    """Temporarily put a torch module (and its submodules) in eval mode; restore afterwards."""
    if not isinstance(encoder, torch.nn.Module):
        yield
        return
    flags = [(m, m.training) for m in encoder.modules()]
    encoder.eval()
    try:
        yield
    finally:
        for m, flag in flags:
            m.train(flag)


def check_encoder(encoder, n_features: int) -> int:
    """Check that ``encoder`` maps (n, n_features) tensors differentiably to (n, m); return m.

    Raises
    ------
    InvalidInputError
        If the encoder is not callable, fails on a probe batch, returns something other
        than a 2-D tensor with one row per input, or its output carries no gradient
        with respect to its input (e.g. it detaches, calls ``.numpy()`` or rounds).
    """
    if not callable(encoder):
        raise InvalidInputError(
            f"encoder must be a callable torch module mapping (n, d) tensors to (n, m); got {type(encoder).__name__}."
        )
    probe = torch.zeros(2, n_features, dtype=encoder_dtype(encoder), requires_grad=True)
    try:
        with eval_mode(encoder), torch.enable_grad():
            out = encoder(probe)
    except Exception as exc:  # noqa: BLE001 - any failure here is a user-facing input problem
        raise InvalidInputError(
            f"encoder failed on a probe batch of shape (2, {n_features}): {type(exc).__name__}: {exc}. "
            "Check that it accepts float tensors with as many columns as X."
        ) from None
    if not isinstance(out, torch.Tensor) or out.ndim != 2 or out.shape[0] != 2:
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise InvalidInputError(
            f"encoder must return a 2-D torch tensor of shape (n, m) for an (n, d) input; got {shape} for n=2."
        )
    grad = None
    if out.requires_grad:
        (grad,) = torch.autograd.grad(out.sum(), probe, allow_unused=True)
    if grad is None:
        raise InvalidInputError(
            "encoder is not differentiable in its input: its output carries no gradient (it detaches, "
            "converts to numpy, or uses non-differentiable operations). TGT needs autograd through the encoder; "
            "pass the torch module itself, or use dbm() which needs no encoder gradient."
        )
    return int(out.shape[1])


def encode(encoder, X: np.ndarray) -> np.ndarray:
    """Apply ``encoder`` to ``X`` (n, d) in eval mode without autograd; return float64 (n, m)."""
    dtype = encoder_dtype(encoder)
    outs = []
    with eval_mode(encoder), torch.no_grad():
        for start in range(0, max(len(X), 1), _BATCH):
            xb = torch.as_tensor(np.ascontiguousarray(X[start : start + _BATCH]), dtype=dtype)
            outs.append(encoder(xb).detach().cpu().double().numpy())
    return np.concatenate(outs, axis=0)


def check_groups(X, groups) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate data and group labels.

    Returns ``(X, groups, labels)``: X as float64 (n, d), groups as int64 (n,), and the
    sorted distinct group labels (label -1 marks noise points and is ignored).

    Raises
    ------
    InvalidInputError
        Fewer than two groups, or a group with fewer than two points.
    """
    X = check_matrix(X, "X")
    groups = check_labels(groups, X.shape[0], "groups")
    labels, counts = np.unique(groups[groups != -1], return_counts=True)
    if labels.size < 2:
        raise InvalidInputError(
            f"need at least two groups to explain differences between them, got {labels.size} "
            f"(labels {labels.tolist()}); check the clustering or the group labels (-1 = noise is ignored)."
        )
    small = labels[counts < 2]
    if small.size:
        raise InvalidInputError(
            f"group(s) {small.tolist()} have a single point; correctness, coverage and the epsilon choice need "
            "at least two points per group. Merge them into another group or mark them -1 (noise)."
        )
    return X, groups, labels


def check_k(k, n_features: int) -> int | None:
    """Validate a sparsity level ``k`` (None = no thresholding)."""
    if k is None:
        return None
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise InvalidInputError(f"k must be a positive integer or None, got {k!r}.")
    if not 1 <= k <= n_features:
        raise InvalidInputError(
            f"k={k} is outside 1..{n_features} (the explanation's dimension); choose k <= {n_features} or None."
        )
    return int(k)


def check_group_label(label, labels: np.ndarray, name: str) -> int:
    """Return the position of group ``label`` among ``labels``; raise if it is not a group."""
    pos = np.flatnonzero(labels == label)
    if pos.size == 0:
        raise InvalidInputError(f"{name}={label!r} is not a group; available groups: {labels.tolist()}.")
    return int(pos[0])


def check_delta(delta, n_features: int) -> np.ndarray:
    """Validate a translation vector of length ``n_features``."""
    return check_vector(delta, "delta", length=n_features)
