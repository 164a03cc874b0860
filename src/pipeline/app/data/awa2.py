"""Animals with Attributes 2 in its standard directory layout.

``<root>/Animals_with_Attributes2/`` (or ``<root>`` itself) holding ``classes.txt``
("1\\tantelope" per line), ``predicates.txt``, ``predicate-matrix-binary.txt`` and
``JPEGImages/<class name>/*.jpg``. Classes are chosen by 0-based index into classes.txt.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pipeline.app.data.dataset import Dataset, reads
from pipeline.app.data.loading import data_root, missing_data_error
from pipeline.app.data.vision import resize_rgb

LAYOUT = ("<root>/Animals_with_Attributes2/{classes.txt, predicates.txt, predicate-matrix-binary.txt, "
          "JPEGImages/<class>/*.jpg}")


def find_awa2_dir(root: Path) -> Path:
    for cand in (root / "Animals_with_Attributes2", root):
        if (cand / "classes.txt").exists() and (cand / "JPEGImages").is_dir():
            return cand
    raise missing_data_error("AwA2", root, LAYOUT + " (download it from the AwA2 website; there is no automatic "
                             "download)", downloadable=False)


def read_class_names(base: Path) -> list[str]:
    return [line.split()[-1] for line in (base / "classes.txt").read_text().splitlines() if line.strip()]


@reads("root")
def load_awa2(spec: dict, paths: dict, random_state: int = 0, image_size: int = 64) -> Dataset:
    """AwA2 images (uint8 (n, S, S, 3), S = params.image_size); y = original class index."""
    from PIL import Image

    base = find_awa2_dir(data_root(spec, paths, "awa2"))
    names = read_class_names(base)
    classes = list(spec.get("classes") or range(len(names)))
    size = int(image_size)
    images, labels = [], []
    for c in classes:
        files = sorted((base / "JPEGImages" / names[c]).glob("*.jpg"))
        for f in files:
            with Image.open(f) as im:
                images.append(resize_rgb(im, size))
            labels.append(c)
    if not images:
        raise missing_data_error(f"AwA2 images of classes {classes}", base, LAYOUT, downloadable=False)
    return Dataset(name="awa2", X=np.stack(images), y=np.asarray(labels, dtype=np.int64), kind="image",
                   class_names=names, meta={"source": str(base), "predicates_file": str(base / "predicates.txt")})
