"""Lesson 09's widget: will this fine-tuning of a 7-8B model fit this GPU, and how far can it go?"""

from __future__ import annotations

import html

import ipywidgets as widgets

from ...batch import Estimate, largest_fit, reserved_estimate
from ...config import StepConfig, check_int
from ...gpus import CARD_48GB, GPU_CARDS  # CARD_48GB: also the lessons' name for it here
from ...hf_config import SHIPPED, load_config
from ...units import fmt_bytes
from ..views import render
from .base import StepWidget, WatchedCurve

#: What the view's "other" holds (:data:`helpers.record.CATEGORIES`' last): said under every figure it shows.
OTHER_NOTE = ('<div class="gm-other-note" style="font-size:90%;color:#555;margin-top:4px">other: what no category '
              'names: the loss, the gradients flowing back through the activations, and temporaries (at '
              'optimizer.step(), the foreach step\'s copies, 4 bytes per trained parameter in float32).</div>')

#: The fine-tuning widget's models: the shipped 7-8B Hugging Face configs (:data:`helpers.hf_config.SHIPPED`).
FINETUNE_MODELS = ("meta-llama/Llama-3.1-8B", "Qwen/Qwen2.5-7B", "mistralai/Mistral-7B-v0.3")
#: Its methods: label -> what they set (LoRA's rank comes from the rank menu; the label names the library that
#: quantizes).
FINETUNE_METHODS = {"full fine-tuning": {}, "LoRA": {"lora": True},
                    "QLoRA (bitsandbytes' NF4 base)": {"lora": True, "quantization": "nf4", "double_quant": True}}
#: Its optimizers: label -> :class:`helpers.config.StepConfig` options.
FINETUNE_OPTIMIZERS = {"AdamW": {"optimizer": "adamw"}, "8-bit AdamW": {"optimizer": "adamw8bit"},
                       "AdamW, states in host memory": {"optimizer": "adamw", "optimizer_offload": True},
                       "paged AdamW (bitsandbytes)": {"optimizer": "paged-adamw"},
                       "paged 8-bit AdamW (bitsandbytes)": {"optimizer": "paged-adamw8bit"}}
#: Its losses: label -> ``StepConfig.loss``.
FINETUNE_LOSSES = {"whole logits": "next_token", "chunked (torchtune)": "chunked"}
#: The questions it answers.
QUESTIONS = ("does it fit?", "largest batch", "longest sequence")
#: LoRA ranks in its menu.
LORA_RANKS = (8, 16, 32, 64, 128)
#: The longest sequence is searched in steps of this many tokens.
SEQ_STEP = 256


class FineTuneFit(StepWidget):
    """Lesson 09's widget: will this fine-tuning of a 7-8B model fit this GPU, and how far can it go?

    One steady-state step of a shipped Hugging Face causal LM config under bfloat16 autocast, simulated. "largest
    batch" (at the sequence shown) and "longest sequence" (at the batch shown, in steps of :data:`SEQ_STEP` tokens) are
    found by :func:`helpers.batch.largest_fit` and shown in their control, disabled; once another question is asked,
    that control shows the learner's own value again, so that an answer never becomes the next question's setting.
    The LoRA rank, the adapters' dtype and DoRA are disabled under full fine-tuning, the k-bit preparation but under
    QLoRA. Sizes in GiB.

    Args:
        model: one of ``models`` (default :data:`FINETUNE_MODELS`, names of :data:`helpers.hf_config.SHIPPED`).
        method, optimizer: keys of :data:`FINETUNE_METHODS` and :data:`FINETUNE_OPTIMIZERS`.
        lora_rank: one of :data:`LORA_RANKS` (not for full fine-tuning).
        weights: ``"float32"`` or ``"bfloat16"``: unquantized weights' ``param_dtype``.
        adapters: the LoRA adapters' dtype (``lora_dtype``), ``"float32"`` (peft's default) or ``"bfloat16"``;
            ``dora``: peft's DoRA; both for LoRA and QLoRA.
        prepare_kbit: peft's ``prepare_model_for_kbit_training`` (QLoRA only).
        loss: a key of :data:`FINETUNE_LOSSES`.
        checkpointing: Hugging Face's gradient checkpointing.
        seq, batch_size: tokens per sequence, sequences per batch.
        capacity: a card of :data:`helpers.gpus.GPU_CARDS` or :data:`CARD_48GB`.
        question: one of :data:`QUESTIONS`; ``reserved``: judge by the allocator model's reserved peak.

    Attributes:
        model, method, lora_rank, adapters, dora, prepare_kbit, optimizer, weights, loss, checkpointing, seq,
            batch_box, capacity, question, reserved: the controls; view, result, message: as in :class:`helpers.teaching.widgets.base.StepWidget`.
        answer, largest: the search's answer in words and its number (0: not even the smallest fits); "" and None
            for "does it fit?".

    Raises:
        ValueError: for an initial value the controls cannot take, or a step :class:`StepConfig` refuses.
    """

    UNIT = "GiB"
    _PLACEHOLDER = ("menus for a 7-8B model, the method (full fine-tuning, LoRA, QLoRA) and its adapters, optimizer, "
                    "weights, loss, checkpointing, sequence, batch and GPU, and whether the training step fits, or the largest "
                    "batch or longest sequence that does.")
    _TRACE_ENDS = False  # each configuration is traced at the batch size asked for
    MAX_BATCH = 512

    def __init__(self, model: str = FINETUNE_MODELS[0], method: str = "LoRA", lora_rank: int = 16,
                 optimizer: str = "AdamW", weights: str = "bfloat16", checkpointing: bool = True,
                 adapters: str = "float32", dora: bool = False, prepare_kbit: bool = False,
                 loss: str = "whole logits",
                 seq: int = 2048, batch_size: int = 1, capacity: str = "RTX 4090 24 GB",
                 question: str = QUESTIONS[0], reserved: bool = False,
                 models: tuple[str, ...] = FINETUNE_MODELS):
        if not models or any(m not in SHIPPED for m in models):
            raise ValueError(f"models must be shipped configs ({', '.join(SHIPPED)}), got {models!r}")
        for name, value, choices in (("model", model, models), ("method", method, FINETUNE_METHODS),
                                     ("lora_rank", lora_rank, LORA_RANKS), ("optimizer", optimizer, FINETUNE_OPTIMIZERS),
                                     ("weights", weights, ("float32", "bfloat16")), ("question", question, QUESTIONS),
                                     ("adapters", adapters, ("float32", "bfloat16")), ("loss", loss, FINETUNE_LOSSES),
                                     ("capacity", capacity, (*GPU_CARDS, *CARD_48GB))):
            if value not in choices:
                raise ValueError(f"unknown {name} {value!r}; use one of {', '.join(map(str, choices))}")
        for name, value in (("checkpointing", checkpointing), ("reserved", reserved), ("dora", dora),
                            ("prepare_kbit", prepare_kbit)):
            if not isinstance(value, bool):
                raise ValueError(f"{name} must be True or False, got {value!r}")
        self._max_seq = {m: load_config(m).max_position_embeddings for m in models}
        check_int("seq", seq, 1, self._max_seq[model])
        self._start("simulated", next(iter(GPU_CARDS)), batch_size, self.MAX_BATCH)
        self.capacities.update(CARD_48GB)
        self.capacity.options = sorted(self.capacities, key=self.capacities.get)
        self.capacity.value = capacity
        style = self._STYLE
        self.model = widgets.Dropdown(options=list(models), value=model, description="model", style=style,
                                      layout=widgets.Layout(width="400px"))
        self.method = widgets.Dropdown(options=list(FINETUNE_METHODS), value=method, description="method", style=style,
                                       layout=widgets.Layout(width="360px"))  # the whole of the QLoRA label
        self.lora_rank = widgets.Dropdown(options=LORA_RANKS, value=lora_rank, description="LoRA rank", style=style,
                                          layout=widgets.Layout(width="200px"))
        self.optimizer = widgets.Dropdown(options=list(FINETUNE_OPTIMIZERS), value=optimizer,
                                          description="optimizer", style=style, layout=widgets.Layout(width="400px"))
        self.weights = widgets.Dropdown(options=["float32", "bfloat16"], value=weights, description="weights",
                                        style=style)
        self.checkpointing = widgets.Checkbox(checkpointing, description="gradient checkpointing", indent=False)
        self.adapters = widgets.Dropdown(options=["float32", "bfloat16"], value=adapters, description="adapters",
                                         style=style)
        narrow = dict(indent=False, layout=widgets.Layout(width="auto", margin="0 16px 0 8px"))
        self.dora = widgets.Checkbox(dora, description="DoRA", **narrow)
        self.prepare_kbit = widgets.Checkbox(prepare_kbit, description="k-bit preparation (peft)", **narrow)
        self.loss = widgets.Dropdown(options=list(FINETUNE_LOSSES), value=loss, description="loss", style=style)
        self.seq = widgets.BoundedIntText(seq, min=1, max=self._max_seq[model], description="sequence",
                                          style=style, layout=widgets.Layout(width="220px"))
        self.batch_box.description, self.batch_box.style = "batch size", style
        self.batch_box.layout.width = "200px"  # the 110 px label and a box wide enough to show the number
        self.question = widgets.Dropdown(options=QUESTIONS, value=question, description="question", style=style)
        self.reserved = widgets.Checkbox(reserved, description="reserved (simulated allocator)", indent=False)
        self.answer, self.largest = "", None
        self._own: dict[str, int] = {}  # a search's control -> the learner's value while it shows the search's answer
        self.config()  # StepConfig checks the initial step
        controls = [self.model, self.method, self.lora_rank, self.adapters, self.dora, self.prepare_kbit,
                    self.optimizer, self.weights, self.loss, self.checkpointing, self.seq, self.question, self.reserved]
        self._finish([widgets.HBox([self.model, self.method, self.lora_rank]),
                      widgets.HBox([self.adapters, self.dora, self.prepare_kbit, self.checkpointing]),
                      widgets.HBox([self.optimizer, self.weights, self.loss]),
                      widgets.HBox([self.seq, self.batch_box, self.capacity]),
                      widgets.HBox([self.question, self.reserved])], controls, batch_row=False)

    def config(self, seq: int | None = None) -> StepConfig:
        """The step the controls show (batch size aside), at ``seq`` tokens if given."""
        method = FINETUNE_METHODS[self.method.value]
        options = dict(FINETUNE_OPTIMIZERS[self.optimizer.value])
        options.update({k: v for k, v in method.items() if k in ("quantization", "double_quant")})
        if self.weights.value != "float32":
            options["param_dtype"] = self.weights.value
        if method.get("lora"):
            options.update(lora_dtype=self.adapters.value, dora=self.dora.value)
        if method.get("quantization"):
            options["prepare_kbit"] = self.prepare_kbit.value
        return StepConfig(model=self.model.value, batch_size=1, seq_len=seq or self.seq.value, amp=True,
                          amp_dtype="bfloat16", checkpoint=1 if self.checkpointing.value else 0,
                          loss=FINETUNE_LOSSES[self.loss.value],
                          lora_rank=self.lora_rank.value if method.get("lora") else 0, steady_state=True,
                          device=self.backend, **options).curve_key()

    def _busy(self, key: StepConfig) -> str:
        rank = f" r{key.lora_rank}" if key.lora_rank else ""
        what = {"largest batch": ", searching the largest batch",
                "longest sequence": ", searching the longest sequence"}.get(self.question.value, "")
        return (f"{key.label}, {self.method.value}{rank}, {self.optimizer.value}, at {key.seq_len:,} tokens"
                f"{what}")

    def estimate_at(self, seq: int, batch_size: int, concrete: bool = False) -> Estimate:
        """The step at ``seq`` tokens and ``batch_size`` (cached; evaluated from a symbolic log once one is kept,
        :mod:`helpers.evaluated`), judged as the view judges it; ``concrete``: traced anew, never evaluated
        (:meth:`helpers.batch.PeakCurve.concrete`), what confirms a search's answer."""
        key = self.config(seq)
        if key not in self._curves:
            self._curves[key] = WatchedCurve(key, self._working)
        curve = self._curves[key]
        profile = curve.concrete(batch_size) if concrete else curve.trace(batch_size)
        gpu = self.capacity.value
        return reserved_estimate(profile, self.capacities[gpu]) if self.reserved.value else Estimate.of(profile)

    def largest_batch(self) -> tuple[int, dict[int, Estimate]]:
        """The largest batch at the sequence shown, and the estimates judged (:func:`largest_fit`)."""
        seq, gpu = self.seq.value, self.capacity.value
        return largest_fit(lambda b: self.estimate_at(seq, b), 1, self.MAX_BATCH, self.capacities[gpu],
                           gpu if gpu in GPU_CARDS else None, start=self.batch_box.value,
                           confirm_at=lambda b: self.estimate_at(seq, b, concrete=True))

    def longest_sequence(self) -> tuple[int, dict[int, Estimate]]:
        """The longest sequence at the batch shown (a multiple of :data:`SEQ_STEP`), and the estimates judged."""
        batch, gpu = self.batch_box.value, self.capacity.value
        steps, seen = largest_fit(lambda n: self.estimate_at(n * SEQ_STEP, batch), 1,
                                  self._max_seq[self.model.value] // SEQ_STEP, self.capacities[gpu],
                                  gpu if gpu in GPU_CARDS else None, start=self.seq.value // SEQ_STEP,
                                  confirm_at=lambda n: self.estimate_at(n * SEQ_STEP, batch, concrete=True))
        return steps * SEQ_STEP, {n * SEQ_STEP: e for n, e in seen.items()}

    def _searched(self) -> dict[str, widgets.BoundedIntText]:
        return {"largest batch": self.batch_box, "longest sequence": self.seq}

    def _recompute(self) -> None:
        question = self.question.value
        method = FINETUNE_METHODS[self.method.value]
        self.lora_rank.disabled = self.adapters.disabled = self.dora.disabled = not method.get("lora")
        self.prepare_kbit.disabled = not method.get("quantization")
        self.seq.max = self._max_seq[self.model.value]
        for asked, control in self._searched().items():
            control.disabled = asked == question
            if asked != question and asked in self._own:  # the answer of an earlier question: the learner's again
                self._quiet = True
                try:
                    control.value = min(self._own.pop(asked), control.max)
                finally:
                    self._quiet = False
        self.answer, self.largest = "", None
        gpu = self.capacity.value
        if question == QUESTIONS[0]:
            super()._recompute()
            if self.result is not None and self.result.peak_bytes is not None:
                self.view.value += OTHER_NOTE
            return
        try:
            if question == "largest batch":
                found, seen = self.largest_batch()
                lowest, step, what = 1, 1, f"largest batch at {self.seq.value:,} tokens"
            else:
                found, seen = self.longest_sequence()
                lowest, step, what = SEQ_STEP, SEQ_STEP, f"longest sequence at batch {self.batch_box.value}"
        except ValueError as e:
            return self._refuse(e)
        self.largest = found
        shown = found or lowest
        capacity = self.capacities[gpu]
        if found:
            self.answer = f"{what} that fits {gpu}: {found:,}"
            if question == "longest sequence" and found == self._max_seq[self.model.value] // SEQ_STEP * SEQ_STEP:
                self.answer += " (the model's whole context)"
            elif question == "largest batch" and found == self.MAX_BATCH:
                self.answer += f" (the end of the menu, {self.MAX_BATCH})"
            if found + step in seen:
                need = seen[found + step].verdict(capacity, gpu if gpu in GPU_CARDS else None).need
                self.answer += f" ({found + step:,} does not fit: it needs {self._beyond(need, capacity)})"
        else:
            self.answer = (f"no batch fits {gpu} at {self.seq.value:,} tokens: not even batch 1"
                           if question == "largest batch" else
                           f"no sequence fits {gpu} at batch {self.batch_box.value}: not even {SEQ_STEP} tokens")
        control = self._searched()[question]
        self._own.setdefault(question, control.value)
        self._quiet = True
        try:  # the control shows the step on display
            control.value = shown
        finally:
            self._quiet = False
        self.result = seen[shown]
        self.message, view = render(self.result, gpu, capacity, False, self.UNIT)
        head = (f'<div class="gm-answer" data-question="{html.escape(question)}" data-answer="{found}" '
                f'style="font-weight:bold;margin-bottom:4px">{html.escape(self.answer)}</div>')
        self.view.value = head + view + OTHER_NOTE

    def _beyond(self, need: int | None, capacity: int) -> str:
        """What a step that does not fit needs, and by how much it passes ``capacity``: in MiB where the widget's
        unit would round the two to the same figure (24.0 GiB on a 24.0 GiB card)."""
        if need is None:
            return "more than the card"
        unit = "MiB" if need - capacity < 0.1 * 2**30 else self.UNIT
        return (f"{fmt_bytes(need, self.UNIT, grouped=True)}, {fmt_bytes(need - capacity, unit, grouped=True)} more "
                f"than the card's {fmt_bytes(capacity, self.UNIT, grouped=True)}")

    def summary(self) -> str:
        """The answer (if a search was asked), the verdict, then bytes by category, as text."""
        text = super().summary()
        return f"{self.answer}\n{text}" if self.answer else text
