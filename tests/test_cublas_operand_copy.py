"""helpers.engine.cuda_rules.cublas_operand_copy: the copy a GPU makes of a matrix cuBLAS cannot read in place.

The rule of ``prepare_matrix_for_cublas`` (``ATen/native/cuda/cuBlasCommonArgs.h``
in the pinned wheel): a 2-D operand of ``mm``/``addmm`` is read in place when it
is dense, or when one dimension has stride 1 and the other a stride at least its
size; any other is cloned to a contiguous matrix for as long as the product runs.
"""

import torch
from torch import nn

from helpers import profile_step
from helpers.engine.cuda_rules import cublas_operand_copy


def test_which_matrices_are_copied():
    a = torch.ones(64, 1000)
    assert cublas_operand_copy(a) == 0 and cublas_operand_copy(a.t()) == 0  # dense, either way round
    assert cublas_operand_copy(a[:, :10]) == 0  # rows of 1000 with 10 used: stride (1000, 1) is readable
    assert cublas_operand_copy(a[::2]) == 0  # every other row: stride (2000, 1)
    assert cublas_operand_copy(a[:, ::2]) == 64 * 500 * 4  # every other column: no dimension of stride 1
    assert cublas_operand_copy(torch.ones(()).expand(64, 1000)) == 64 * 1000 * 4  # a gradient of .sum()
    assert cublas_operand_copy(torch.ones(64, 3, 5)) == 0  # only matrices


def test_a_sum_loss_copies_its_expanded_gradient_in_backward():
    """Linear(256, 8) then Linear(8, 1000) on 64 samples, loss = output.sum(): backward multiplies
    the last layer's (64, 1000) gradient of strides (0, 0) twice (for its input's and its weight's
    gradients), each time through a dense copy that lives during the product."""
    def model():
        return nn.Sequential(nn.Linear(256, 8), nn.Linear(8, 1000))

    step = profile_step(model, 64, input_shape=(256,), loss=lambda y: y.sum(),
                        optimizer="sgd", device="simulated")
    log = step.allocation_log
    copies = [step.storages[a.serial] for a, b in zip(log, log[1:])  # allocated, then freed at once
              if a.kind == "alloc" and b.kind == "free" and a.serial == b.serial]
    assert [(c.shape, c.nbytes, c.category) for c in copies] == [((64, 1000), 256_000, "other"),  # grad_input's
                                                                 ((1000, 64), 256_000, "other")]  # grad_weight's
    assert copies[1].serial in step.peak_serials  # the peak is reached during the weight's product
    dense = profile_step(model, 64, input_shape=(256,), loss=lambda y: (y * y).sum(),
                         optimizer="sgd", device="simulated")
    log = dense.allocation_log
    assert not [a for a, b in zip(log, log[1:]) if a.kind == "alloc" and b.kind == "free" and a.serial == b.serial]
