"""Image preprocessing and the two-view augmentations of contrastive clustering (Li et al. 2021).

Views: random resized crop, horizontal flip, colour jitter (brightness/contrast/saturation
0.8 s, hue 0.2 s, applied with p = 0.8), random greyscale (p = 0.2), optional Gaussian
blur; evaluation: resize to ``size x size``. Images enter as uint8 (H, W, C) arrays.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torchvision.transforms import v2

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _tail(normalize: str) -> list:
    tail = [v2.ToDtype(torch.float32, scale=True)]
    if normalize == "imagenet":
        tail.append(v2.Normalize(IMAGENET_MEAN, IMAGENET_STD))
    return tail


def train_transform(size: int, color_strength: float = 0.5, blur: bool = False, normalize: str = "none") -> v2.Compose:
    """One random view of a uint8 (C, H, W) image tensor -> float32 (C, size, size)."""
    s = float(color_strength)
    steps = [
        v2.RandomResizedCrop(size=size, antialias=True),
        v2.RandomHorizontalFlip(),
        v2.RandomApply([v2.ColorJitter(0.8 * s, 0.8 * s, 0.8 * s, 0.2 * s)], p=0.8),
        v2.RandomGrayscale(p=0.2),
    ]
    if blur:
        kernel = max(3, int(0.1 * size) // 2 * 2 + 1)
        steps.append(v2.RandomApply([v2.GaussianBlur(kernel, sigma=(0.1, 2.0))], p=0.5))
    return v2.Compose(steps + _tail(normalize))


def eval_transform(size: int, normalize: str = "none") -> v2.Compose:
    """Deterministic preprocessing: resize to (size, size), scale to [0, 1], optional normalisation."""
    return v2.Compose([v2.Resize((size, size), antialias=True)] + _tail(normalize))


class ImageViews(torch.utils.data.Dataset):
    """Dataset over uint8 images (n, H, W, C) yielding ``transform`` applied ``n_views`` times.

    Returns a tuple of ``n_views`` float tensors (C, size, size) per index.
    """

    def __init__(self, images: np.ndarray, transform, n_views: int = 2):
        self.images = images
        self.transform = transform
        self.n_views = n_views

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int):
        img = torch.from_numpy(np.ascontiguousarray(self.images[index])).permute(2, 0, 1)
        return tuple(self.transform(img) for _ in range(self.n_views))


def random_shift_rotate(x: torch.Tensor, side: int, max_shift: float, max_degrees: float,
                        generator: torch.Generator) -> torch.Tensor:
    """Flattened grey ``side x side`` images (n, side**2), each shifted by up to ``max_shift``
    pixels along each axis and rotated by up to ``max_degrees`` (uniform draws from
    ``generator``, a CPU generator), bilinear, zeros outside: DEC-DA's augmentation
    (Guo et al., ACML 2018). Returns a new (n, side**2) tensor on ``x``'s device."""
    n = len(x)
    u = (torch.rand(n, 3, generator=generator, dtype=torch.float32) * 2 - 1).to(x.device)
    angle = u[:, 0] * math.radians(float(max_degrees))
    cos, sin = angle.cos(), angle.sin()
    shift = u[:, 1:] * (2.0 * float(max_shift) / side)  # pixels -> affine_grid's [-1, 1] units
    theta = torch.stack([torch.stack([cos, -sin, shift[:, 0]], 1), torch.stack([sin, cos, shift[:, 1]], 1)], 1)
    grid = F.affine_grid(theta, [n, 1, side, side], align_corners=False)
    out = F.grid_sample(x.reshape(n, 1, side, side), grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    return out.reshape(n, side * side)
