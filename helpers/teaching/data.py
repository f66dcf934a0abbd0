"""Real data for the lessons, offline by default.

Introduced in lesson 01 (mini-batching); lesson 04 trains on the same data.

* :func:`load_digits`: scikit-learn's handwritten digits (1,797 images of
  8x8 pixels, 10 classes).  The data ships inside the scikit-learn package,
  so it needs no network: this is what the lessons and tests use.
* :func:`load_mnist`: MNIST (70,000 images of 28x28) through
  ``torchvision.datasets.MNIST``, for learners who are online.  It downloads
  only when asked (``download=True``); nothing in the lessons needs it.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class Split(NamedTuple):
    """A classification data set split in two, as tensors.

    ``x_train`` is ``(n_train, features)`` float32 in [0, 1]; ``y_train`` is
    ``(n_train,)`` int64 class labels; likewise for the test part.
    """

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor


def load_digits(test_fraction: float = 0.2, seed: int = 0) -> Split:
    """scikit-learn's 8x8 digits, flattened to 64 features in [0, 1], split stratified.

    With the defaults: 1,437 training and 360 test images.  See
    https://scikit-learn.org/stable/datasets/toy_dataset.html#digits-dataset

    Args:
        test_fraction: share of the images held out for testing, in (0, 1).
        seed: seed of the split (the same seed gives the same split).

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
    x_tr, x_te, y_tr, y_te = train_test_split(
        x, y, test_size=test_fraction, random_state=seed, stratify=y)
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
        raise FileNotFoundError(
            f"MNIST is not in {root!r}; call load_mnist(download=True) when online") from e
    tensors = []
    for part in parts:
        tensors += [part.data.reshape(len(part), -1).float() / 255.0, part.targets.long()]
    return Split(*tensors)
