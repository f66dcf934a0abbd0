"""helpers.teaching.data: the digits ship with scikit-learn; MNIST is never downloaded unasked."""

import pytest

from helpers.teaching.data import load_digits, load_mnist
from helpers.models import digits_mlp, mlp


def test_digits_data_and_mlp():
    data = load_digits()
    assert [tuple(t.shape) for t in data] == [(1437, 64), (1437,), (360, 64), (360,)]
    assert 0 <= float(data.x_train.min()) and float(data.x_train.max()) <= 1
    assert sorted(set(data.y_test.tolist())) == list(range(10))
    assert sum(p.numel() for p in digits_mlp().parameters()) == 64 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10
    with pytest.raises(ValueError, match="test_fraction"):
        load_digits(test_fraction=1.0)
    with pytest.raises(ValueError, match="layer sizes"):
        mlp(64, (0,), 10)


def test_mnist_is_never_downloaded_unasked(tmp_path):
    with pytest.raises(FileNotFoundError, match="download=True"):
        load_mnist(str(tmp_path))


def test_the_test_fraction_is_checked():
    with pytest.raises(ValueError, match="test_fraction"):
        load_digits(test_fraction=1.5)
