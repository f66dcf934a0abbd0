"""helpers.teaching.training: the small training loop of lessons 01 and 04."""

import pytest

from helpers.teaching.data import load_digits
from helpers.models import digits_mlp
from helpers.teaching.training import train


def test_training_is_seeded_and_checked():
    data = load_digits()
    _, a = train(digits_mlp, data, 128, 2)
    _, b = train(digits_mlp, data, 128, 2)
    assert a.train_loss == b.train_loss and a.updates == [12, 24] and a.samples_seen == [1437, 2874]
    assert a.train_loss[1] < a.train_loss[0]
    with pytest.raises(ValueError, match="batch_size"):
        train(digits_mlp, data, 0, 1)
    with pytest.raises(ValueError, match=r"^batch_size must be an integer from 1 to 1437 \(the training set\), "
                                         r"got 1438$"):
        train(digits_mlp, data, 1438, 1)
    for epochs in (0, 1.5, True):
        with pytest.raises(ValueError, match=rf"^epochs must be an integer >= 1, got {epochs!r}$"):
            train(digits_mlp, data, 128, epochs)
