"""The widgets' view: one estimate as HTML, with its verdict, and the view while one is computed.

Pure functions of their arguments; every verdict is :meth:`helpers.batch.Estimate.verdict`, the command line's rule.
The view carries its figures as data for programs (the browser test reads them): ``.gm-explorer`` has ``data-batch``,
``data-gpu``, ``data-capacity``; ``.gm-verdict`` ``data-fits`` and ``data-tight``; ``.gm-bytes`` ``data-category`` and
``data-bytes``; ``.gm-unseen`` ``data-line`` (and ``data-bytes`` unless not modelled); ``.gm-peak`` and
``.gm-reserved`` ``data-bytes``. While ``.gm-busy`` is shown, the figures in it are the previous ones.

vLLM's start-up account (lesson 10) has its own view, :func:`startup_view`: ``.gm-serving`` carries the account's
options and figures (:data:`STARTUP_DATA`), ``.gm-answer`` ``data-starts``, and ``.gm-part`` ``data-part`` and
``data-bytes``.
"""

from __future__ import annotations

import html
import math

from ..batch import Estimate
from ..gpus import CACHE_ALLOWANCE_BYTES, CUBLAS_LINE, CUDA_CONTEXT_BYTES, CUDA_OVERHEAD_BYTES, GPU_CARDS
from ..palette import CATEGORY_COLORS, OKABE_ITO, SERVING_COLORS
from ..record import CATEGORIES
from ..serving import StartupAccount
from ..units import GiB, fmt_bytes

#: The assumed overhead is not a measured category: hatched, not filled.
_HATCH = "repeating-linear-gradient(45deg,#bbbbbb 0 3px,#f4f4f4 3px 7px)"
_BAR_STYLE = "position:relative;height:26px;width:100%;max-width:640px;background:#f4f4f4;margin:6px 0"
_NOTE_STYLE = "color:#555;font-size:90%"


def _paint(name: str) -> str:
    """CSS background of a category, of cached free memory, of the cuBLAS workspaces, or of an assumed overhead."""
    if name == CUBLAS_LINE:
        return OKABE_ITO["sky blue"]
    return CATEGORY_COLORS.get(name, "#dcdcdc" if name == "reserved, free" else _HATCH)


def _size(nbytes: float, unit: str) -> str:
    """Bytes in the widget's unit, thousands grouped: ``'16,160.0 MiB'`` or ``'15.8 GiB'``."""
    return fmt_bytes(nbytes, unit, grouped=True)


def _term(nbytes: int, unit: str) -> str:
    """A card's line in the widget's unit as the verdict's sum writes it (:meth:`helpers.gpus.Verdict.sentence`): two
    decimals under a tenth of the unit (a 16 MiB cuBLAS workspace is 0.02 GiB, not 0.0)."""
    scale = 2**20 if unit == "MiB" else 2**30
    return f"{nbytes / scale:,.{1 if nbytes >= scale / 10 else 2}f} {unit}"


def _bar(parts: list[tuple[str, int]], scale: float, unit: str = "MiB", paint=_paint) -> str:
    """Stacked segments, one per (category, bytes), as percentages of ``scale`` bytes, coloured by ``paint(name)``."""
    left, out = 0.0, []
    for name, nbytes in parts:
        width = 100 * nbytes / scale
        out.append(f'<div title="{name}: {_size(nbytes, unit)}" style="position:absolute;top:0;bottom:0;'
                   f'left:{left:.3f}%;width:{width:.3f}%;background:{paint(name)}"></div>')
        left += width
    return "".join(out)


def verdict(r: Estimate, gpu: str, capacity: int, measured_here: bool, unit: str = "MiB") -> tuple[bool, str]:
    """Whether the step fits, and the sentence that says so (and what it judged).

    On a listed card: :meth:`helpers.batch.Estimate.verdict` in its words (:meth:`helpers.gpus.Verdict.sentence`). On
    this machine's GPU (``measured_here``: no assumed overhead): the step ran, or ran out of memory. For a bare
    parameter count (backend ``"formula"``): the model states alone, and "fits" says so.

    Args:
        r: the estimate at one batch size.
        gpu, capacity: the GPU's name (``"V100 16 GB"``, or ``"this GPU"``) and its memory.
        unit: ``"MiB"`` or ``"GiB"`` (another raises ``ValueError``).
    """
    if unit not in ("MiB", "GiB"):
        raise ValueError(f"unit must be 'MiB' or 'GiB', got {unit!r}")
    scale = 2**20 if unit == "MiB" else 2**30
    if r.peak_bytes is None:
        return False, f"does not fit: batch {r.batch_size} ran out of memory on this GPU ({r.error})"
    if measured_here:
        return True, (f"fits on this GPU: the whole step ran, peak allocated {_size(r.peak_bytes, unit)} measured "
                      f"({_size(capacity, unit)})")
    v = r.verdict(capacity, gpu if gpu in GPU_CARDS else None)
    if r.backend == "formula":
        sums = (f"{r.peak_bytes / scale:,.1f} + {v.overhead / scale:,.1f} + "
                f"{v.unseen / scale:,.{1 if v.unseen >= scale / 10 else 2}f} = "
                f"{_size(v.need, unit)} {'<=' if v.fits else '>'} {_size(capacity, unit)}")
        if v.fits:
            tight = f" ({v.tight_note(unit)})" if v.tight else ""
            return True, (f"model states fit in {gpu}, activations not counted: model states at optimizer.step() + "
                          f"{_size(v.overhead, unit)} assumed overhead + cuBLAS workspaces = {sums}{tight}")
        return False, (f"does not fit in {gpu}: model states alone at optimizer.step() + {_size(v.overhead, unit)} "
                       f"assumed overhead + cuBLAS workspaces = {sums}")
    paged = (f"besides, {_size(r.paged_bytes, unit)} of paged optimizer states in unified memory, paged out under "
             f"pressure" if r.paged_bytes else "")
    return v.fits, v.sentence(gpu, "; ".join(filter(None, [r.allocator_error, paged])), unit=unit)


def render(r: Estimate, gpu: str, capacity: int, measured_here: bool = False, unit: str = "MiB") -> tuple[str, str]:
    """The widget's view of one estimate: ``(message, html)``.

    The verdict (:func:`verdict`), a bar of the peak by category against the capacity (and one on the peak's own scale
    when under a fifth of it), bytes per category, the card's :func:`helpers.gpus.unseen_lines`, and where the peak was
    reached; sizes in ``unit``, exact bytes in data attributes.
    """
    ok, message = verdict(r, gpu, capacity, measured_here, unit)
    tight = (not measured_here and r.peak_bytes is not None  # too close to call: amber (helpers.gpus.Verdict.tight)
             and r.verdict(capacity, gpu if gpu in GPU_CARDS else None).tight)
    head = (f'<div class="gm-verdict" data-fits="{str(ok).lower()}" data-tight="{str(tight).lower()}" '
            f'style="font-weight:bold;color:{"#9a6700" if tight else "#1a7f37" if ok else "#b00"}">'
            f'{html.escape(message)}</div>')
    top = (f'<div class="gm-explorer" data-batch="{r.batch_size}" data-gpu="{html.escape(gpu)}" '
           f'data-capacity="{capacity}">')
    if r.peak_bytes is None:
        return message, f'{top}{head}</div>'
    parts = [(name, r.categories.get(name, 0)) for name in CATEGORIES]
    if r.reserved_bytes is not None:  # the replayed cache instead of the assumed allowance
        overhead = max(r.reserved_bytes - r.peak_bytes, 0) + CUDA_CONTEXT_BYTES
        parts += [("reserved, free", overhead - CUDA_CONTEXT_BYTES), ("CUDA context (assumed)", CUDA_CONTEXT_BYTES)]
    elif measured_here:
        overhead = 0
    else:
        overhead = CUDA_OVERHEAD_BYTES
        parts += [("CUDA context (assumed)", CUDA_CONTEXT_BYTES), ("allocator cache (assumed)", CACHE_ALLOWANCE_BYTES)]
    lines = r.verdict(capacity, gpu).lines if gpu in GPU_CARDS and not measured_here else {}
    for name, nbytes in lines.items():  # what the card adds that the traced tensors do not show
        if nbytes:
            parts.append((name, nbytes))
            overhead += nbytes
    scale = max(capacity, r.peak_bytes + overhead) * 1.05
    line = (f'<div title="{html.escape(gpu)}: {_size(capacity, unit)}" style="position:absolute;'
            f'top:-4px;bottom:-4px;left:{100 * capacity / scale:.3f}%;border-left:3px solid #b00"></div>')
    bar = (f'<div style="{_NOTE_STYLE}">against the GPU\'s {_size(capacity, unit)} (red line):</div>'
           f'<div class="gm-bar" style="{_BAR_STYLE}">{_bar(parts, scale, unit)}{line}</div>')
    if r.peak_bytes < 0.2 * capacity:  # too thin to read: show the peak on its own scale too
        bar += (f'<div style="{_NOTE_STYLE}">the peak alone, on its own scale:</div>'
                f'<div class="gm-zoom" style="{_BAR_STYLE}">{_bar(parts[:len(CATEGORIES)], r.peak_bytes * 1.05, unit)}</div>')
    rows = []
    for name, nbytes in parts:
        swatch = (f'<span style="display:inline-block;width:10px;height:10px;margin-right:4px;'
                  f'background:{_paint(name)}"></span>')
        cell = (f'class="gm-unseen" data-line="{name}" data-bytes="{nbytes}"' if name in lines else
                f'class="gm-bytes" data-category="{name}" data-bytes="{nbytes}"')
        shown = _size(nbytes, unit) if name not in lines else _term(nbytes, unit)  # as the verdict adds it
        rows.append(f'<tr><td style="padding-right:16px">{swatch}{name.replace("_", " ")}</td>'
                    f'<td {cell} style="text-align:right">{shown}</td></tr>')
    for name, nbytes in lines.items():
        if nbytes is None:
            rows.append(f'<tr><td style="padding-right:16px">{name}</td><td class="gm-unseen" data-line="{name}" '
                        f'style="text-align:right">not modelled</td></tr>')
    rows.append(f'<tr><td style="padding-right:16px"><b>peak allocated (whole step)</b></td><td class="gm-peak" '
                f'data-bytes="{r.peak_bytes}" style="text-align:right"><b>{_size(r.peak_bytes, unit)}</b></td></tr>')
    if r.reserved_bytes is not None:
        rows.append(f'<tr><td style="padding-right:16px"><b>peak reserved (simulated)</b></td><td '
                    f'class="gm-reserved" data-bytes="{r.reserved_bytes}" style="text-align:right">'
                    f'<b>{_size(r.reserved_bytes, unit)}</b></td></tr>')
    table = f'<table style="border-collapse:collapse">{"".join(rows)}</table>'
    source = ("from the parameter count" if r.backend == "formula" else
              "traced" if r.traced else "interpolated between traced batch sizes")
    note = (f'<div style="{_NOTE_STYLE}">batch {r.batch_size}; peak of the whole step at the '
            f'{html.escape(r.where)}; {r.backend}, {source}.</div>')
    return message, f'{top}{head}{bar}{table}{note}</div>'


def working(note: str, previous: str = "") -> str:
    """The view while a result is computed: ``note`` (plain text) in bold over the ``previous`` view (HTML), dimmed."""
    stale = (f'<div class="gm-stale" style="opacity:0.35;filter:grayscale(100%)">{previous}</div>'
             if previous else "")
    return (f'<div class="gm-busy" aria-busy="true"><div class="gm-updating" style="font-weight:bold;color:#555">'
            f'updating&hellip; {html.escape(note)}</div>{stale}</div>')


def refused(message: str, after: str = "") -> str:
    """The view of a configuration that cannot run: ``message`` (plain text), then ``after`` (HTML)."""
    return f'<div class="gm-refused" style="color:#a00">{html.escape(message)}{after}</div>'


#: What ``.gm-serving`` carries as data: ``data-<name>`` -> the :class:`helpers.serving.StartupAccount` attribute it
#: holds (exact: bytes and counts as integers, the utilization and concurrency as Python writes the float).
STARTUP_DATA = {"model": "model", "gpu": "gpu", "total": "total_bytes", "utilization": "gpu_memory_utilization",
                "dtype": "dtype", "quantization": "quantization", "kv-cache-dtype": "kv_cache_dtype", "max-model-len": "max_model_len",
                "batched-tokens": "max_num_batched_tokens", "num-reqs": "num_reqs", "blocks": "num_blocks",
                "kv-tokens": "kv_tokens", "kv-bytes": "kv_cache_bytes", "concurrency": "max_concurrency",
                "gpus": "tensor_parallel_size"}

#: The parts of the card in :func:`startup_view`'s bar, in order, and their colours (:mod:`helpers.palette`).
STARTUP_PARTS = {"weights": CATEGORY_COLORS["parameters"], "activation peak": CATEGORY_COLORS["activations"],
                 "non-torch memory (assumed)": _HATCH, "KV cache": SERVING_COLORS["kv_cache"],
                 "unused": SERVING_COLORS["unused"]}


def _gib(nbytes: float) -> str:
    """GiB with two decimals, as vLLM logs its account: ``'14.99 GiB'``."""
    return f"{nbytes / GiB:,.2f} GiB"


def startup_answer(a: StartupAccount) -> str:
    """How many requests of ``max_model_len`` tokens the account's KV cache holds at once, in one line; or vLLM's
    refusal (:attr:`helpers.serving.StartupAccount.refusal`).

    "3 requests of 131,072 tokens fit at once, maximum concurrency 3.39× (KV cache: 444,864 tokens, 54.30 GiB)", or
    "1 request of ... fits at once": the whole requests are :attr:`~helpers.serving.StartupAccount.max_concurrency`
    rounded down, the concurrency is written as vLLM logs it ("Maximum concurrency for 131,072 tokens per request:
    3.39x"), the KV cache is its blocks.  Over several GPUs (tensor parallelism) the requests and tokens are the
    instance's (each token's keys and values are split across the GPUs) and the GiB one GPU's: "... GiB on each of
    4 GPUs)".
    """
    if a.refusal:
        return a.refusal
    whole = math.floor(a.max_concurrency)
    return (f"{whole:,} request{'' if whole == 1 else 's'} of {a.max_model_len:,} tokens "
            f"{'fits' if whole == 1 else 'fit'} at once, maximum "
            f"concurrency {a.max_concurrency:.2f}× (KV cache: {a.kv_tokens:,} tokens, {_gib(a.kv_cache_bytes)}"
            f"{_each_gpu(a)})")


def _each_gpu(a: StartupAccount) -> str:
    """``" on each of N GPUs"`` when the account is one GPU's of N, else nothing."""
    gpus = a.tensor_parallel_size * a.pipeline_parallel_size
    return "" if gpus == 1 else f" on each of {gpus} GPUs"


def startup_parts(a: StartupAccount) -> list[tuple[str, int]]:
    """The card split as vLLM's account splits it, bytes: weights, the profile run's activation peak, non-torch memory
    (assumed), the KV cache's blocks, and the rest of the card (what ``gpu_memory_utilization`` keeps back, and less
    than a block that the cache could not use; 0 when the rest exceeds the card)."""
    used = [a.weights_bytes, a.activation_peak_bytes, a.non_torch_bytes, a.kv_cache_bytes]
    return list(zip(STARTUP_PARTS, [*used, max(a.total_bytes - sum(used), 0)]))


def startup_view(a: StartupAccount) -> tuple[str, str]:
    """The serving widget's view of vLLM's start-up account: ``(answer, html)``.

    The answer (:func:`startup_answer`), green, or vLLM's refusal, red; a bar of the card (:func:`startup_parts`),
    with a dashed line where ``total × gpu_memory_utilization`` ends and, when the account exceeds the card, a red line
    at the card's end; the parts in GiB; and what was traced and what assumed.
    """
    answer = startup_answer(a)
    starts = a.refusal is None
    data = " ".join(f'data-{name}="{html.escape(str(getattr(a, attr)))}"' for name, attr in STARTUP_DATA.items())
    head = (f'<div class="gm-answer" data-starts="{str(starts).lower()}" style="font-weight:bold;'
            f'color:{"#1a7f37" if starts else "#b00"}">{html.escape(answer)}</div>')
    parts = startup_parts(a)
    used = sum(nbytes for name, nbytes in parts if name != "unused")
    scale = a.total_bytes if used <= a.total_bytes else used * 1.05
    limit = (f'<div title="total × gpu_memory_utilization: {_gib(a.requested_bytes)}" style="position:absolute;'
             f'top:-4px;bottom:-4px;left:{100 * a.requested_bytes / scale:.3f}%;border-left:2px dashed #000000"></div>')
    if used > a.total_bytes:
        limit += (f'<div title="{html.escape(a.gpu)}: {_gib(a.total_bytes)}" style="position:absolute;top:-4px;'
                  f'bottom:-4px;left:{100 * a.total_bytes / scale:.3f}%;border-left:3px solid #b00"></div>')
    card = html.escape(a.gpu) + ("" if a.tensor_parallel_size == 1 else
                                 f", one of {a.tensor_parallel_size} (tensor_parallel_size), its shard of the model")
    bar = (f'<div style="{_NOTE_STYLE}">{card}: {_gib(a.total_bytes)}; the dashed line: '
           f'gpu_memory_utilization {a.gpu_memory_utilization:.2f} of it, {_gib(a.requested_bytes)}'
           f'{", and the red line the end of the card" if used > a.total_bytes else ""}:</div>'
           f'<div class="gm-bar" style="{_BAR_STYLE}">{_bar(parts, scale, "GiB", STARTUP_PARTS.get)}{limit}</div>')
    rows = []
    for name, nbytes in parts:
        swatch = (f'<span style="display:inline-block;width:10px;height:10px;margin-right:4px;'
                  f'background:{STARTUP_PARTS[name]}"></span>')
        rows.append(f'<tr><td style="padding-right:16px">{swatch}{name}</td><td class="gm-part" data-part="{name}" '
                    f'data-bytes="{nbytes}" style="text-align:right">{_gib(nbytes)}</td></tr>')
    table = f'<table style="border-collapse:collapse">{"".join(rows)}</table>'
    kv = a.dtype if a.kv_cache_dtype == "auto" else a.kv_cache_dtype
    weights = a.dtype if a.quantization == "none" else (f"bitsandbytes {a.quantization}, the embeddings, norms and "
                                                        f"head in {a.dtype}")
    note = (f'<div style="{_NOTE_STYLE}">vLLM {a.version}\'s start-up rules, simulated: the weights ('
            f'{a.parameter_count:,} parameters in {weights}) and the activation peak of the profile run '
            f'({a.max_num_batched_tokens:,} tokens, logits of {a.num_reqs:,} requests) traced; non-torch memory '
            f'assumed; KV cache {a.kv_bytes_per_token / 1024:,.0f} KiB per token in {kv}, {a.num_blocks:,} blocks '
            f'of {a.block_size} tokens.</div>')
    return answer, f'<div class="gm-serving" {data}>{head}{bar}{table}{note}</div>'
