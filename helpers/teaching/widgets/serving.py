"""Lesson 10b's widget: how many requests fit at once in the KV cache that vLLM leaves on one GPU, or on each of the
GPUs that tensor parallelism spreads a model over?

Every figure is :func:`helpers.serving.vllm_startup`'s: the widget turns its controls into that function's options
(:meth:`ServingFit.options`) and draws the account it returns (:func:`helpers.teaching.views.startup_view`).
"""

from __future__ import annotations

import functools

import ipywidgets as widgets

from ... import hf_config
from ...gpus import GPU_CARDS
from ...serving import DEFAULT_GPU, WouldNotStart, kv_bytes_per_token, vllm_startup
from ..views import startup_view, working
from .base import StepWidget

#: The model the widget starts with.
DEFAULT_MODEL = "meta-llama/Llama-3.1-8B"
#: The weights menu: label -> :func:`helpers.serving.vllm_startup` options: ``--dtype``, and ``--quantization
#: bitsandbytes`` of a 16-bit checkpoint, its linear layers in NF4 or LLM.int8() (the rest, the KV cache and the
#: activations in bfloat16); fp8 and 4-bit GPTQ/AWQ checkpoints by their bytes (GPTQ's run in float16).
SERVING_WEIGHTS = {"bfloat16": {"dtype": "bfloat16", "quantization": "none"},
                   "float16": {"dtype": "float16", "quantization": "none"},
                   "NF4 (bitsandbytes, 4-bit)": {"dtype": "bfloat16", "quantization": "nf4"},
                   "int8 (bitsandbytes LLM.int8())": {"dtype": "bfloat16", "quantization": "int8"},
                   "fp8 (by formula)": {"dtype": "bfloat16", "quantization": "fp8"},
                   "int4 GPTQ/AWQ (by formula)": {"dtype": "float16", "quantization": "int4"}}
#: The KV cache menu (``--kv-cache-dtype``): "auto" keeps the weights' dtype, fp8 one byte a value.
SERVING_KV_DTYPES = ("auto", "fp8")
#: The context per request (``--max-model-len``), tokens: the menu keeps those within the model's positions.
CONTEXTS = (4096, 8192, 32_768, 131_072)
#: The batch budget (``--max-num-batched-tokens``): label -> tokens; None leaves vLLM's default for the card.
DEFAULT_BUDGET = "vLLM's default"
BUDGETS = {DEFAULT_BUDGET: None, "2,048": 2048, "4,096": 4096, "8,192": 8192, "16,384": 16_384}
#: The GPUs menu (``--tensor-parallel-size``): 3 is there to show vLLM's refusal when the heads do not divide.
GPU_COUNTS = (1, 2, 3, 4, 8)
#: The ends of the ``gpu_memory_utilization`` slider.
UTILIZATION_RANGE = (0.5, 0.98)


@functools.cache
def serving_models() -> tuple[str, ...]:
    """The shipped Hugging Face configs (:func:`helpers.hf_config.shipped_configs`) whose KV cache
    :func:`helpers.serving.kv_bytes_per_token` sizes: those whose layers all keep full keys and values."""
    def sized(name: str) -> bool:
        try:
            kv_bytes_per_token(name)
        except ValueError:
            return False
        return True

    return tuple(filter(sized, hf_config.shipped_configs()))


@functools.cache
def context_options(model: str) -> tuple[int, ...]:
    """The ``max_model_len`` menu for ``model``: the :data:`CONTEXTS` within its ``max_position_embeddings``, or, for a
    model with fewer positions than the smallest (LLaMA 65B's 2,048), its positions alone."""
    positions = hf_config.load_config(model).get_text_config().max_position_embeddings
    return tuple(n for n in CONTEXTS if n <= positions) or (positions,)


class ServingFit(StepWidget):
    """Lesson 10b's widget: vLLM's start-up account of one model on one GPU or per GPU over several, and how many
    requests fit at once.

    The controls are ``vllm serve``'s options: the model (:func:`serving_models`), its weights (a dtype, or
    bitsandbytes' 4- or 8-bit formats: :data:`SERVING_WEIGHTS`), the KV cache's dtype, the card, the GPUs
    (``tensor_parallel_size``, :data:`GPU_COUNTS`: every figure is then one GPU's, and a split vLLM refuses is refused
    in its words: heads not divisible by the GPUs, or one GPU's weights larger than its card), ``gpu_memory_utilization``, the context per request (``max_model_len``, within the model's positions:
    :func:`context_options`) and the batch budget of the profile run (``max_num_batched_tokens``).
    The view (:func:`helpers.teaching.views.startup_view`) is a bar of the card in GiB (weights, the profile run's
    activation peak, non-torch memory (assumed), the KV cache, and what is left unused) and one line: how many
    requests of ``max_model_len`` tokens fit at once, or why vLLM would not start.

    A model, weights, card, GPU count or budget not shown before needs a new trace of the profile run (0.6 s of CPU for an 8B
    model in 16 bits, about 2 s in NF4 or int8, several for 65B): the view says "updating" meanwhile.  The card
    counts because it sets vLLM's default ``max_num_seqs`` (the profile run's requests) and budget; a card new to the
    widget whose run another card traced already says "updating" for a moment too, since the widget does not repeat
    vLLM's rules to know.  The other controls only redo vLLM's arithmetic on the kept run, in milliseconds
    (:func:`helpers.serving.vllm_startup` keeps the last 8 of shipped configs).

    Args:
        model: one of :func:`serving_models` (default Llama-3.1 8B).
        weights: a key of :data:`SERVING_WEIGHTS`; ``kv_cache_dtype``: one of :data:`SERVING_KV_DTYPES`.
        gpu: a card of :data:`helpers.gpus.GPU_CARDS` (default the H100 80 GB).
        tensor_parallel_size: the GPUs, one of :data:`GPU_COUNTS` (default 1).
        gpu_memory_utilization: from 0.50 to 0.98 (:data:`UTILIZATION_RANGE`), in steps of 0.01.
        max_model_len: tokens per request, one of :func:`context_options`; None: the model's whole context, as vLLM.
        max_num_batched_tokens: tokens of the profile run, a value of :data:`BUDGETS`; None: vLLM's default for the
            card (8,192 on a card of 70 GiB or more that is no A100, else 2,048).

    Attributes:
        model, weights, kv_cache_dtype, gpu, gpus, utilization, max_model_len, budget: the controls.
        view: the ``ipywidgets.HTML`` of the account; message: its line (the answer, or vLLM's refusal).
        result: the :class:`helpers.serving.StartupAccount` on display, also when vLLM would not start (then
            ``result.refusal`` says why); None when the options cannot be simulated at all (``message`` says why).

    Raises:
        ValueError: for an initial value the controls cannot take.
    """

    UNIT = "GiB"
    #: Room for vLLM's option names, the longest ("max_num_batched_tokens") whole in JupyterLab's font
    #: (tests/test_browser.py checks that no label is cut); each control's width includes it.
    _STYLE = {"description_width": "210px"}
    _PLACEHOLDER = ("menus for a model, its weights, the KV cache's dtype, the GPU and how many of them, "
                    "gpu_memory_utilization, the context per request and the batch budget; vLLM's start-up account of "
                    "a card as a bar, and how many requests fit at once in its KV cache.")

    def __init__(self, model: str = DEFAULT_MODEL, weights: str = "bfloat16", kv_cache_dtype: str = "auto",
                 gpu: str = DEFAULT_GPU, gpu_memory_utilization: float = 0.9, max_model_len: int | None = None,
                 max_num_batched_tokens: int | None = None, tensor_parallel_size: int = 1):
        budgets = {tokens: label for label, tokens in BUDGETS.items()}
        for name, value, choices in (("model", model, serving_models()), ("weights", weights, SERVING_WEIGHTS),
                                     ("kv_cache_dtype", kv_cache_dtype, SERVING_KV_DTYPES), ("gpu", gpu, GPU_CARDS),
                                     ("tensor_parallel_size", tensor_parallel_size, GPU_COUNTS),
                                     ("max_num_batched_tokens", max_num_batched_tokens, budgets)):
            if value not in choices:
                raise ValueError(f"unknown {name} {value!r}; use one of {', '.join(map(str, choices))}")
        contexts = context_options(model)
        if max_model_len is not None and max_model_len not in contexts:
            raise ValueError(f"max_model_len for {model} must be one of {', '.join(f'{n:,}' for n in contexts)}, "
                             f"got {max_model_len!r}")
        low, high = UTILIZATION_RANGE
        if isinstance(gpu_memory_utilization, bool) or not isinstance(gpu_memory_utilization, (int, float)) or not (
                low <= gpu_memory_utilization <= high):
            raise ValueError(f"gpu_memory_utilization must be from {low:.2f} to {high:.2f}, "
                             f"got {gpu_memory_utilization!r}")
        style = self._STYLE
        menu = lambda options, value, description, width: widgets.Dropdown(  # noqa: E731
            options=options, value=value, description=description, style=style, layout=widgets.Layout(width=width))
        self.model = menu(serving_models(), model, "model", "600px")
        self.weights = menu(list(SERVING_WEIGHTS), weights, "weights", "460px")
        self.kv_cache_dtype = menu(SERVING_KV_DTYPES, kv_cache_dtype, "kv_cache_dtype", "300px")
        self.gpu = menu(list(GPU_CARDS), gpu, "GPU", "370px")
        self.gpus = menu([(str(n), n) for n in GPU_COUNTS], tensor_parallel_size, "GPUs", "290px")
        self.utilization = widgets.FloatSlider(gpu_memory_utilization, min=low, max=high, step=0.01,
                                               readout_format=".2f", description="gpu_memory_utilization",
                                               continuous_update=True, style=style,
                                               layout=widgets.Layout(width="520px"))
        self.max_model_len = menu(self._contexts(model), max_model_len or contexts[-1], "max_model_len", "340px")
        self.budget = menu(list(BUDGETS), budgets[max_num_batched_tokens], "max_num_batched_tokens", "370px")
        self.view = widgets.HTML()
        self.result, self.message = None, ""
        self._quiet, self._updating = False, False
        self._figures = ""  # the view's last account, dimmed while the next is traced
        self._wanted = self.max_model_len.value  # the context the learner chose last
        self._runs: set[tuple] = set()  # (model, weights, budget, card, GPUs) shown: their profile runs are kept
        widgets.VBox.__init__(self, children=[widgets.HBox([self.model]),
                                              widgets.HBox([self.weights, self.kv_cache_dtype]),
                                              widgets.HBox([self.gpu, self.gpus]), widgets.HBox([self.utilization]),
                                              widgets.HBox([self.max_model_len, self.budget]), self.view])
        self.max_model_len.observe(self._chosen, names="value")  # first: the choice is known when the view updates
        for control in (self.model, self.weights, self.kv_cache_dtype, self.gpu, self.gpus, self.utilization,
                        self.max_model_len, self.budget):
            control.observe(self._on_change, names="value")
        self.update()

    @staticmethod
    def _contexts(model: str) -> list[tuple[str, int]]:
        return [(f"{n:,}", n) for n in context_options(model)]

    def options(self) -> dict:
        """The keyword arguments of :func:`helpers.serving.vllm_startup` that the controls show."""
        return dict(model=self.model.value, gpu=self.gpu.value, gpu_memory_utilization=round(self.utilization.value, 2),
                    max_model_len=self.max_model_len.value, max_num_batched_tokens=BUDGETS[self.budget.value],
                    kv_cache_dtype=self.kv_cache_dtype.value, tensor_parallel_size=self.gpus.value,
                    **SERVING_WEIGHTS[self.weights.value])

    def _chosen(self, change) -> None:
        """The learner chose a context (not :meth:`_fit_contexts` for another model): remember it."""
        if not self._quiet:
            self._wanted = change["new"]

    def _fit_contexts(self) -> None:
        """Offer the model's contexts, showing the learner's last choice if the model has it, else the longest below
        it (else the shortest): a model with fewer positions does not lower the context of the next."""
        contexts = context_options(self.model.value)
        if tuple(value for _, value in self.max_model_len.options) == contexts:
            return
        self._quiet = True
        try:
            self.max_model_len.options = self._contexts(self.model.value)
            self.max_model_len.value = max((n for n in contexts if n <= self._wanted), default=contexts[0])
        finally:
            self._quiet = False

    def _recompute(self) -> None:
        self._fit_contexts()
        run = (self.model.value, self.weights.value, self.budget.value, self.gpu.value, self.gpus.value)
        if run not in self._runs:
            budget = self.budget.value if self.budget.value != DEFAULT_BUDGET else f"{DEFAULT_BUDGET} on {run[3]}"
            shard = "" if run[4] == 1 else f", one GPU's shard of {run[4]}"
            self.view.value = working(f"tracing vLLM's profile run: {run[0]} in {run[1]}, max_num_batched_tokens "
                                      f"{budget}{shard}", self._figures)
        try:
            account = vllm_startup(**self.options())
        except WouldNotStart as e:  # the account that says so: shown as any other
            account = e.account
        except ValueError as e:
            return self._refuse(e)
        self._runs.add(run)
        self.result = account
        self.message, self.view.value = startup_view(account)

    def summary(self) -> str:
        """The answer (or vLLM's refusal), then the account in vLLM's terms (:meth:`StartupAccount.lines`), as text."""
        return self.message if self.result is None else "\n".join([self.message, *self.result.lines()])
