"""Errors in one line: what a learner reads instead of a traceback from inside a library.

Every public function of :mod:`helpers` reports bad input as a ``ValueError`` of one line that names the problem.  When
the cause is an exception raised by PyTorch, ``transformers``, ``peft`` or a learner's own code, its first line is
quoted (:func:`first_line`).
"""

from __future__ import annotations


def first_line(error: BaseException) -> str:
    """The first line of ``error``'s message, or its type's name when the message is empty.

    ``first_line(ValueError("bad shape\\nmore detail")) == "bad shape"``;
    ``first_line(ZeroDivisionError()) == "ZeroDivisionError"``.
    """
    return (str(error).strip() or type(error).__name__).splitlines()[0]


class Refused(ValueError):
    """A model or option refused in one line that already names the problem.

    Raised while the step runner prepares a model (a Hugging Face config that ``transformers`` cannot build, a LoRA
    target that names no layer); the runner reports its message as it is, where it prefixes other errors of a model's
    constructor with what failed.
    """
