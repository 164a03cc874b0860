"""Contrastive clustering (Li et al., AAAI 2021): instance- and cluster-level contrastive heads.

A shared ResNet backbone ``f`` embeds two augmented views of each image; the instance
projector ``g_I`` gives L2-normalised features ``z`` and the cluster projector ``g_C`` a
softmax over K clusters. Loss = instance NT-Xent over the 2B rows of ``z`` (temperature
``tau_I``) + cluster NT-Xent over the 2K columns of the soft assignments (temperature
``tau_C``) minus the entropy of the cluster-size distribution of each view:
``H(Y) = log K + sum_k p_k log p_k`` is added so that uniform cluster sizes are favoured.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from pipeline.progress import tqdm

from pipeline.encoders.augment import ImageViews, eval_transform, train_transform
from pipeline.encoders.device import autocast, worker_init
from pipeline.encoders.resnet import build_backbone, load_backbone_weights
from pipeline.encoders.training import TorchEncoder, check_fitted
from pipeline.validation import InvalidInputError

logger = logging.getLogger(__name__)

MODES = ("scratch", "finetune_heads", "pretrained")
REPRESENTATIONS = ("backbone", "instance", "cluster")


def nt_xent(features: torch.Tensor, temperature: float) -> torch.Tensor:
    """Normalised-temperature cross entropy of 2N rows whose positives are ``i <-> i + N``.

    ``features`` (2N, d) must already be L2-normalised; each row's logits are its cosine
    similarities to all other rows divided by ``temperature``. Mean over the 2N rows.
    """
    n2 = features.shape[0]
    n = n2 // 2
    sim = features @ features.T / temperature
    sim = sim.masked_fill(torch.eye(n2, dtype=torch.bool, device=features.device), float("-inf"))
    targets = torch.cat([torch.arange(n, n2), torch.arange(0, n)]).to(features.device)
    return F.cross_entropy(sim, targets)


def instance_loss(z_i: torch.Tensor, z_j: torch.Tensor, temperature: float = 0.5) -> torch.Tensor:
    """Instance-level contrastive loss of two views' normalised features, each (B, d)."""
    return nt_xent(torch.cat([z_i, z_j]), temperature)


def cluster_loss(c_i: torch.Tensor, c_j: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Cluster-level contrastive loss of two views' soft assignments, each (B, K), with entropy term."""
    k = c_i.shape[1]

    def neg_entropy(c):
        p = c.sum(0) / c.sum()
        return math.log(k) + (p * torch.log(p)).sum()

    columns = F.normalize(torch.cat([c_i.T, c_j.T]), dim=1)
    return nt_xent(columns, temperature) + neg_entropy(c_i) + neg_entropy(c_j)


def projectors(rep_dim: int, n_clusters: int, feature_dim: int = 128) -> tuple[nn.Sequential, nn.Sequential]:
    """The instance projector (rep -> rep -> feature_dim) and the cluster projector
    (rep -> rep -> K, softmax) of contrastive clustering, as in the authors' code."""
    instance = nn.Sequential(nn.Linear(rep_dim, rep_dim), nn.ReLU(), nn.Linear(rep_dim, feature_dim))
    cluster = nn.Sequential(nn.Linear(rep_dim, rep_dim), nn.ReLU(), nn.Linear(rep_dim, n_clusters), nn.Softmax(dim=1))
    return instance, cluster


def paired_loss(z: torch.Tensor, c: torch.Tensor, n: int, instance_temperature: float,
                cluster_temperature: float) -> torch.Tensor:
    """Instance + cluster loss of two views stacked as rows ``[:n]`` and ``[n:]`` of ``z`` and ``c``."""
    return (instance_loss(z[:n], z[n:], float(instance_temperature))
            + cluster_loss(c[:n], c[n:], float(cluster_temperature)))


class ContrastiveClusteringNet(nn.Module):
    """Backbone + instance projector + cluster projector; parameter names match the authors' code."""

    def __init__(self, backbone: str, n_clusters: int, feature_dim: int = 128):
        super().__init__()
        self.resnet, rep_dim = build_backbone(backbone)
        self.instance_projector, self.cluster_projector = projectors(rep_dim, n_clusters, feature_dim)

    def heads(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(normalised instance features (B, feature_dim), cluster probabilities (B, K))."""
        return F.normalize(self.instance_projector(h), dim=1), self.cluster_projector(h)


def map_authors_state_dict(state: dict) -> dict:
    """Turn a checkpoint of the original Contrastive-Clustering code into our state-dict keys.

    Their files are ``{"net": state_dict, "optimizer": ..., "epoch": ...}`` (or a bare state
    dict), possibly saved from ``DataParallel`` (``module.`` prefix); the backbone is under
    ``resnet.``, the heads ``instance_projector.{0,2}`` / ``cluster_projector.{0,2}``.
    """
    if "net" in state and isinstance(state["net"], dict):
        state = state["net"]
    elif "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    out = {}
    for key, value in state.items():
        key = key[len("module."):] if key.startswith("module.") else key
        if key.startswith("resnet.fc."):
            continue
        out[key] = value
    return out


class ContrastiveClusteringEncoder(TorchEncoder):
    """Contrastive clustering on uint8 images (n, H, W, 3).

    Parameters
    ----------
    n_clusters : int
        K, outputs of the cluster projector.
    backbone : {"resnet34", "resnet18", "resnet50"}
        torchvision ResNet (paper: resnet34).
    backbone_weights : "none", a state dict, or a callable returning one
        Backbone initialisation for ``mode`` scratch / finetune_heads (see
        :func:`pipeline.encoders.resnet.load_backbone_weights`; the pipeline's
        ``backbone_weights=imagenet`` passes :class:`pipeline.app.models.weights.imagenet_weights`).
    init_checkpoint : dict, optional
        A checkpoint of the original authors' code (or a state dict with our keys), as read by
        ``torch.load``, loaded before training (modes finetune_heads / pretrained). Files are
        read by the application layer (``encoder.params.init_checkpoint=/path/checkpoint_1000.tar``).
    mode : {"scratch", "finetune_heads", "pretrained"}
        Train everything; train only the heads on a frozen backbone; or only load ``init_checkpoint``.
    train_heads : {"both", "cluster"}
        Heads trained in finetune_heads mode (paper: cluster head for CIFAR-10 subsets, both for AwA2).
    representation : {"backbone", "instance", "cluster"}
        What ``transform`` returns (backbone features for CAVs by default).
    feature_dim : int
        Instance projector output size (authors: 128).
    instance_temperature, cluster_temperature : float
        tau_I (0.5) and tau_C (1.0).
    image_size : int
        Side of the network input (authors: 224); images are resized.
    color_strength, blur, normalize
        Augmentation strength s (authors: 0.5), Gaussian blur on/off, "none" or "imagenet".
    epochs, lr, weight_decay, batch_size : training settings (authors: lr 3e-4, batch 256).
    """

    name = "contrastive"
    architecture_params = ("n_clusters", "backbone", "feature_dim")
    weight_params = ("backbone_weights", "init_checkpoint")  # given as in-memory state; the app reads files

    def __init__(self, n_clusters: int = 10, backbone: str = "resnet34", backbone_weights=None,
                 init_checkpoint: str | None = None, mode: str = "scratch", train_heads: str = "both",
                 representation: str = "backbone", feature_dim: int = 128, instance_temperature: float = 0.5,
                 cluster_temperature: float = 1.0, image_size: int = 224, color_strength: float = 0.5,
                 blur: bool = False, normalize: str = "none", epochs: int = 50, lr: float = 3e-4,
                 weight_decay: float = 0.0, batch_size: int = 256, n_init: int = 1, random_state: int = 0,
                 device: str = "auto", amp: bool = True, num_workers: int = 0, progress: bool = True,
                 collapse_threshold: float = 0.8, resume_from: dict | None = None):
        self.n_clusters = n_clusters
        self.backbone = backbone
        self.backbone_weights = backbone_weights
        self.init_checkpoint = init_checkpoint
        self.mode = mode
        self.train_heads = train_heads
        self.representation = representation
        self.feature_dim = feature_dim
        self.instance_temperature = instance_temperature
        self.cluster_temperature = cluster_temperature
        self.image_size = image_size
        self.color_strength = color_strength
        self.blur = blur
        self.normalize = normalize
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

    # ---- data -------------------------------------------------------------------------
    def _prepare(self, X, fitting: bool) -> np.ndarray:
        for key, value, allowed in (("mode", self.mode, MODES), ("representation", self.representation, REPRESENTATIONS),
                                    ("train_heads", self.train_heads, ("both", "cluster")),
                                    ("normalize", self.normalize, ("none", "imagenet"))):
            if value not in allowed:
                raise InvalidInputError(f"encoder.{key}={value!r} is not one of {list(allowed)}.")
        if isinstance(X, list):
            raise InvalidInputError("contrastive clustering needs images, got a list (texts?); use encoder=sbert.")
        arr = np.asarray(X)
        if arr.size == 0:
            raise InvalidInputError("contrastive clustering got an empty dataset (0 images); check the dataset config.")
        if arr.ndim != 4 or arr.dtype != np.uint8:
            raise InvalidInputError(
                f"contrastive clustering needs uint8 images of shape (n, height, width, 3), got {arr.dtype} {arr.shape}; "
                "use an image dataset (Dataset.kind='image') or encoder=vade/identity for tabular data.")
        if arr.shape[-1] == 1:  # greyscale (MNIST): the ResNet takes RGB, so repeat the channel
            arr = np.repeat(arr, 3, axis=-1)
        if arr.shape[-1] != 3:
            raise InvalidInputError(
                f"images have {arr.shape[-1]} channel(s) but the ResNet expects 3 (RGB) or 1 (greyscale); "
                "convert them to RGB, channels last (n, height, width, 3).")
        if min(arr.shape[1:3]) < 8:
            raise InvalidInputError(f"images of {arr.shape[1]}x{arr.shape[2]} pixels are too small (min 8x8).")
        if fitting:
            self.input_shape_ = tuple(int(s) for s in arr.shape[1:])
        elif tuple(arr.shape[1:]) != tuple(self.input_shape_):
            raise InvalidInputError(
                f"images have shape {arr.shape[1:]} (H, W, C) but the encoder was trained on {tuple(self.input_shape_)}; "
                "resize them to the training size or retrain on this data.")
        return arr

    def _architecture(self) -> dict:
        return {"encoder": self.name, "backbone": self.backbone, "n_clusters": int(self.n_clusters),
                "feature_dim": int(self.feature_dim), "input_shape": list(self.input_shape_)}

    def _build_module(self) -> ContrastiveClusteringNet:
        return ContrastiveClusteringNet(self.backbone, int(self.n_clusters), int(self.feature_dim))

    def _load_init_checkpoint(self, net: ContrastiveClusteringNet) -> None:
        raw = self.init_checkpoint
        if not isinstance(raw, Mapping):
            raise InvalidInputError(f"encoder.init_checkpoint={raw!r}: give the checkpoint as read by torch.load (a dict); "
                                    "the pipeline reads encoder.params.init_checkpoint=/path/to/checkpoint_1000.tar "
                                    "itself (pipeline.app.stores.checkpoint.read_weights).")
        path = "init_checkpoint"
        state = map_authors_state_dict(raw)
        expected = net.state_dict()
        for key in ("cluster_projector.2.weight", "instance_projector.2.weight", "resnet.conv1.weight"):
            if key in state and key in expected and state[key].shape != expected[key].shape:
                raise InvalidInputError(
                    f"{path}: {key} has shape {tuple(state[key].shape)} but the configured network needs "
                    f"{tuple(expected[key].shape)}; set encoder.n_clusters / encoder.feature_dim / encoder.backbone "
                    "to the checkpoint's values.")
        try:
            net.load_state_dict(state)
        except RuntimeError as exc:
            raise InvalidInputError(f"{path} does not fit a {self.backbone} contrastive-clustering network ({exc}); "
                                    "check encoder.backbone.") from None
        logger.info("contrastive: loaded the initial weights of init_checkpoint")

    # ---- training ---------------------------------------------------------------------
    def _fit_single(self, data: np.ndarray, generator: torch.Generator, resume: bool) -> None:
        if not resume:
            net = self._build_module()
            if self.init_checkpoint:
                self._load_init_checkpoint(net)
                self.backbone_source_ = "init_checkpoint"
            elif self.mode == "pretrained":
                raise InvalidInputError("mode='pretrained' needs encoder.init_checkpoint (a path to trained weights).")
            else:
                self.backbone_source_ = load_backbone_weights(net.resnet, self.backbone, self.backbone_weights)
            self.module_ = net.to(self.device_)
        net = self.module_
        if self.mode == "pretrained":
            return
        frozen = self.mode == "finetune_heads"
        net.resnet.requires_grad_(not frozen)
        if frozen:
            heads = [net.cluster_projector] + ([net.instance_projector] if self.train_heads == "both" else [])
            params = [p for head in heads for p in head.parameters()]
        else:
            params = list(net.parameters())
        opt = self._make_optimizer(params, float(self.lr))
        views = ImageViews(data, train_transform(int(self.image_size), self.color_strength, self.blur, self.normalize))
        loader = torch.utils.data.DataLoader(
            views, batch_size=min(int(self.batch_size), len(data)), shuffle=True, drop_last=True, generator=generator,
            num_workers=int(self.num_workers), worker_init_fn=worker_init)

        def run_epoch(epoch):
            net.train()
            if frozen:
                net.resnet.eval()  # keep BatchNorm statistics of the frozen backbone
            total, count, labels = 0.0, 0, []
            for x_i, x_j in loader:
                x_i, x_j = x_i.to(self.device_), x_j.to(self.device_)
                n = len(x_i)

                def compute_loss():
                    z, c = net.heads(net.resnet(torch.cat([x_i, x_j])).float())
                    z, c = z.float(), c.float()
                    return paired_loss(z, c, n, self.instance_temperature, self.cluster_temperature), c[:n]

                loss, c_i = self._optimise(opt, compute_loss)
                total += loss * n
                count += n
                labels.append(c_i.argmax(1).detach().cpu().numpy())
            return total / max(count, 1), np.concatenate(labels)

        self._run_epochs(self.main_phase, int(self.epochs), run_epoch)

    # ---- inference --------------------------------------------------------------------
    @torch.no_grad()
    def embed_all(self, images: np.ndarray) -> dict[str, np.ndarray]:
        """One pass over ``images``: backbone (n, rep_dim), instance (n, feature_dim), cluster (n, K), float32."""
        check_fitted(self)
        net = self.module_.eval()
        views = ImageViews(images, eval_transform(int(self.image_size), self.normalize), n_views=1)
        loader = torch.utils.data.DataLoader(views, batch_size=int(self.batch_size), shuffle=False,
                                             num_workers=int(self.num_workers))
        out = {"backbone": [], "instance": [], "cluster": []}
        for (x,) in tqdm(loader, desc="contrastive embedding", disable=not self.progress, leave=False):
            with autocast(self.device_, self.amp):
                h = net.resnet(x.to(self.device_))
            z, c = net.heads(h.float())
            for key, value in zip(out, (h, z, c)):
                out[key].append(value.float().cpu())
        return {k: torch.cat(v).numpy().astype(np.float32) for k, v in out.items()}

    def _embed(self, data: np.ndarray) -> np.ndarray:
        return self.embed_all(data)[self.representation]

    def _assign(self, data: np.ndarray) -> np.ndarray:
        return self.embed_all(data)["cluster"].argmax(1).astype(np.int64)

    def _extra_state(self) -> dict:
        return {"backbone_source": getattr(self, "backbone_source_", "")}

    def _load_extra_state(self, extra: dict) -> None:
        self.backbone_source_ = extra.get("backbone_source", "")
