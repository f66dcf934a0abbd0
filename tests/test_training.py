"""helpers.teaching.training: the small training loop of lessons 01 and 04b, and the one step of lessons 04 and 04b."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from helpers.models import digits_cnn, digits_mlp, sequential_form
from helpers.techniques import Checkpointed
from helpers.teaching.data import Split, load_digits
from helpers.teaching.training import evaluate, one_step, train


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


def _textbook_train(make_model, data, batch_size, epochs, lr=0.05, seed=0, amp=False, checkpoint=0):
    """The loop as a learner writes it, and as ``train`` wrote it until it was made faster: a shuffling
    ``DataLoader`` over a ``TensorDataset``, ``torch.optim.SGD``, autocast entered at every step (disabled without
    ``amp``). Returns the model and each epoch's training loss and test accuracy, as ``train`` records them."""
    torch.manual_seed(seed)
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    runner = Checkpointed(sequential_form(model), checkpoint, freeze_bn_stats=True) if checkpoint else model
    loader = DataLoader(TensorDataset(data.x_train, data.y_train), batch_size=batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(seed))
    losses, accuracies = [], []
    for _ in range(epochs):
        for xb, yb in loader:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
                loss = F.cross_entropy(runner(xb), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        losses.append(evaluate(model, data.x_train, data.y_train)[0])
        accuracies.append(evaluate(model, data.x_test, data.y_test)[1])
    return model, losses, accuracies


@pytest.mark.parametrize("make_model, first, batch_size, kw", [
    (digits_mlp, 200, 1, {}),                              # batch 1, lesson 01's slowest run, on 200 samples
    (digits_mlp, None, 16, {"seed": 3}),                   # a last batch of 13 (1,437 = 89 x 16 + 13)
    (digits_cnn, 300, 64, {"amp": True, "checkpoint": 4}),   # lesson 04b's AMP + checkpoint 4; 300 = 4 x 64 + 44
], ids=["mlp, batch 1", "mlp, batch 16, seed 3", "cnn, AMP + checkpoint 4"])
def test_train_gives_the_textbook_loops_results_to_the_last_bit(make_model, first, batch_size, kw):
    """``train`` draws its order from a ``DataLoader`` over the indices, indexes each batch out as one tensor and
    writes SGD's update out: every epoch's loss and accuracy, and every trained weight, are the textbook loop's, bit
    for bit. Two epochs: the second shows that each epoch's order is the loader's too. Batch 1 and the CNN on the
    first 200 and 300 training samples (the whole set would take seconds; the same code runs at any length)."""
    data = load_digits()
    if first:
        data = Split(data.x_train[:first], data.y_train[:first], data.x_test, data.y_test)
    model, history = train(make_model, data, batch_size, 2, **kw)
    reference, losses, accuracies = _textbook_train(make_model, data, batch_size, 2, **kw)
    assert history.train_loss == losses and history.test_accuracy == accuracies
    assert all(torch.equal(p, q) for p, q in zip(model.state_dict().values(), reference.state_dict().values()))
    assert history.updates[-1] == 2 * len(range(0, len(data.x_train), batch_size))
