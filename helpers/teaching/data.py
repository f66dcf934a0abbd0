"""Real data for the lessons, offline by default (lessons 01, 04b).

:func:`load_digits`: scikit-learn's 1,797 8x8 digits, shipped inside the
package (what the lessons and tests use); :func:`load_mnist`: MNIST through
``torchvision.datasets.MNIST``, downloaded only when asked.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class Split(NamedTuple):
    """A classification data set split in two: ``x_*`` ``(n, features)`` float32 in [0, 1], ``y_*`` ``(n,)`` int64 labels."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor


def load_digits(test_fraction: float = 0.2, seed: int = 0) -> Split:
    """scikit-learn's 8x8 digits, 64 features in [0, 1], split stratified (1,437 / 360 by default).

    https://scikit-learn.org/stable/datasets/toy_dataset.html#digits-dataset; ``seed`` fixes the split.

    Raises:
        ValueError: if ``test_fraction`` is not in (0, 1).
    """
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be between 0 and 1, got {test_fraction!r}")
    from sklearn.datasets import load_digits as sklearn_digits
    from sklearn.model_selection import train_test_split

    digits = sklearn_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0  # pixel values are 0..16
    y = torch.tensor(digits.target, dtype=torch.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=test_fraction, random_state=seed, stratify=y)
    return Split(x_tr, y_tr, x_te, y_te)


def load_mnist(root: str = "data", download: bool = False) -> Split:
    """MNIST's 60,000 training and 10,000 test images, flattened to 784 features in [0, 1].

    Args:
        root: folder that holds (or will hold) the ``MNIST`` files.
        download: fetch the files when they are missing (needs the network).

    Raises:
        FileNotFoundError: if the files are missing and ``download`` is False.
    """
    from torchvision.datasets import MNIST

    try:
        parts = [MNIST(root, train=train, download=download) for train in (True, False)]
    except RuntimeError as e:  # torchvision: "Dataset not found. You can use download=True ..."
        raise FileNotFoundError(f"MNIST is not in {root!r}; call load_mnist(download=True) when online") from e
    tensors = []
    for part in parts:
        tensors += [part.data.reshape(len(part), -1).float() / 255.0, part.targets.long()]
    return Split(*tensors)
