"""vLLM's profile run of a deep model, written exactly from the same run traced with a few layers (lesson 10).

:func:`helpers.serving.vllm_startup` needs two figures of the profile run (:mod:`helpers.vllm_profile`): the weights
placed, and the peak allocated above what was allocated before the run.  The run is a decoder's forward pass, layer
after layer, then the head and the sampler; under ``torch.inference_mode()`` every layer makes and frees the same
storages as the one before it.  Its allocation log (:class:`helpers.engine.counting.LogEntry`) read as the change of
each entry, ``(kind, bytes)``, and cut where each decoder layer starts (a forward pre-hook on each) and where the last
one ends, reads::

    before   the embedding, the rotary tables (the same at any depth)
    head     layers 0 .. EDGE-1     (the first layers may run unlike the others: Hugging Face keeps the first
                                     layer's input to the end of its forward pass)
    middle   one layer, repeated    (the same changes in every middle layer)
    tail     the last EDGE layers
    after    the final norm, the head, the sampler

Traced with :data:`DEPTHS` layers (3 and 4), both logs must cut into the same ``before``, ``head``, ``tail`` and
``after`` and one ``middle`` that every middle layer of both repeats (else :class:`NotRepeated`); the log of ``L``
layers is then ``before + head + middle × (L − 2·EDGE) + tail + after`` (:func:`write_deltas`), and its peak is the
highest running sum of its changes (:func:`peak_of`).  The weights and the parameters grow by the same amount
with each layer (every layer holds the same shapes): written from the two depths by that step.

This is the training step's method (:mod:`helpers.depth`, which also keeps serials, storages and events to write a whole
profile), reduced to what the profile run's two figures need: the changes, in order.  ``tests/test_vllm_written.py``
checks it against the full trace to the byte (models with and without a tied head, tensor and pipeline parallelism,
4-bit, 8-bit and fp8 weights, V0's run).  Where it does not apply, the run is traced in full (:func:`applies`).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

from .shallow import NotRepeated

__all__ = ["DEPTHS", "EDGE", "MIN_LAYERS", "NotRepeated", "TracedRun", "applies", "peak_of", "write_deltas",
           "written_run"]

#: The layers at each end that may run unlike the others.  In a forward pass under ``torch.inference_mode()`` a layer
#: frees only its own temporaries and its input (the output of the layer before), but the first layer's input (the
#: embedding's output, or the stage's input) is kept to the end of the pass: the first layer frees nothing made before
#: it, and the last one's input is freed after it ends.  A run where one edge layer is not enough is caught by
#: :func:`written_run`'s check, and traced in full.  (The training step's :data:`helpers.depth.EDGE` is 2: its backward
#: pass frees what a layer two before made.)
EDGE = 1
#: The depths traced: one edge layer at each end and one or two middle layers between them.
DEPTHS = (2 * EDGE + 1, 2 * EDGE + 2)
#: Below this many layers the run is traced in full.  The two shallow runs (3 and 4 layers, each built, placed and
#: sampled) took 0.36-0.39 s of CPU for an 8B model at 8,192 tokens; a full trace 0.20 s with 4 layers, 0.43 with 8,
#: 0.62 with 16 (a pipeline stage of Llama-3.1 8B, measured on the 2-core machine, ``benchmarks/serving_startup.py``'s
#: settings): from about 10 layers writing is faster.
MIN_LAYERS = 12


@dataclass(frozen=True)
class TracedRun:
    """One traced profile run (:func:`helpers.vllm_profile.traced_profile_run`), as this module reads it.

    Attributes:
        depth: its decoder layers.
        deltas: each entry of the allocation log from the run's start (the peak's reset) to where the peak is read,
            as ``(kind, bytes)``: ``"alloc"`` positive, ``"free"`` negative, ``"resize"`` either.
        starts, ends: the position in ``deltas`` where each decoder layer's forward pass starts and ends, in order.
        parameters, weights: the parameters and the weight bytes the rank holds.
        peak: the peak allocated above what was allocated at the start, traced.
    """

    depth: int
    deltas: tuple[tuple[str, int], ...]
    starts: tuple[int, ...]
    ends: tuple[int, ...]
    parameters: int
    weights: int
    peak: int


def applies(layers: int, blocks_differ: str | None) -> str | None:
    """Why a profile run of ``layers`` decoder layers is traced in full rather than written, or None when it is
    written: its layers do not all run alike (``blocks_differ``, :class:`helpers.models.ModelSpec`), or they are
    fewer than :data:`MIN_LAYERS`."""
    if blocks_differ:
        return blocks_differ
    if layers < MIN_LAYERS:
        return f"below {MIN_LAYERS} layers, two shallow traces cost as much"
    return None


def peak_of(deltas) -> int:
    """The highest running sum of ``deltas`` (``(kind, bytes)`` pairs), 0 when none is positive: the peak above the
    start, as :meth:`helpers.engine.counting.StorageTracker.reset_peak` starts it."""
    return max(0, *accumulate(d for _, d in deltas)) if deltas else 0


def _pieces(run: TracedRun) -> tuple[tuple, list[tuple], tuple]:
    """``(before, layers, after)`` of ``run``: its changes before the first layer starts, each layer's from its start
    to the next one's (the last: to its end), and those after the last layer ends.

    Raises:
        NotRepeated: if the layers did not each run once, in order.
    """
    starts, ends, d = run.starts, run.ends, run.depth
    if len(starts) != d or len(ends) != d or any(not s <= e for s, e in zip(starts, ends)) or any(
            not e <= s for e, s in zip(ends, starts[1:])):
        raise NotRepeated(f"the {d} layers did not each run once, in order")
    bounds = [*starts, ends[-1]]
    return (run.deltas[:starts[0]], [run.deltas[a:b] for a, b in zip(bounds, bounds[1:])],
            run.deltas[ends[-1]:])


@dataclass(frozen=True)
class Template:
    """What :func:`template` reads from two shallow runs: the changes before the layers, in the first and last
    :data:`EDGE` layers, in one middle layer, and after the layers."""

    before: tuple
    head: tuple
    middle: tuple
    tail: tuple
    after: tuple


def template(a: TracedRun, b: TracedRun) -> Template:
    """The :class:`Template` of two runs of the same model at different depths, each of at least ``2·EDGE + 1``
    layers.

    Raises:
        NotRepeated: where they differ outside the layers or in an edge layer, or where two middle layers differ.
    """
    (before, layers_a, after), (before_b, layers_b, after_b) = _pieces(a), _pieces(b)
    if min(a.depth, b.depth) < 2 * EDGE + 1 or a.depth == b.depth:
        raise NotRepeated(f"two depths of at least {2 * EDGE + 1} layers are needed, got {a.depth} and {b.depth}")
    if before != before_b or after != after_b:
        raise NotRepeated("the runs differ before or after the layers")
    if layers_a[:EDGE] != layers_b[:EDGE] or layers_a[-EDGE:] != layers_b[-EDGE:]:
        raise NotRepeated("the runs differ in an edge layer")
    middles = {m for layers in (layers_a, layers_b) for m in layers[EDGE:-EDGE]}
    if len(middles) != 1:
        raise NotRepeated("two middle layers differ")
    return Template(before, tuple(layers_a[:EDGE]), middles.pop(), tuple(layers_a[-EDGE:]), after)


def write_deltas(t: Template, layers: int) -> list[tuple[str, int]]:
    """The changes of the run with ``layers`` decoder layers (at least ``2·EDGE``), in order."""
    out = list(t.before)
    for piece in (*t.head, *([t.middle] * (layers - 2 * EDGE)), *t.tail):
        out.extend(piece)
    return [*out, *t.after]


def written_run(a: TracedRun, b: TracedRun, layers: int) -> tuple[int, int, int]:
    """(parameters, weight bytes, activation peak bytes) of the profile run of ``layers`` decoder layers, written from
    the same run traced at two depths (:func:`template`, :func:`write_deltas`); the parameters and weights step by
    the same amount per layer.  The template must first write both traced runs again: their logs' changes entry for
    entry, and their traced peaks.

    Raises:
        NotRepeated: where the traced runs do not repeat layer by layer (then the run is traced in full).
    """
    t = template(a, b)
    for run in (a, b):
        if tuple(write_deltas(t, run.depth)) != run.deltas or peak_of(run.deltas) != run.peak:
            raise NotRepeated(f"the template does not write the {run.depth}-layer run again")
    low, high = sorted((a, b), key=lambda r: r.depth)

    def at(field: str) -> int:  # every layer holds the same shapes (alike layers: helpers.vllm_profile.profile_run)
        x, y = getattr(low, field), getattr(high, field)
        return y + (y - x) // (high.depth - low.depth) * (layers - high.depth)

    return at("parameters"), at("weights"), peak_of(write_deltas(t, layers))
