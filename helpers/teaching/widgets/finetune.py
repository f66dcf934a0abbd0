"""Lesson 09b's widget: will this fine-tuning of a 7-8B model fit this GPU, and how far can it go?"""

from __future__ import annotations

import html

import ipywidgets as widgets

from ...batch import Estimate, confirm_fit, largest_fit, reserved_estimate
from ...evaluated import was_evaluated
from ...config import StepConfig, check_int
from ...gpus import CARD_48GB, GPU_CARDS  # CARD_48GB: also the lessons' name for it here
from ...hf_config import SHIPPED, load_config
from ...units import fmt_bytes
from ..views import render
from .background import STEPS, Background
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
#: What the view says under a search's answer found from a symbolic log (:attr:`FineTuneFit.status` -> words): while
#: concrete traces check it in the background, and after.
STATUS = {"checking": "found at once from the step's symbolic log; checking it with a concrete trace…",
          "confirmed": "confirmed: concrete traces at the answer and one step beyond give the same figures",
          "replaced": "a concrete trace differed from the symbolic log's answer ({old}): searched again with concrete "
                      "traces, and this is their answer",
          "failed": "not confirmed: the concrete trace that checks it stopped ({error})"}


class FineTuneFit(StepWidget):
    """Lesson 09b's widget: will this fine-tuning of a 7-8B model fit this GPU, and how far can it go?

    One steady-state step of a shipped Hugging Face causal LM config under bfloat16 autocast, simulated. "largest
    batch" (at the sequence shown) and "longest sequence" (at the batch shown, in steps of :data:`SEQ_STEP` tokens) are
    found by :func:`helpers.batch.largest_fit` and shown in their control, disabled; once another question is asked,
    that control shows the learner's own value again, so that an answer never becomes the next question's setting.
    A search whose answer (or the size just beyond) was evaluated from a symbolic log (:mod:`helpers.evaluated`) is
    shown at once, marked :data:`STATUS` ``"checking"``, and confirmed by :func:`helpers.batch.confirm_fit`'s two
    concrete traces on a thread (:class:`helpers.teaching.widgets.background.Background`): then marked
    ``"confirmed"``, or replaced by the concrete search's answer and marked ``"replaced"``.  Each of its traces and
    each update of the widget hold one lock (:data:`helpers.teaching.widgets.background.STEPS`); an update stops a
    check under way before its next trace, and a check's result is shown only if no update came after it.  A question
    asked while a check traces waits for that trace (not for the rest of the check).  Elsewhere (every size traced
    concretely, a real GPU) the search is confirmed before it is shown, as :func:`helpers.batch.largest_fit` does.
    The LoRA rank, the adapters' dtype and DoRA are disabled under full fine-tuning, the k-bit preparation but under
    QLoRA. Sizes in GiB.

    Args:
        model: one of ``models``' labels.
        models: the model menu: names of :data:`helpers.hf_config.SHIPPED` (default :data:`FINETUNE_MODELS`), or a
            mapping of labels to Hugging Face config dicts (``{"tiny Llama": {"model_type": "llama", ...}}``: what
            the tests give it, a model of two layers whose steps trace in a fraction of a 7-8B model's time).
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
        status: a key of :data:`STATUS` while or after a search's answer is checked in the background; else "".

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
                 models: tuple[str, ...] | dict[str, dict] = FINETUNE_MODELS):
        self._configs = self._models(models)
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
        self._max_seq = {m: load_config(c).max_position_embeddings for m, c in self._configs.items()}
        check_int("seq", seq, 1, self._max_seq[model])
        self._start("simulated", next(iter(GPU_CARDS)), batch_size, self.MAX_BATCH)
        self.capacities.update(CARD_48GB)
        self.capacity.options = sorted(self.capacities, key=self.capacities.get)
        self.capacity.value = capacity
        style = self._STYLE
        self.model = widgets.Dropdown(options=list(self._configs), value=model, description="model", style=style,
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
        self.answer, self.largest, self.status, self._words = "", None, "", {}
        self._check: Background | None = None  # the check under way
        self._asked = 0  # how many updates so far: a check's result is shown only if none came after it
        self._quick: set[tuple[int, int]] = set()  # (seq, batch) evaluated from a symbolic log, this search
        self._own: dict[str, int] = {}  # a search's control -> the learner's value while it shows the search's answer
        self.config()  # StepConfig checks the initial step
        controls = [self.model, self.method, self.lora_rank, self.adapters, self.dora, self.prepare_kbit,
                    self.optimizer, self.weights, self.loss, self.checkpointing, self.seq, self.question, self.reserved]
        self._finish([widgets.HBox([self.model, self.method, self.lora_rank]),
                      widgets.HBox([self.adapters, self.dora, self.prepare_kbit, self.checkpointing]),
                      widgets.HBox([self.optimizer, self.weights, self.loss]),
                      widgets.HBox([self.seq, self.batch_box, self.capacity]),
                      widgets.HBox([self.question, self.reserved])], controls, batch_row=False)

    @staticmethod
    def _models(models) -> dict[str, str | dict]:
        """``models`` as menu label -> the model :class:`StepConfig` takes: a name of
        :data:`helpers.hf_config.SHIPPED` is its own label; a mapping gives each label a Hugging Face config dict (a
        test's small model, traced in a fraction of a 7-8B model's time)."""
        if isinstance(models, dict):
            configs = dict(models)
            if not configs or not all(isinstance(k, str) and isinstance(v, dict) for k, v in configs.items()):
                raise ValueError(f"models as a mapping must map labels to Hugging Face config dicts, got {models!r}")
            return configs
        if not models or isinstance(models, str) or any(m not in SHIPPED for m in models):
            raise ValueError(f"models must be shipped configs ({', '.join(SHIPPED)}), got {models!r}")
        return {m: m for m in models}

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
        return StepConfig(model=self._configs[self.model.value], batch_size=1, seq_len=seq or self.seq.value, amp=True,
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
        if not concrete and was_evaluated(profile):
            self._quick.add((seq, batch_size))
        gpu = self.capacity.value
        return reserved_estimate(profile, self.capacities[gpu]) if self.reserved.value else Estimate.of(profile)

    def largest_batch(self) -> tuple[int, dict[int, Estimate]]:
        """The largest batch at the sequence shown, and the estimates judged (:func:`largest_fit`, confirmed)."""
        return self._searched_now("largest batch")

    def longest_sequence(self) -> tuple[int, dict[int, Estimate]]:
        """The longest sequence at the batch shown (a multiple of :data:`SEQ_STEP`), and the estimates judged
        (:func:`largest_fit`, confirmed)."""
        return self._searched_now("longest sequence")

    def _search(self, question: str) -> dict:
        """:func:`largest_fit`'s arguments for ``question``, in its unit ``n`` (a batch size, or a sequence of
        ``n * step`` tokens): ``at(n, concrete=False)``, the range, the start, the card; ``point(n)``: (seq, batch)."""
        gpu = self.capacity.value
        if question == "largest batch":
            seq, top, start, step = self.seq.value, self.MAX_BATCH, self.batch_box.value, 1
            point = lambda n: (seq, n)  # noqa: E731
        else:
            batch, step = self.batch_box.value, SEQ_STEP
            top, start = self._max_seq[self.model.value] // SEQ_STEP, self.seq.value // SEQ_STEP
            point = lambda n: (n * SEQ_STEP, batch)  # noqa: E731
        return dict(at=lambda n, concrete=False: self.estimate_at(*point(n), concrete=concrete), lowest=1,
                    highest=top, capacity=self.capacities[gpu], card=gpu if gpu in GPU_CARDS else None, start=start,
                    point=point, step=step)

    def _searched_now(self, question: str) -> tuple[int, dict[int, Estimate]]:
        """``question``'s answer, confirmed before it is given (:func:`largest_fit` with ``confirm_at``), in tokens
        or sequences."""
        s = self._search(question)
        n, seen = largest_fit(s["at"], s["lowest"], s["highest"], s["capacity"], s["card"], start=s["start"],
                              confirm_at=lambda m: s["at"](m, concrete=True))
        return n * s["step"], {m * s["step"]: e for m, e in seen.items()}

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
        self.answer, self.largest, self.status = "", None, ""
        if question == QUESTIONS[0]:
            super()._recompute()
            if self.result is not None and self.result.peak_bytes is not None:
                self.view.value += OTHER_NOTE
            return
        s = self._search(question)
        self._quick = set()
        try:
            found, seen = largest_fit(s["at"], s["lowest"], s["highest"], s["capacity"], s["card"], start=s["start"])
            quick = {found, found + 1} & {n for n in seen if s["point"](n) in self._quick}
            later = bool(quick) and not self.runtime.measured
            if not later:  # confirmed now, as largest_fit does
                found, seen, _ = confirm_fit(found, seen, lambda n: s["at"](n, concrete=True), s["lowest"],
                                             s["highest"], s["capacity"], s["card"], s["start"])
        except ValueError as e:
            return self._refuse(e)
        self._show(question, found, seen, s["step"], "checking" if later else "")
        if later:
            self._check_later(question, found, seen, s)

    def _check_later(self, question: str, found: int, seen: dict[int, Estimate], s: dict) -> None:
        """Confirm the search's answer (``found``, ``seen``; ``s``: :meth:`_search`'s) in the background
        (:func:`helpers.batch.confirm_fit` on a thread, each trace under :data:`STEPS`), then show the result unless a
        newer question came."""
        asked = self._asked

        def work(check: Background):
            def concrete(n: int) -> Estimate:
                with STEPS:
                    check.going()
                    return s["at"](n, concrete=True)
            return confirm_fit(found, seen, concrete, s["lowest"], s["highest"], s["capacity"], s["card"], s["start"])

        def done(result, error: str | None) -> None:
            with STEPS:
                if asked != self._asked:  # a newer question is on display: this check's result is not wanted
                    return
                self._check = None
                if error is not None:
                    return self._show(question, found, seen, s["step"], "failed", error=error)
                n, again, same = result
                self._show(question, n, again, s["step"], "confirmed" if same else "replaced",
                           old=f"{found * s['step']:,}")

        self._check = Background(work, done)

    def _show(self, question: str, found: int, seen: dict[int, Estimate], step: int, status: str, **words) -> None:
        """Show a search's answer: ``found`` and the estimates ``seen`` in the search's unit of ``step`` tokens or
        sequences, ``status`` a key of :data:`STATUS` (or ""), its words filled with ``words``."""
        gpu = self.capacity.value
        found, seen = found * step, {n * step: e for n, e in seen.items()}
        self.largest, self.status, self._words = found, status, words
        shown = found or step
        capacity = self.capacities[gpu]
        if question == "largest batch":
            what = f"largest batch at {self.seq.value:,} tokens"
        else:
            what = f"longest sequence at batch {self.batch_box.value}"
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
        if status:
            head += (f'<div class="gm-status" data-status="{status}" style="font-style:italic;color:#555;'
                     f'margin-bottom:4px">{html.escape(self.status_text())}</div>')
        self.view.value = head + view + OTHER_NOTE

    def status_text(self) -> str:
        """:attr:`status` in words (:data:`STATUS`), or "" when the answer on display needs no check."""
        return STATUS[self.status].format(**self._words) if self.status else ""

    def update(self) -> None:
        """As :meth:`helpers.teaching.widgets.base.StepWidget.update`, one at a time with a background check's result;
        a check under way is stopped first: it checks an answer no longer asked for."""
        with STEPS:
            self._asked += 1
            if self._check is not None:
                self._check.cancel()
                self._check = None
            super().update()

    def _on_change(self, change) -> None:
        with STEPS:  # a background check's result sets a control quietly: wait until it has done so
            super()._on_change(change)

    def wait_for_check(self, timeout: float | None = None) -> str:
        """Wait for the check under way, if any (at most ``timeout`` seconds), and return :attr:`status`."""
        check = self._check
        if check is not None:
            check.join(timeout)
        return self.status

    def _beyond(self, need: int | None, capacity: int) -> str:
        """What a step that does not fit needs, and by how much it passes ``capacity``: in MiB where the widget's
        unit would round the two to the same figure (24.0 GiB on a 24.0 GiB card)."""
        if need is None:
            return "more than the card"
        unit = "MiB" if need - capacity < 0.1 * 2**30 else self.UNIT
        return (f"{fmt_bytes(need, self.UNIT, grouped=True)}, {fmt_bytes(need - capacity, unit, grouped=True)} more "
                f"than the card's {fmt_bytes(capacity, self.UNIT, grouped=True)}")

    def summary(self) -> str:
        """The answer (if a search was asked) and its check's status (if any), the verdict, then bytes by category,
        as text."""
        text = super().summary()
        if self.status:
            text = f"{self.status_text()}\n{text}"
        return f"{self.answer}\n{text}" if self.answer else text
