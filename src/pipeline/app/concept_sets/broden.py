"""BRODEN concept examples from ``index.csv`` + ``label.csv`` (Bau et al. 2017).

``index.csv`` has one row per image with columns ``image, split, ih, iw, sh, sw`` and one
column per category. Pixel categories (object, part, material, color) hold ``;``-separated
segmentation PNGs whose label at each pixel is ``R + 256·G``; image-level categories
(scene, texture) hold ``;``-separated label numbers. ``label.csv`` maps numbers to names
(columns ``number, name, category, ...``, category like ``object(1203);part(12)``).

A concept is positive on every image whose annotation contains its label anywhere and
negative on the others; concepts with fewer than ``min_positives`` positives drop out.
"""

from __future__ import annotations

import csv
import logging
import re
from pathlib import Path

import numpy as np
from pipeline.progress import tqdm

from pipeline.app.concept_sets.manifest import resolve_root
from pipeline.app.data.readers import read_images
from pipeline.concepts.sets import ConceptExamples
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)

PIXEL_CATEGORIES = ("object", "part", "material", "color")
IMAGE_CATEGORIES = ("scene", "texture")


def read_labels(root: Path) -> dict[int, tuple[str, list[str]]]:
    """label number -> (name, categories) from label.csv."""
    out = {}
    with open(root / "label.csv", newline="") as fh:
        for row in csv.DictReader(fh):
            cats = re.findall(r"([a-z]+)\(", row.get("category", ""))
            out[int(row["number"])] = (row["name"], cats)
    return out


def _png_labels(path: Path) -> np.ndarray:
    from PIL import Image

    arr = np.asarray(Image.open(path).convert("RGB"), dtype=np.int64)
    return np.unique(arr[..., 0] + 256 * arr[..., 1])


def read_presence(root: Path, categories, max_rows: int | None = None, progress: bool = True):
    """Image paths and, per label number, the sorted row indices of images containing it."""
    unknown = set(categories) - set(PIXEL_CATEGORIES + IMAGE_CATEGORIES)
    if unknown:
        raise InvalidInputError(f"unknown BRODEN categories {sorted(unknown)}; "
                                f"choose from {PIXEL_CATEGORIES + IMAGE_CATEGORIES}.")
    images, hits = [], {}
    with open(root / "index.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    for i, row in enumerate(tqdm(rows[:max_rows], desc="BRODEN index", disable=not progress)):
        images.append(row["image"])
        found: set[int] = set()
        for cat in categories:
            for item in filter(None, (row.get(cat) or "").split(";")):
                if item.endswith(".png"):
                    found.update(int(v) for v in _png_labels(root / "images" / item))
                else:
                    found.add(int(item))
        found.discard(0)  # 0 = unlabelled pixels
        for lab in found:
            hits.setdefault(lab, []).append(i)
    return images, {k: np.asarray(v) for k, v in hits.items()}


def broden_examples(spec: dict, dataset) -> ConceptExamples:
    """Balanced BRODEN examples for every concept with enough positives.

    Spec keys: ``categories``, ``min_positives``, ``max_positives`` (positives sampled per
    concept), ``n_negatives`` (shared pool of random images), ``max_index_rows``,
    ``seed``, plus ``root`` / ``download`` for the files.
    """
    root = resolve_root(spec)
    labels_info = read_labels(root)
    cats = list(spec.get("categories") or PIXEL_CATEGORIES + IMAGE_CATEGORIES)
    paths, hits = read_presence(root, cats, spec.get("max_index_rows"))
    min_pos = int(spec.get("min_positives", 100))
    kept = sorted(k for k, v in hits.items() if v.size >= min_pos and k in labels_info)
    n_dropped = sum(1 for v in hits.values() if v.size < min_pos)
    log.info("BRODEN: %d concepts with >= %d positives kept, %d dropped", len(kept), min_pos, n_dropped)
    if not kept:
        raise InvalidInputError(f"no BRODEN concept has >= {min_pos} positive images in categories {cats}; "
                                "lower concepts.min_positives or read more of index.csv.")
    rng = np.random.default_rng(spec.get("seed", 0))
    max_pos = int(spec.get("max_positives", 150))
    pool = set(rng.choice(len(paths), size=min(len(paths), int(spec.get("n_negatives", 1000))), replace=False).tolist())
    for k in kept:
        pool.update(rng.choice(hits[k], size=min(max_pos, hits[k].size), replace=False).tolist())
    pool = np.array(sorted(pool))
    labels = np.column_stack([np.isin(pool, hits[k]) for k in kept]).astype(float)
    names, seen = [], set()
    for k in kept:
        name, kcats = labels_info[k]
        if name in seen:
            name = f"{name} ({kcats[0] if kcats else k})"
        seen.add(name)
        names.append(name)
    size = tuple(dataset.X.shape[1:3]) if dataset.kind == "image" else (224, 224)
    images = read_images([root / "images" / paths[i] for i in pool], f"BRODEN ({root})", size=size, channels=3)
    return ConceptExamples(spec["name"], names, labels, inputs=images, input_kind="image",
                           meta={"root": str(root), "n_images": len(pool), "min_positives": min_pos,
                                 "n_dropped": n_dropped})
