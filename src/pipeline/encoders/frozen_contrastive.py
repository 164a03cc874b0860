"""Contrastive clustering heads on a frozen pretrained backbone (the MMDT paper's AwA2 protocol).

Li et al. (2021) pass two augmented views of each image through the backbone and train an
instance head (NT-Xent, ``tau_I``) and a cluster head (NT-Xent over cluster columns, ``tau_C``,
plus the cluster-size entropy) on the two views' features. With the backbone *frozen* (the
paper's protocol for AwA2, and for its CIFAR subsets), the backbone's output for a given view
never changes, so the features of a fixed bank of ``n_views`` augmented views per image are
computed once, and every training step draws two different views of each image from that bank.
This is the paper's training with its augmentation distribution replaced by a uniform draw from
``n_views`` fixed samples of it; the heads see exactly the features they would see on-line, at
a cost of ``n_views + 1`` backbone passes per image instead of ``2 x epochs`` (what makes it
feasible on a CPU). The heads are the authors' two-layer MLPs.

Backbones: EfficientNet-Lite (``backbone="efficientnet_lite0"``, pooled at ``layer``), built
by :mod:`pipeline.encoders.efficientnet_lite`; the weights arrive as a state dict (the application
reads the weights package).
"""

from __future__ import annotations

import hashlib
import logging

import numpy as np
import torch
from torch import nn
from torchvision.transforms import v2

from pipeline.encoders.contrastive import REPRESENTATIONS, ContrastiveClusteringNet, paired_loss, projectors
from pipeline.encoders.efficientnet_lite import (DEFAULT_LAYER, EfficientNetEncoder, check_channels, check_variant,
                                            efficientnet_lite, input_transform)
from pipeline.encoders.training import COMMON_CONSTRAINTS, TorchEncoder, check_fitted
from pipeline.validation import InvalidInputError

logger = logging.getLogger(__name__)


class Heads(nn.Module):
    """The instance projector (rep -> rep -> feature_dim, L2-normalised) and the cluster projector
    (rep -> rep -> K, softmax) of contrastive clustering (:func:`projectors`); ``backbone`` holds
    the frozen network so that a checkpoint carries it."""

    def __init__(self, backbone: nn.Module, rep_dim: int, n_clusters: int, feature_dim: int = 128):
        super().__init__()
        self.backbone = backbone.requires_grad_(False)
        self.instance_projector, self.cluster_projector = projectors(rep_dim, n_clusters, feature_dim)

    forward = ContrastiveClusteringNet.heads


def view_transform(size: int, channels: int = 3, color_strength: float = 0.5) -> v2.Compose:
    """One random view of a uint8 (C, H, W) image at its own size: resized crop, flip, colour
    jitter (p 0.8; brightness and contrast only for grey images) as in contrastive clustering;
    the backbone's transform resizes."""
    s = float(color_strength)
    jitter = v2.ColorJitter(0.8 * s, 0.8 * s, 0.8 * s, 0.2 * s) if channels == 3 else v2.ColorJitter(0.8 * s, 0.8 * s)
    return v2.Compose([v2.RandomResizedCrop(size=size, scale=(0.2, 1.0), antialias=True), v2.RandomHorizontalFlip(),
                       v2.RandomApply([jitter], p=0.8)])


class FrozenBackboneContrastive(TorchEncoder):
    """Contrastive-clustering heads trained on a frozen pretrained backbone's features of a fixed
    bank of augmented views (see the module docstring for why that equals on-line training).

    Parameters
    ----------
    n_clusters : int
    backbone : str
        ``efficientnet_lite0`` (``lite1``, ``lite2``).
    backbone_weights : dict
        The backbone's state dict (the pipeline reads it from the weights package).
    layer : str
        Backbone layer whose pooled activations are the features (default the last block).
    image_size : int, optional
        The backbone's input side (default: the variant's own).
    n_views : int
        Augmented views per image in the bank (>= 2).
    bank_seed : int
        Seed of the views' augmentations: the bank is one fixed sample, shared by every
        ``random_state`` of the heads (so seeds of the heads re-use it).
    view_bank_cache : object with ``load(name)`` and ``save(name, state, sidecar)``, optional
        Where banks and clean features are kept between runs, keyed by the images and the
        backbone settings (the pipeline passes a store for ``encoder.params.view_bank_cache=<dir>``).
    representation : {"backbone", "instance", "cluster"}
        What ``transform`` returns.
    feature_dim, instance_temperature, cluster_temperature, color_strength, epochs, lr, weight_decay,
    batch_size : as in :class:`pipeline.encoders.contrastive.ContrastiveClusteringEncoder`.
    """

    name = "contrastive"
    architecture_params = ("n_clusters", "backbone", "feature_dim", "layer")
    weight_params = ("backbone_weights",)
    store_params = ("view_bank_cache",)
    _parameter_constraints = {**COMMON_CONSTRAINTS}

    def __init__(self, n_clusters: int = 10, backbone: str = "efficientnet_lite0", backbone_weights: dict | None = None,
                 layer: str | None = None, image_size: int | None = None, n_views: int = 4, bank_seed: int = 0,
                 view_bank_cache=None,
                 representation: str = "backbone", feature_dim: int = 128, instance_temperature: float = 0.5,
                 cluster_temperature: float = 1.0, color_strength: float = 0.5, epochs: int = 50, lr: float = 3e-3,
                 weight_decay: float = 0.0, batch_size: int = 256, n_init: int = 1, random_state: int = 0,
                 device: str = "cpu", amp: bool = False, num_workers: int = 0, progress: bool = True,
                 collapse_threshold: float = 0.8, resume_from: dict | None = None, backbone_batch_size: int = 64):
        self.n_clusters = n_clusters
        self.backbone = backbone
        self.backbone_weights = backbone_weights
        self.layer = layer
        self.image_size = image_size
        self.n_views = n_views
        self.bank_seed = bank_seed
        self.view_bank_cache = view_bank_cache
        self.representation = representation
        self.feature_dim = feature_dim
        self.instance_temperature = instance_temperature
        self.cluster_temperature = cluster_temperature
        self.color_strength = color_strength
        self.epochs = epochs
        self.lr = lr
        self.weight_decay = weight_decay
        self.batch_size = batch_size
        self.n_init = n_init
        self.random_state = random_state
        self.device = device
        self.amp = amp
        self.num_workers = num_workers
        self.progress = progress
        self.collapse_threshold = collapse_threshold
        self.resume_from = resume_from
        self.backbone_batch_size = backbone_batch_size

    # ---- the frozen backbone -------------------------------------------------------------
    def _variant(self) -> str:
        return check_variant(self.backbone)

    def _feature_encoder(self, net: nn.Module) -> EfficientNetEncoder:
        return EfficientNetEncoder(net, layer=self.layer or DEFAULT_LAYER,
                                   transform=input_transform(self._variant(), self.image_size),
                                   batch_size=int(self.backbone_batch_size), device=str(self.device),
                                   progress=bool(self.progress))

    def _cache_name(self, kind: str, images: np.ndarray) -> str:
        h = hashlib.sha256(np.ascontiguousarray(images).tobytes())
        h.update(repr((images.shape, self.backbone, self.layer or DEFAULT_LAYER, self.image_size)).encode())
        if kind == "bank":
            h.update(repr((int(self.n_views), int(self.bank_seed), float(self.color_strength))).encode())
        return f"{kind}-{h.hexdigest()[:24]}"

    def _cached(self, kind: str, images: np.ndarray, compute) -> np.ndarray:
        """``compute()``, memoised in memory and in ``view_bank_cache`` under the images' key."""
        name = self._cache_name(kind, images)
        memo = self.__dict__.setdefault("_memo", {})
        if name in memo:
            return memo[name]
        store = self.view_bank_cache
        state = store.load(name) if store is not None else None
        if state is not None:
            out = state["features"].numpy()
            logger.info("contrastive: %s features from the view-bank cache (%s)", kind, name)
        else:
            out = compute()
            if store is not None:
                store.save(name, {"features": torch.from_numpy(out)},
                           {"kind": kind, "shape": list(out.shape), "backbone": self.backbone})
        memo[name] = out
        return out

    def _features(self, images: np.ndarray) -> np.ndarray:
        """Clean (unaugmented) backbone features (n, rep_dim)."""
        return self._cached("clean", images, lambda: self._feature_encoder(self.module_.backbone).transform(images))

    def _view_bank(self, images: np.ndarray) -> np.ndarray:
        """Backbone features of ``n_views`` augmented views per image: (n, n_views, rep_dim)."""
        def compute():
            aug = view_transform(images.shape[1], images.shape[-1], self.color_strength)
            encoder = self._feature_encoder(self.module_.backbone)
            state = torch.random.get_rng_state()
            torch.manual_seed(int(self.bank_seed))  # torchvision's v2 transforms draw from torch's global RNG
            try:
                bank = []
                for v in range(int(self.n_views)):
                    views = np.stack([aug(torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1))
                                      .permute(1, 2, 0).numpy() for img in images])
                    logger.info("contrastive: backbone features of augmented view %d/%d", v + 1, self.n_views)
                    bank.append(encoder.transform(views))
            finally:
                torch.random.set_rng_state(state)
            return np.stack(bank, axis=1)

        return self._cached("bank", images, compute)

    # ---- TorchEncoder hooks ---------------------------------------------------------------
    def _prepare(self, X, fitting: bool) -> np.ndarray:
        if self.representation not in REPRESENTATIONS:
            raise InvalidInputError(f"encoder.params.representation={self.representation!r}; choose one of "
                                    f"{list(REPRESENTATIONS)}.")
        if int(self.n_views) < 2:
            raise InvalidInputError(f"encoder.params.n_views={self.n_views}: the heads need at least 2 views per image.")
        check_channels(X)
        arr = np.asarray(X)
        if arr.dtype != np.uint8:
            raise InvalidInputError(f"contrastive heads need uint8 images, got {arr.dtype}.")
        if fitting:
            self.input_shape_ = tuple(int(s) for s in arr.shape[1:])
        return arr

    def _architecture(self) -> dict:
        return {"encoder": self.name, "backbone": self.backbone, "n_clusters": int(self.n_clusters),
                "feature_dim": int(self.feature_dim), "layer": self.layer or DEFAULT_LAYER,
                "input_shape": list(self.input_shape_)}

    def _build_module(self) -> Heads:
        net = efficientnet_lite(self._variant())
        with torch.no_grad():
            probe = self._feature_encoder(net)
            probe.progress = False
            rep_dim = probe.transform(np.zeros((1, 32, 32, 3), np.uint8)).shape[1]
        return Heads(net, rep_dim, int(self.n_clusters), int(self.feature_dim))

    def _fit_single(self, data: np.ndarray, generator: torch.Generator, resume: bool) -> None:
        if not resume:
            if not self.backbone_weights:
                raise InvalidInputError(f"contrastive heads on {self.backbone} need its pretrained weights "
                                        "(encoder.params.backbone_weights); the pipeline reads them from the weights "
                                        "package.")
            net = self._build_module()
            state = self.backbone_weights.get("state_dict", self.backbone_weights)
            from pipeline.encoders.efficientnet_lite import map_state_dict

            net.backbone.load_state_dict(map_state_dict(state, net.backbone))
            self.module_ = net.to(self.device_)
        net = self.module_
        feats = torch.from_numpy(self._view_bank(data))
        n, n_views = feats.shape[0], feats.shape[1]
        params = list(net.instance_projector.parameters()) + list(net.cluster_projector.parameters())
        opt = self._make_optimizer(params, float(self.lr))
        batch = min(int(self.batch_size), n)

        def run_epoch(epoch):
            net.train()
            order = torch.randperm(n, generator=generator)
            total, count, labels = 0.0, 0, []
            for start in range(0, n - batch + 1, batch):  # drop_last, as the authors' loader
                idx = order[start:start + batch]
                a = torch.randint(0, n_views, (len(idx),), generator=generator)
                b = (a + torch.randint(1, n_views, (len(idx),), generator=generator)) % n_views  # another view
                h_i, h_j = feats[idx, a].to(self.device_), feats[idx, b].to(self.device_)

                def compute_loss():
                    z, c = net(torch.cat([h_i, h_j]))
                    k = len(idx)
                    return paired_loss(z, c, k, self.instance_temperature, self.cluster_temperature), c[:k]

                loss, c_i = self._optimise(opt, compute_loss)
                total += loss * len(idx)
                count += len(idx)
                labels.append(c_i.argmax(1).detach().cpu().numpy())
            return total / max(count, 1), np.concatenate(labels)

        self._run_epochs(self.main_phase, int(self.epochs), run_epoch)

    @torch.no_grad()
    def embed_all(self, images: np.ndarray) -> dict[str, np.ndarray]:
        """backbone (n, rep_dim), instance (n, feature_dim), cluster (n, K) of clean images, float32."""
        check_fitted(self)
        h = torch.from_numpy(self._features(images)).to(self.device_)
        z, c = self.module_.eval()(h)
        return {"backbone": h.cpu().numpy(), "instance": z.cpu().numpy(), "cluster": c.cpu().numpy()}

    def _embed(self, data: np.ndarray) -> np.ndarray:
        return self.embed_all(data)[self.representation].astype(np.float32)

    def _assign(self, data: np.ndarray) -> np.ndarray:
        return self.embed_all(data)["cluster"].argmax(1).astype(np.int64)
