"""``python -m helpers profile --batch-size 1,2,4,8`` (or ``1-64``): one step at several batch sizes, one row each.

:func:`parse` reads the flag's value; :func:`rows` profiles every batch size inside
:func:`helpers.profile.many_points`, so that a configuration whose sizes can be symbols is traced symbolically once (at
its second batch size, checked against the first, concrete, answer) and every other row is evaluated from that log
(:mod:`helpers.evaluated`): each row is the exact peak a trace at that batch size gives.  :func:`lines` and
:func:`report` print them.
"""

from __future__ import annotations

import argparse
import re

#: The most batch sizes one command line asks (a range such as ``1-100000`` would print that many rows).
MOST = 1024


def parse(text: str) -> int | tuple[int, ...]:
    """``--batch-size``'s value: an integer (``8``), integers separated by commas (``1,2,4,8``), ranges of consecutive
    integers (``1-64``, both ends included), or both (``1-4,8,16``).  One size as an int, several as a sorted tuple of
    distinct ints.

    Raises:
        argparse.ArgumentTypeError: for text that is none of these, a size below 1, a range whose end is below its
            start, or more than :data:`MOST` sizes.
    """
    sizes: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        ends = re.fullmatch(r"(\d+)\s*-\s*(\d+)", part)
        if ends:
            low, high = int(ends.group(1)), int(ends.group(2))
            if high < low:
                raise argparse.ArgumentTypeError(f"a range goes up, like 1-64, got {part!r}")
            if low < 1:
                raise argparse.ArgumentTypeError(f"must be at least 1, got {low}")
            if high - low + 1 > MOST:
                raise argparse.ArgumentTypeError(f"at most {MOST} batch sizes, got {high - low + 1:,} in {part!r}")
            sizes.update(range(low, high + 1))
            continue
        try:
            value = int(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, integers like 1,2,4,8 or a range like 1-64, "
                                             f"got {text!r}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
        sizes.add(value)
    if len(sizes) > MOST:
        raise argparse.ArgumentTypeError(f"at most {MOST} batch sizes, got {len(sizes):,}")
    ordered = tuple(sorted(sizes))
    return ordered[0] if len(ordered) == 1 else ordered


def rows(options: dict, batch_sizes: tuple[int, ...], reserved: bool = False, settings=None) -> list[tuple]:
    """``(batch_size, profile, verdicts)`` for each batch size: :func:`helpers.profile.profile_step` with ``options``
    (its keyword arguments, ``batch_size`` left out) inside :func:`helpers.profile.many_points`, and per card
    :func:`helpers.batch.card_verdicts` (None for a first step, which has no verdict).

    Raises:
        ValueError, helpers.profile.DoesNotFit: as :func:`helpers.profile.profile_step` does, at the first batch size
            that raises.
    """
    from .batch import card_verdicts
    from .profile import many_points, profile_step

    out = []
    with many_points():
        for b in batch_sizes:
            profile = profile_step(**{**options, "batch_size": b})
            verdicts = card_verdicts(profile, reserved, settings) if profile.config.steady_state else None
            out.append((b, profile, verdicts))
    return out


def lines(found: list[tuple], gpu: str | None) -> list[str]:
    """The rows as text: a heading (the step, without its batch size), then per batch size the peak allocated and the
    cards it fits (``--gpu``: that card's verdict), then how the rows were obtained."""
    from .units import fmt_mib

    first = found[0][1]
    width = max(len(f"{b:,}") for b, _, _ in found)
    out = [f"peak allocated by batch size ({first.backend}): {first.model}"]
    for b, profile, verdicts in found:
        row = f"  batch {b:>{width},}  {fmt_mib(profile.peak_allocated_bytes):>14}"
        if verdicts is None:
            row += "  (first step: no verdict)"
        elif gpu is not None:
            row += f"  {gpu}: {verdicts[gpu].answer}"
        else:
            fits = [card for card, v in verdicts.items() if v.fits]
            row += f"  fits: {', '.join(fits) if fits else 'no card of the list'}"
        out.append(row)
    from .evaluated import was_evaluated

    evaluated = sum(was_evaluated(p) for _, p, _ in found)
    if evaluated:
        out.append(f"  {evaluated} of {len(found)} rows evaluated from one symbolic trace of the step "
                   f"(helpers.symbolic), each checked exact where the trace was kept")
    notes = dict.fromkeys(p.depth_note for _, p, _ in found if p.depth_note and not was_evaluated(p))
    out += [f"  simulated: {note}" for note in notes]
    return out


def report(found: list[tuple], gpu: str | None, fits_report) -> dict:
    """The rows as JSON: per batch size its peak allocated bytes, its categories at the peak and its verdicts
    (``fits_report``: the command line's JSON of verdicts; only ``gpu``'s card where given)."""
    return {"batch_sizes": [b for b, _, _ in found],
            "rows": [{"batch_size": b, "peak_allocated_bytes": p.peak_allocated_bytes, "categories": dict(p.categories),
                      "depth_note": p.depth_note,
                      "fits": None if v is None else fits_report({gpu: v[gpu]} if gpu else v)}
                     for b, p, v in found]}
