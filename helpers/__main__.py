"""Command line: ``python -m helpers profile ...``, ``python -m helpers serve MODEL`` and ``python -m helpers check``.

``profile`` runs one training step (:func:`helpers.profile.profile_step`), steady state by default, and prints the
answer first: ``peak allocated: <X> MiB (<backend>)``, the step and the defaults it took (:func:`library_defaults`: a
Hugging Face model as the pinned transformers loads and trains it), per card of :data:`helpers.gpus.GPU_CARDS` (or
the one ``--gpu`` names) the verdict of :func:`helpers.batch.card_verdicts`, then where the peak is reached and what
fills it. Bad input exits with status 2 and
one line in the flags' names (:func:`in_flags`); a step that does not fit a real GPU exits with 1. ``serve`` prints
vLLM's start-up account (:func:`helpers.serving.vllm_startup`); bad input, or a KV cache too small for one sequence,
exits with 2 and one line. ``check`` is :mod:`helpers.check` (exit 0 ready, 1 broken).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys

from . import cli_batches, cli_cold, config, hf_config  # no torch import: `check` must run when torch is broken
from .cli_defaults import LIBRARY_DEFAULTS, library_defaults
from .flags import CLI_OPTIONS


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not usage + message
        self.exit(2, f"{self.prog}: error: {message}\n")


def _at_least(lowest: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < lowest:
            raise argparse.ArgumentTypeError(f"must be at least {lowest}, got {value}")
        return value

    return parse


def _shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(n) for n in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected sizes separated by commas, like 3,32,32, got {text!r}") from None
    if min(shape) < 1:
        raise argparse.ArgumentTypeError(f"sizes must be at least 1, got {text!r}")
    return shape


def _names(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(","))
    if not all(names):
        raise argparse.ArgumentTypeError(f"expected names separated by commas, like q_proj,v_proj, got {text!r}")
    return names


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


#: ``--help``'s examples: what a new user types first.
EXAMPLES = """examples:
  python -m helpers profile
      ResNet18 at batch 128 on 224x224 images: the peak, what fills it, which GPUs it fits
  python -m helpers profile --model resnet50 --batch-size 64 --amp --checkpoint 4
      the same with mixed precision and activation checkpointing (lesson 04)
  python -m helpers profile --model meta-llama/Llama-3.1-8B --seq-len 2048 --amp --amp-dtype bfloat16 \\
      --lora-rank 16 --checkpoint 1 --optimizer adamw --gpu "RTX 4090 24 GB"
      lesson 09's LoRA step of a shipped Hugging Face config: bfloat16 weights (the config's dtype),
      checkpointing, AdamW, 2,048 tokens, batch 1; does it fit a 24 GB card?
  python -m helpers profile --model gpt2 --seq-len 1024 --batch-size 8 --table
      GPT-2 at batch 8, then the step's memory module by module
  python -m helpers profile --model mypackage.models:build --input-shape 1,28,28
      your own model: a function that returns an nn.Module
  python -m helpers check
      the pre-flight check for a workshop"""

EXPLAIN = """A memory snapshot of a real GPU explained: the peak of live tensors, when it
was reached and what was live then by category (from the stacks), reserved
memory, and when the trace replays, the blocks and free space at the peak.
Give the step's options (--model and as `profile` takes them) to simulate the
same step beside it: each allocation is then labelled with the simulation's
category and moment, and what differs is listed."""

EXPLAIN_EXAMPLES = """record a snapshot of one step of your training loop (after a first step):
  torch.cuda.empty_cache()
  torch.cuda.memory._record_memory_history(max_entries=200_000)
  train_step()
  torch.cuda.memory._dump_snapshot("my_step.pickle")
examples:
  python -m helpers explain my_step.pickle
  python -m helpers explain my_step.pickle --plots figures/
  python -m helpers explain gpt2_step.pickle --model gpt2 --seq-len 1024 --batch-size 8 --amp"""

#: The batch size when ``--batch-size`` is not given and the inputs are token ids: a sample is a whole sequence, and
#: batch 1 is the step that must fit before any larger one. Other samples keep StepConfig's default, 128.
TOKEN_BATCH = 1


def _card(text: str) -> str:
    """``--gpu``: a card of :data:`helpers.gpus.GPU_CARDS` by its name, in any case."""
    from .gpus import GPU_CARDS

    for card in GPU_CARDS:
        if card.lower() == text.strip().lower():
            return card
    raise argparse.ArgumentTypeError(f"unknown card {text!r}; the cards: {', '.join(GPU_CARDS)}")


def _step_options(p: argparse.ArgumentParser, twin: bool = False) -> None:
    """Add the flags of :data:`helpers.flags.CLI_OPTIONS` to ``p``: ``profile``'s step, or (``twin``) the step that
    ``explain`` simulates beside a snapshot, which has no ``--device`` (it is simulated) and no model by default."""
    defaults = {f.name: f.default for f in dataclasses.fields(config.StepConfig)}
    choices = {"optimizer": config.OPTIMIZERS, "device": config.DEVICES, "amp_dtype": config.AMP_DTYPES,
               "attention": config.ATTENTION, "quantization": config.QUANTIZATIONS,
               "param_dtype": config.PARAM_DTYPES, "lora_dtype": config.LORA_DTYPES, "loss": config.LOSSES,
               "compute_dtype": config.COMPUTE_DTYPES, "workspaces": config.WORKSPACES}
    lowest = {"batch_size": 1, "image_size": 1, "seq_len": 1, "vocab_size": 1, "num_classes": 1, "checkpoint": 0,
              "accumulation_steps": 1, "lora_rank": 0}
    for flag, name, text in CLI_OPTIONS:
        default = None if name == "batch_size" or (twin and name == "model") else defaults[name]  # see _batch_size
        if twin and name == "device":
            continue
        if not twin and name in LIBRARY_DEFAULTS:  # decided by the model: library_defaults
            default, text = None, f"{text}; {LIBRARY_DEFAULTS[name]}"
        if name == "steady_state":  # the default here: a verdict judges the steady state
            p.add_argument(flag, dest=name, action="store_true", default=True, help=text)
            p.add_argument("--first-step", dest=name, action="store_false",
                           help="trace the first step instead, before the optimizer's states exist (no verdict)")
        elif isinstance(default, bool):
            p.add_argument(flag, dest=name, action="store_true", help=text)
        elif name in choices:
            p.add_argument(flag, dest=name, choices=choices[name], default=default, help=text)
        elif name == "batch_size" and not twin:  # one, several (1,2,4,8) or a range (1-64): helpers.cli_batches
            p.add_argument(flag, dest=name, type=cli_batches.parse, default=default, metavar="N[,N...|N-M]",
                           help=f"{text}; several (1,2,4,8) or a range (1-64) print one row each, the step traced "
                                f"once with symbolic sizes and each row evaluated exactly")
        elif name in lowest:
            p.add_argument(flag, dest=name, type=_at_least(lowest[name]), default=default, help=text,
                           metavar="SEGMENTS" if name == "checkpoint" else None)
        elif name == "input_shape":
            p.add_argument(flag, dest=name, type=_shape, default=default, help=text, metavar="N[,N...]")
        elif name == "lora_targets":
            p.add_argument(flag, dest=name, type=_names, default=default, help=text, metavar="NAME[,NAME...]")
        elif name == "lora_dropout":
            p.add_argument(flag, dest=name, type=_number, default=default, help=text, metavar="P")
        else:
            p.add_argument(flag, dest=name, default=default, help=text)


def _parser() -> argparse.ArgumentParser:
    """The command line; ``profile``'s flags come from :data:`helpers.flags.CLI_OPTIONS`."""
    parser = _Parser(prog="python -m helpers",
                     description="The memory of one PyTorch training step, and a pre-flight check for the lessons.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p = sub.add_parser("profile", help="memory of one training step: the peak, what fills it, which GPUs it fits",
                       description="The memory of one training step, simulated on fake tensors with CUDA's\n"
                                   "rules (or measured on a GPU): the peak first, where the step reaches it,\n"
                                   "what fills it, and which GPUs it fits.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    _step_options(p)
    p.add_argument("--table", action="store_true",
                   help="after the answer, the step's memory module by module: one line per event")
    p.add_argument("--json", action="store_true", help="print one JSON object instead (the table's events included)")
    p.add_argument("--reserved", action="store_true",
                   help="replay the step through the caching-allocator model: peak reserved memory, and which "
                        "GPUs it fits with reserved memory and an assumed CUDA context (lesson 06a)")
    p.add_argument("--gpu", type=_card, default=None, metavar="NAME",
                   help="judge the step on this card only, by its name: " + ", ".join(_cards()))
    p.add_argument("--alloc-conf", default="", metavar="CONF",
                   help="with --reserved: allocator settings as PYTORCH_CUDA_ALLOC_CONF spells them, e.g. "
                        "expandable_segments:True or max_split_size_mb:128")
    e = sub.add_parser("explain", help="a real GPU's memory snapshot explained: the peak, what was live and why, "
                                       "reserved memory, segments", description=EXPLAIN,
                       epilog=EXPLAIN_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    e.add_argument("snapshot", help="a file written by torch.cuda.memory._dump_snapshot (gzipped or not)")
    e.add_argument("--cuda-device", type=_at_least(0), default=None, metavar="N",
                   help="the device whose history to read (default: the only one recorded)")
    e.add_argument("--json", action="store_true", help="print one JSON object instead")
    e.add_argument("--plots", metavar="DIR", help="write the figures to DIR: timeline.png, memory_map.png")
    e.add_argument("--top", type=_at_least(1), default=5, help="how many of the largest live tensors to list")
    _step_options(e, twin=True)
    _serve_parser(sub)
    sub.add_parser("check", help="pre-flight check: versions, device, backend, does ResNet18 at batch 128 fit")
    return parser


def _cards() -> list[str]:
    from .gpus import GPU_CARDS

    return list(GPU_CARDS)


def _serve_parser(sub) -> None:
    """``serve``: vLLM's start-up account (:func:`helpers.serving.vllm_startup`); no torch import here."""
    from .gpus import GPU_CARDS

    s = sub.add_parser("serve", help="vLLM's start-up memory account: weights, profile run, KV cache, concurrency",
                       description="vLLM's start-up memory account of one GPU, reproduced: the weights and the\n"
                                   "profile run traced on the simulated GPU, non-torch memory assumed, and the\n"
                                   "KV cache, tokens and concurrency by vLLM's rules.",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("model", help=f"a Hugging Face config: a shipped one ({', '.join(hf_config.SHIPPED)}), "
                                 f"or a path/to/config.json")
    s.add_argument("--gpu", default="H100 80 GB", choices=list(GPU_CARDS), help="the card (default H100 80 GB)")
    s.add_argument("--gpu-memory-utilization", type=_number, default=0.9, metavar="U",
                   help="the share of the card vLLM may use, in (0, 1] (default 0.9)")
    for flag, what in (("--max-model-len", "default: the model's max_position_embeddings"),
                       ("--max-num-batched-tokens", "default: vLLM's rule for the card"),
                       ("--max-num-seqs", "default: vLLM's rule for the card")):
        s.add_argument(flag, type=_at_least(1), default=None, metavar="N", help=what)
    s.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"),
                   help="the model's dtype (default bfloat16)")
    s.add_argument("--kv-cache-dtype", default="auto", choices=("auto", "fp8", "fp8_e4m3", "fp8_e5m2"),
                   help="the KV cache's dtype: auto (the model's, default) or an fp8 format (1 byte)")
    s.add_argument("--quantization", default="none", choices=("none", "nf4", "int8", "fp8", "int4"),
                   help="the weights: as loaded (none, default), by bitsandbytes in 4-bit NF4 or LLM.int8() (traced), "
                        "or fp8 or 4-bit GPTQ/AWQ (by formula)")
    for flags, what in ((("--tensor-parallel-size", "-tp", "--tp"), "GPUs each stage's layers are cut across"),
                        (("--pipeline-parallel-size", "-pp", "--pp"), "stages the layers are cut into")):
        s.add_argument(*flags, type=_at_least(1), default=1, metavar="N",
                       help=f"vLLM's option: {what} (default 1); the account is then one GPU's")
    s.add_argument("--vllm-version", dest="version", default="0.11", choices=("0.11", "0.6.5"),
                   help="whose rules: 0.11 (V1, v0.9.1 to v0.11; default) or 0.6.5 (V0, v0.6.5 to v0.10)")


def _batch_size(options: dict) -> tuple[int, str]:
    """The batch size to run, and why when it was not given (:data:`TOKEN_BATCH` for token inputs)."""
    if options["batch_size"] is not None:
        return options["batch_size"], ""
    model = options["model"]
    if options["seq_len"] is not None or config.PRESET_INPUTS.get(model) == "token ids":
        return TOKEN_BATCH, (f"batch {TOKEN_BATCH}: the default for token inputs, whose sample is a whole "
                             f"sequence; --batch-size to change it")
    return config.StepConfig.batch_size, ""


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    argv = sys.argv[1:] if argv is None else argv
    if not argv:  # no command: say what there is
        parser.print_help()
        return 2
    args = parser.parse_args(argv)
    if args.command == "check":
        from .check import run_check

        return run_check()
    if args.command == "explain":
        return _explain(args)
    if args.command == "serve":
        return _serve(args)
    from .verdicts import card_verdicts  # no torch: a cold answer imports neither torch nor sympy (helpers.cli_cold)

    prog = "python -m helpers profile"
    options = {name: getattr(args, name) for _, name, _ in CLI_OPTIONS}
    options["batch_size"], batch_note = _batch_size(options)
    defaults = library_defaults(options)
    try:
        if args.alloc_conf and not args.reserved:
            raise ValueError("--alloc-conf applies to the allocator model: give --reserved too")
        from .allocator import AllocatorSettings

        settings = AllocatorSettings.parse(args.alloc_conf)  # checked before the step runs
        if isinstance(options["batch_size"], tuple):
            return _several(args, options, settings)
        profile = cli_cold.from_disk(options)  # a log on disk answers without transformers (helpers.cli_cold)
        if profile is None:
            from .profile import DoesNotFit, profile_step

            try:
                profile = profile_step(**options)
            except DoesNotFit as e:
                print(f"{prog}: {e}", file=sys.stderr)
                return 1
    except ValueError as e:
        print(f"{prog}: error: {in_flags(str(e))}", file=sys.stderr)
        return 2
    if profile.params_without_grad:
        print(f"{prog}: warning: {len(profile.params_without_grad)} parameters got no gradient "
              f"(first: {profile.params_without_grad[0]}); this configuration does not train them", file=sys.stderr)
    allocator = _allocator_report(profile, settings) if args.reserved else None
    every = card_verdicts(profile, args.reserved, settings) if profile.config.steady_state else None
    verdicts = {args.gpu: every[args.gpu]} if every and args.gpu else every
    if args.json:
        out = profile.to_dict()
        if allocator is not None:
            out["allocator"] = allocator
        out["fits"] = _fits_report(verdicts) if verdicts else None
        print(json.dumps(out))
    else:
        print("\n".join(_answer(profile, verdicts, batch_note, defaults)))
        if allocator is not None:
            print(_allocator_lines(allocator))
        print(f"the step module by module ({len(profile.events):,} events): "
              + ("below" if args.table else "add --table"))
        if args.table:
            print(profile.table())
    beyond = _beyond_any_card(card_verdicts(profile) if every is None else every)
    if beyond:
        print(f"{prog}: note: {beyond}", file=sys.stderr)
    return 0


def _explain(args) -> int:
    """``explain``: the report of :func:`helpers.snapshot.explain_snapshot`, with the simulated twin when ``--model``
    is given; bad input exits with 2 and one line."""
    from .snapshot import SnapshotError, explain_snapshot, load_snapshot, pick_trace
    from .profile import profile_step

    prog = "python -m helpers explain"
    try:
        if args.plots:
            from pathlib import Path

            Path(args.plots).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(f"{prog}: error: --plots {args.plots}: cannot make that folder ({e.strerror or e})", file=sys.stderr)
        return 2
    try:
        snapshot = load_snapshot(args.snapshot)  # a bad file is said before the step is simulated
        pick_trace(snapshot, args.cuda_device)
        step = None
        if args.model is not None:
            options = {name: getattr(args, name) for _, name, _ in CLI_OPTIONS if name != "device"}
            options["batch_size"], _ = _batch_size(options)
            step = profile_step(**options, device="simulated")
        report = explain_snapshot(snapshot, args.cuda_device, step)
    except ValueError as e:  # a SnapshotError is said as it is; the step's options in the flags' words
        print(f"{prog}: error: {e if isinstance(e, SnapshotError) else in_flags(str(e))}", file=sys.stderr)
        return 2
    print(json.dumps(report.to_dict()) if args.json else "\n".join(report.lines(args.top)))
    if args.plots:
        from pathlib import Path

        from .teaching.plots import plot_memory_map, plot_snapshot

        folder = Path(args.plots)
        plot_snapshot(report, title=Path(args.snapshot).name).savefig(folder / "timeline.png", dpi=120)
        trace, categories = report.memory_map()
        plot_memory_map(trace, categories, report.segments, title=Path(args.snapshot).name).savefig(
            folder / "memory_map.png", dpi=120)
        print(f"figures: {folder / 'timeline.png'}, {folder / 'memory_map.png'}", file=sys.stderr)
    return 0


def _several(args, options: dict, settings) -> int:
    """``profile`` at several batch sizes (:mod:`helpers.cli_batches`): one row each, or their JSON."""
    if args.table:
        raise ValueError("--table lists one step module by module: give one --batch-size")
    found = cli_batches.rows(options, options["batch_size"], args.reserved, settings)
    if args.json:
        print(json.dumps(cli_batches.report(found, args.gpu, _fits_report)))
    else:
        print("\n".join(cli_batches.lines(found, args.gpu)))
    return 0


def _serve(args) -> int:
    """``serve``: the account's lines; bad input, or a cache too small to start, exits with 2 and one line."""
    from .serving import WouldNotStart, vllm_startup

    prog = "python -m helpers serve"
    options = {name: getattr(args, name) for name in ("gpu", "gpu_memory_utilization", "max_model_len",
                                                      "max_num_batched_tokens", "max_num_seqs", "dtype",
                                                      "kv_cache_dtype", "version", "quantization",
                                                      "tensor_parallel_size", "pipeline_parallel_size")}
    try:
        account = vllm_startup(args.model, **options)
    except ValueError as e:
        if isinstance(e, WouldNotStart):  # vLLM logs its account, then refuses
            print("\n".join(e.account.lines()))
        message = re.sub(r"\b(gpu_memory_utilization|max_model_len|max_num_batched_tokens|max_num_seqs|"
                         r"kv_cache_dtype|tensor_parallel_size|pipeline_parallel_size)\b",
                         lambda m: "--" + m.group(1).replace("_", "-"), str(e))
        print(f"{prog}: error: {message}", file=sys.stderr)
        return 2
    print("\n".join(account.lines()))
    return 0


def _answer(profile, verdicts: dict | None, batch_note: str, defaults: list[str] = ()) -> list[str]:
    """The answer, in lines: the peak, its step and the defaults it took, the verdicts, where the peak is reached,
    what fills it, the model states."""
    from .units import fmt_mib

    config_ = profile.config
    step = ("the steady-state training step (the second: the optimizer's states exist)" if config_.steady_state
            else "the first training step (the optimizer's states do not exist yet)")
    lines = [f"peak allocated: {fmt_mib(profile.peak_allocated_bytes)} ({profile.backend})",
             f"  of {step}: {profile.model}, {_inputs(profile)}, {_options(config_)}",
             *([f"  defaults of the pinned libraries: {'; '.join(defaults)}"] if defaults else []),
             *([f"  ({batch_note})"] if batch_note else [])]
    if verdicts:
        lines += _fits_lines(verdicts)
    else:
        lines.append("does it fit? no verdict on a first step: its forward and backward run before the optimizer's "
                     "states exist (drop --first-step)")
    lines += [f"peak reached by event {profile.peak_event}, {profile.peak.label}",
              *([f"  simulated: {profile.depth_note}"] if profile.depth_note else []),  # a model of repeated blocks
              "what fills it at the peak:"]
    width = max(len(name) for name in profile.categories)
    lines += [f"  {name:<{width}} {fmt_mib(nbytes):>14}" for name, nbytes in profile.categories.items()]
    if profile.paged_bytes:
        lines.append(f"paged optimizer states, outside the peak: {fmt_mib(profile.paged_bytes)} of CUDA unified memory "
                     f"(not counted by memory_allocated; on the GPU while there is room, paged to host memory under "
                     f"pressure)")
    states = profile.model_state_bytes
    lines.append(f"model states at optimizer.step() (parameters + gradients + optimizer states): "
                 f"{fmt_mib(states)}, {states / profile.parameter_count:.2f} bytes per parameter "
                 f"({profile.parameter_count:,} parameters)")
    return lines


def _inputs(profile) -> str:
    """The batch in words: ``"batch 1 of 2,048 tokens"``, ``"batch 128 of 3x224x224 images"``."""
    shape, config_ = profile.input_shape, profile.config
    if config_.tokens or config.PRESET_INPUTS.get(config_.model) == "token ids":  # a preset at its context
        what = f"{shape[0]:,} tokens"
    elif config_.input_shape is None and config_.inputs is None and len(shape) == 3:
        what = f"{'x'.join(map(str, shape))} images"
    else:
        what = f"samples of shape {tuple(shape)}" if shape else "what --model's inputs make"
    return f"batch {config_.batch_size:,} of {what}"


def _options(config_) -> str:
    """The optimizer, then each option of the step that is not its default, as its flag."""
    from .config import OPTIMIZER_NAMES

    defaults = config.StepConfig()
    said = {"model", "batch_size", "seq_len", "input_shape", "image_size", "optimizer", "steady_state", "device"}
    flags = []
    for flag, name, _ in CLI_OPTIONS:
        value = getattr(config_, name)
        if name in said or value == getattr(defaults, name):
            continue
        value = ",".join(value) if isinstance(value, tuple) else value
        flags.append(flag if value is True else f"{flag} {value}")
    return ", ".join([OPTIMIZER_NAMES[config_.optimizer], *flags])


def _fits_lines(verdicts: dict) -> list[str]:
    """Per card: the verdict and what it needs; then what the cards add (:func:`helpers.gpus.unseen_lines`)."""
    from .gpus import TIGHT_FRACTION, TIGHT_REASON, cudnn_note
    from .units import fmt_mib

    first = next(iter(verdicts.values()))
    lines = [f"does it fit? {first.judged} + the lines below:"]
    width = max(len(card) for card in verdicts)
    for card, v in verdicts.items():
        if v.need is None:
            lines.append(f"  {card:<{width}}  {v.answer:<12}  the simulated allocator ran out of memory")
            continue
        sign = "<=" if v.fits else ">"
        lines.append(f"  {card:<{width}}  {v.answer:<12}  needs {fmt_mib(v.need)} {sign} {fmt_mib(v.capacity)}"
                     + (f": {fmt_mib(v.spare)} to spare" if v.tight else ""))
    for name in first.lines:
        sizes = [v.lines[name] for v in verdicts.values()]
        if all(n is None for n in sizes) and (first.cudnn_bound is not None or first.workspaces != "none"):
            lines.append(f"  {name}: {cudnn_note(first.workspaces, first.cudnn_bound)}")  # counted, or their bound
        elif all(n is None for n in sizes):
            lines.append(f"  {name}: not modelled (they depend on the algorithm cuDNN picks, up to the largest "
                         f"free block of the allocator's cache; the margin does not cover them)")
        else:
            lines.append(f"  {name}: " + ", ".join(f"{card} {n / 2**20:,.1f} MiB" for card, n in
                                                   zip(verdicts, sizes)))
    if any(v.tight for v in verdicts.values()):
        lines.append(f"  tight: under {TIGHT_FRACTION:.0%} of the card to spare, too close to call ({TIGHT_REASON})")
    return lines


def _fits_report(verdicts: dict) -> dict:
    """The verdicts as JSON: per card fits, tight, bytes needed, unseen lines (name -> bytes, null: not modelled)."""
    from .gpus import CUDNN_LINE, TIGHT_FRACTION, cudnn_note

    first = next(iter(verdicts.values()))
    caveat = cudnn_note(first.workspaces, first.cudnn_bound) if CUDNN_LINE in first.lines else None  # for every card
    return {"judged": first.judged, "basis": first.basis, "overhead_bytes": first.overhead,
            "cards": {card: v.fits for card, v in verdicts.items()},
            "tight": {card: v.tight for card, v in verdicts.items()}, "tight_fraction": TIGHT_FRACTION,
            "need_bytes": {card: v.need for card, v in verdicts.items()},
            "unseen_bytes": {card: dict(v.lines) for card, v in verdicts.items()},
            "caveat": caveat}


def in_flags(message: str) -> str:
    """A message of :class:`helpers.config.StepConfig` or :mod:`helpers.models` in the command line's words.

    Each option of :data:`helpers.flags.CLI_OPTIONS` becomes its flag (``lora_rank`` -> ``--lora-rank``): a name with
    an underscore outside quotes, ``name=value``, ``name=``, ``name (--flag)``; a one-word name only before "applies",
    "must" or "segments". An unknown model's message also lists :data:`helpers.hf_config.SHIPPED`.
    """
    flags = {name: flag for flag, name, _ in CLI_OPTIONS}
    names = "|".join(sorted(flags, key=len, reverse=True))
    for said in (rf"\b({names})=? \((--[a-z-]+)\)", rf"\b({names})=?, (--[a-z-]+)"):  # "seq_len= (--seq-len)"
        message = re.sub(said, lambda m: m.group(2) if m.group(2) == flags[m.group(1)] else m.group(0), message)

    def valued(m: re.Match) -> str:
        name, value = m.group(1), m.group(3)
        if value in ("True", "False"):
            return flags[name] if value == "True" else f"no {flags[name]}"
        return f"{flags[name]} {value}"

    message = re.sub(rf"\b({names})=(['\"]?)([\w.-]+)\2", valued, message)
    message = re.sub(rf"\b({names})=(?=[\s,.;:)]|$)", lambda m: flags[m.group(1)], message)
    parts = re.split(r"('[^'\s]+')", message)  # quoted values ('q_proj', a path) stay as typed
    for i in range(0, len(parts), 2):
        parts[i] = re.sub(rf"(?<![-\w./])({names})(?![-\w/]|[.:]\w)",
                          lambda m: flags[m.group(1)] if "_" in m.group(1) else m.group(0), parts[i])
        parts[i] = re.sub(rf"(?<![-\w])({names})(?= (applies|must|segments)\b)", lambda m: flags[m.group(1)], parts[i])
    message = re.sub(r"(--[a-z-]+)([^;:]*?) \(\1\)", r"\1\2", "".join(parts))  # "--flag x (--flag)"
    if message.startswith("unknown model "):
        message += (f"; or a Hugging Face config shipped with the lessons (give --seq-len): "
                    f"{', '.join(hf_config.SHIPPED)}")
    return message


def _allocator_report(profile, settings) -> dict:
    """The step's log replayed through the caching-allocator model, uncapped."""
    from .allocator import replay

    run = replay(profile.allocation_log, settings=settings)
    return {"settings": str(settings), "peak_reserved_bytes": run.peak_reserved,
            "peak_allocated_bytes": run.peak_allocated, "segments": len(run.allocator.segments)}


def _allocator_lines(report: dict) -> str:
    mib = 2**20
    return (f"simulated caching allocator ({report['settings']}): peak reserved "
            f"{report['peak_reserved_bytes'] / mib:.1f} MiB, peak allocated {report['peak_allocated_bytes'] / mib:.1f} "
            f"MiB in blocks, {report['segments']} segments cached after the step")


def _beyond_any_card(verdicts: dict) -> str:
    """A sentence when the step fits no card of ``helpers.gpus.GPU_CARDS`` by ``verdicts``, else ''."""
    from .gpus import GPU_CARDS
    from .units import fmt_bytes

    if any(v.fits for v in verdicts.values()):
        return ""
    card, capacity = max(GPU_CARDS.items(), key=lambda item: item[1])
    largest = f"(the largest, {card}, has {fmt_bytes(capacity, 'GiB')}): it cannot run on one GPU as it is"
    v = verdicts[card]
    if v.need is None:
        return f"the simulated allocator runs out of memory on every GPU in helpers' list {largest}"
    size = fmt_bytes(v.need, "TiB" if v.need >= 2**40 else "GiB")
    return f"this step needs {size} ({v.judged}), more than any GPU in helpers' list has {largest}"


def _end(code: int | None) -> None:
    """End the process with ``code`` once stdout and stderr are flushed, without the interpreter's teardown: freeing
    the modules of torch and sympy object by object took 1.2-1.6 s of CPU after a cold answer of about 4 s on the
    2-core machine (``benchmarks/cli_cold.py``).  Every file a command writes is closed before it returns."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed pipe (| head): nothing more can be said
        pass
    os._exit(code or 0)


if __name__ == "__main__":
    _end(main())
