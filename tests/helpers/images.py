"""A small generated image-folder data set (flower_photos layout) for train_imagefolder.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

CLASSES = ("daisy", "roses", "tulips")


def class_folders(root: Path, per_class: int, seed: int) -> np.random.Generator:
    """`per_class` 44×36 JPEGs in root/<class>/, classes differing in brightness; the RNG."""
    rng = np.random.default_rng(seed)
    for c, name in enumerate(CLASSES):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            Image.fromarray((rng.random((36, 44, 3)) * 80 + c * 80).astype("uint8")).save(
                root / name / f"{i}.jpg"
            )
    return rng
