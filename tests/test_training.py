"""helpers.teaching.training: the small training loop of lessons 01 and 04b, and the one step of lessons 04 and 04b."""

import pytest
import torch

from helpers.teaching.data import load_digits
from helpers.models import digits_cnn, digits_mlp
from helpers.teaching.training import one_step, train


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


def test_one_step_offloaded_and_checkpointed_gives_the_baseline_gradients_and_leaves_the_reference():
    """Lesson 04b's correctness check of offloading, on the digits CNN: bit-identical, as lesson 04 asserts for
    checkpointing; the reentrant trap loses the gradients of what it checkpoints; the reference is not trained."""
    torch.manual_seed(0)
    reference = digits_cnn()
    before = [p.detach().clone() for p in reference.parameters()]
    x, y = torch.randn(16, 64), torch.randint(0, 10, (16,))
    base_loss, base = one_step(reference, x, y)
    for kw in ({"offload": True}, {"checkpoint": 2, "freeze_bn_stats": True, "offload": True}):
        loss, model = one_step(reference, x, y, **kw)
        assert loss == base_loss, kw
        assert all(torch.equal(p.grad, q.grad) for p, q in zip(model.parameters(), base.parameters())), kw
    with pytest.warns(UserWarning, match="None of the inputs have requires_grad"):   # the trap, on purpose
        _, trapped = one_step(reference, x, y, checkpoint=2, reentrant=True)
    assert any(p.grad is None for p in trapped.parameters())
    amp_loss, _ = one_step(reference, x, y, amp=True)
    assert amp_loss != base_loss and abs(amp_loss - base_loss) / base_loss < 0.05
    assert all(torch.equal(p, q) and p.grad is None for p, q in zip(reference.parameters(), before))
    with pytest.raises(ValueError, match="non-reentrant"):
        one_step(reference, x, y, checkpoint=2, reentrant=True, freeze_bn_stats=True)
