"""Split allocated memory into the categories of the ZeRO paper.

Introduced in lesson 03.  Rajbhandari et al., "ZeRO: Memory Optimizations
Toward Training Trillion Parameter Models" (2020), section 3, splits training
memory into *model states* (parameters, gradients, optimizer states) and
*residual states* (activations, temporary buffers, fragmentation).  A traced
step labels each storage it saw with one category:

* ``parameters``: the model's parameters and buffers (BatchNorm statistics);
* ``gradients``: the ``.grad`` tensors of the parameters;
* ``optimizer_states``: everything in ``optimizer.state`` (momentum, Adam's
  two moments, step counters);
* ``input``: the input batch and its targets (the data itself; conv1 also
  saves the batch for backward, but it is counted here);
* ``activations``: tensors autograd saved for backward (including tensors
  recomputed for backward under activation checkpointing);
* ``other``: everything else alive: the loss, gradients of
  activations flowing through backward, temporary buffers.  On a GPU it also
  holds what the storage tracker cannot see (cuDNN/cuBLAS workspaces).

A storage has the first category that applies, in the order above.
"""

from __future__ import annotations

CATEGORIES = ("parameters", "gradients", "optimizer_states", "input", "activations", "other")

#: One colour per category, shared by the figures (plots.py) and the widget.
CATEGORY_COLORS = {
    "parameters": "#4c72b0",
    "gradients": "#dd8452",
    "optimizer_states": "#8172b3",
    "input": "#937860",
    "activations": "#55a868",
    "other": "#c7c7c7",
}


def label_storages(
    sizes: dict[int, int],
    parameters: set[int],
    gradients: set[int],
    optimizer_states: set[int],
    inputs: set[int],
    activations: set[int],
) -> dict[int, str]:
    """Give every storage serial in ``sizes`` one category from :data:`CATEGORIES`.

    Args:
        sizes: serial -> bytes, as :attr:`helpers.memory.StorageTracker.sizes`.
        parameters, gradients, optimizer_states, inputs, activations: serials known to
            belong to each category; a serial in several sets gets the first.

    Returns:
        serial -> category name.
    """
    labels = {}
    for serial in sizes:
        if serial in parameters:
            labels[serial] = "parameters"
        elif serial in gradients:
            labels[serial] = "gradients"
        elif serial in optimizer_states:
            labels[serial] = "optimizer_states"
        elif serial in inputs:
            labels[serial] = "input"
        elif serial in activations:
            labels[serial] = "activations"
        else:
            labels[serial] = "other"
    return labels


def bytes_by_category(serials, sizes: dict[int, int], labels: dict[int, str]) -> dict[str, int]:
    """Sum the bytes of ``serials`` per category.

    Args:
        serials: storage serials alive at some moment.
        sizes: serial -> bytes.
        labels: serial -> category, from :func:`label_storages`.

    Returns:
        A dict with every name of :data:`CATEGORIES` as key, bytes as value.
    """
    totals = dict.fromkeys(CATEGORIES, 0)
    for serial in serials:
        totals[labels[serial]] += sizes[serial]
    return totals
