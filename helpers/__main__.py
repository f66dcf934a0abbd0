"""Command line: ``python -m helpers profile ...`` and ``python -m helpers check``.

``profile`` prints the per-module memory log of one training step (see
:func:`helpers.step.profile_step`), which GPUs of :data:`helpers.gpus.GPU_CARDS`
it fits (:func:`helpers.batch.card_verdicts`: the rule every widget applies, judged on the
steady state, so with ``--steady-state``), and ends with
``peak allocated: <X> MiB (<backend>)`` (then, with ``--reserved``, the
allocator model's figures).
``--json`` prints one JSON object instead.  Bad input exits with status 2 and
one line naming the problem; a step that does not fit on a real GPU exits
with status 1.

``check`` is the workshop pre-flight check (see :mod:`helpers.check`): exit
status 0 when the lessons will run, 1 when the environment is broken.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from . import config  # no torch import: `check` must run when torch is broken


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


def _parser() -> argparse.ArgumentParser:
    """The command line; ``profile``'s flags come from :data:`helpers.config.CLI_OPTIONS`."""
    parser = _Parser(prog="python -m helpers",
                     description="The memory of one PyTorch training step, and a pre-flight check for the lessons.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p = sub.add_parser("profile", help="memory of one training step, module by module")
    defaults = {f.name: f.default for f in dataclasses.fields(config.StepConfig)}
    choices = {"optimizer": config.OPTIMIZERS, "device": config.DEVICES, "amp_dtype": config.AMP_DTYPES,
               "attention": config.ATTENTION, "quantization": config.QUANTIZATIONS,
               "param_dtype": config.PARAM_DTYPES}
    lowest = {"batch_size": 1, "image_size": 1, "seq_len": 1, "vocab_size": 1, "num_classes": 1, "checkpoint": 0,
              "accumulation_steps": 1, "lora_rank": 0}
    for flag, name, text in config.CLI_OPTIONS:
        default = defaults[name]
        if isinstance(default, bool):
            p.add_argument(flag, dest=name, action="store_true", help=text)
        elif name in choices:
            p.add_argument(flag, dest=name, choices=choices[name], default=default, help=text)
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
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--reserved", action="store_true",
                   help="replay the step through the caching-allocator model: peak reserved memory, and which "
                        "GPUs it fits with reserved memory and an assumed CUDA context (lesson 06)")
    p.add_argument("--alloc-conf", default="", metavar="CONF",
                   help="with --reserved: allocator settings as PYTORCH_CUDA_ALLOC_CONF spells them, e.g. "
                        "expandable_segments:True or max_split_size_mb:128")
    sub.add_parser("check", help="pre-flight check: versions, device, backend, does ResNet18 at batch 128 fit")
    return parser


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
    from .batch import card_verdicts
    from .step import DoesNotFit, profile_step

    prog = "python -m helpers profile"
    options = {name: getattr(args, name) for _, name, _ in config.CLI_OPTIONS}
    try:
        if args.alloc_conf and not args.reserved:
            raise ValueError("--alloc-conf applies to the allocator model: give --reserved too")
        from .allocator import AllocatorSettings

        settings = AllocatorSettings.parse(args.alloc_conf)  # checked before the step runs
        profile = profile_step(**options)
    except DoesNotFit as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 1
    except ValueError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    if profile.params_without_grad:
        print(f"{prog}: warning: {len(profile.params_without_grad)} parameters got no gradient "
              f"(first: {profile.params_without_grad[0]}); this configuration does not train them",
              file=sys.stderr)
    allocator = _allocator_report(profile, settings) if args.reserved else None
    verdicts = card_verdicts(profile, args.reserved, settings)
    if args.json:
        out = profile.to_dict()
        if allocator is not None:
            out["allocator"] = allocator
        out["fits"] = _fits_report(verdicts) if profile.config.steady_state else None
        print(json.dumps(out))
    else:
        print(profile.table())
        states = profile.model_state_bytes
        print(f"model states at optimizer.step() (parameters + gradients + optimizer states): "
              f"{states / 2**20:.1f} MiB, {states / profile.parameter_count:.2f} bytes per parameter "
              f"({profile.parameter_count:,} parameters)")
        print(_fits_line(verdicts) if profile.config.steady_state else
              "whether training fits a GPU: give --steady-state (this is the first step, whose forward and backward "
              "run before the optimizer's states exist)")
        print(profile.summary())
        if allocator is not None:
            print(_allocator_lines(allocator))
    beyond = _beyond_any_card(verdicts)
    if beyond:
        print(f"{prog}: note: {beyond}", file=sys.stderr)
    return 0


def _fits_report(verdicts: dict) -> dict:
    """The verdicts as JSON: what was judged, and per card whether it fits, the bytes needed, and the
    lines the card adds that the traced tensors do not show (name -> bytes, null: not modelled)."""
    first = next(iter(verdicts.values()))
    return {"judged": first.judged, "basis": first.basis, "overhead_bytes": first.overhead,
            "cards": {card: v.fits for card, v in verdicts.items()},
            "need_bytes": {card: v.need for card, v in verdicts.items()},
            "unseen_bytes": {card: dict(v.lines) for card, v in verdicts.items()},
            "caveat": first.caveat or None}


def _fits_line(verdicts: dict) -> str:
    """Which cards the step fits, then one line per name of what the cards add (helpers.gpus.unseen_lines)."""
    first = next(iter(verdicts.values()))
    fit = [card for card, v in verdicts.items() if v.fits]
    not_fit = [card for card, v in verdicts.items() if not v.fits]
    lines = [f"fits ({first.judged} + the lines below): {', '.join(fit) or 'none of the listed GPUs'}"
             + (f"; does not fit: {', '.join(not_fit)}" if not_fit else "")]
    for name in first.lines:
        sizes = [v.lines[name] for v in verdicts.values()]
        if all(n is None for n in sizes):
            lines.append(f"  {name}: not modelled (they depend on the algorithm cuDNN picks, up to the largest "
                         f"free block of the allocator's cache; the margin does not cover them)")
        else:
            lines.append(f"  {name}: " + ", ".join(f"{card} {n / 2**20:,.1f} MiB" for card, n in
                                                   zip(verdicts, sizes)))
    return "\n".join(lines)


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


if __name__ == "__main__":
    sys.exit(main())
