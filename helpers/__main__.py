"""Command line: ``python -m helpers profile ...`` and ``python -m helpers check``.

``profile`` prints the per-module memory log of one training step (see
:func:`helpers.step.profile_step`) and ends with
``peak allocated: <X> MiB (<backend>)``.  ``--json`` prints one JSON object
instead.  Bad input exits with status 2 and one line naming the problem; a
step that does not fit on a real GPU exits with status 1.

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


def _parser() -> argparse.ArgumentParser:
    """The command line; ``profile``'s flags come from :data:`helpers.config.CLI_OPTIONS`."""
    parser = _Parser(prog="python -m helpers",
                     description="The memory of one PyTorch training step, and a pre-flight check for the lessons.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p = sub.add_parser("profile", help="memory of one training step, module by module")
    defaults = {f.name: f.default for f in dataclasses.fields(config.StepConfig)}
    choices = {"optimizer": config.OPTIMIZERS, "device": config.DEVICES, "amp_dtype": config.AMP_DTYPES,
               "attention": config.ATTENTION}
    lowest = {"batch_size": 1, "image_size": 1, "seq_len": 1, "vocab_size": 1, "num_classes": 1, "checkpoint": 0,
              "accumulation_steps": 1}
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
        else:
            p.add_argument(flag, dest=name, default=default, help=text)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
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
    from .step import DoesNotFit, profile_step

    prog = "python -m helpers profile"
    options = {name: getattr(args, name) for _, name, _ in config.CLI_OPTIONS}
    try:
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
    if args.json:
        print(json.dumps(profile.to_dict()))
    else:
        print(profile.table())
        states = profile.model_state_bytes
        print(f"model states at optimizer.step() (parameters + gradients + optimizer states): "
              f"{states / 2**20:.1f} MiB, {states / profile.parameter_count:.2f} bytes per parameter "
              f"({profile.parameter_count:,} parameters)")
        print(profile.summary())
    beyond = _beyond_any_card(profile.peak_allocated_bytes)
    if beyond:
        print(f"{prog}: note: {beyond}", file=sys.stderr)
    return 0


def _beyond_any_card(peak: int) -> str:
    """A sentence when ``peak`` bytes exceed every card of ``helpers.memory.GPU_CARDS``, else ''."""
    from .memory import GPU_CARDS, fmt_bytes

    card, capacity = max(GPU_CARDS.items(), key=lambda item: item[1])
    if peak <= capacity:
        return ""
    size = fmt_bytes(peak, "TiB" if peak >= 2**40 else "GiB")
    return (f"this step needs {size} at its peak, more than any GPU in helpers' list has "
            f"(the largest, {card}, has {fmt_bytes(capacity, 'GiB')}): it cannot run on one GPU as it is")


if __name__ == "__main__":
    sys.exit(main())
