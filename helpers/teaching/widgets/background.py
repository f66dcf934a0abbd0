"""Work a widget does after it has answered: a thread, whose result is handed to the widget unless stopped first.

ipywidgets documents updating a widget from a thread ("Updating a widget in the background",
``Widget Asynchronous.ipynb``), and ipykernel sends such messages on its IOPub thread (ipykernel PR #149, "IOPub is
threadsafe"; ipywidgets issue #4001, an ipykernel 7.0 regression of it, is gone from the pinned 7.4: no ``Thread.run``
hook in ``ipykernel/ipkernel.py``).  A forked child process, which would not share the interpreter's lock, cannot do
this work: a training step's backward pass in a child forked after the parent's refuses to run ("Unable to handle
autograd's threading in combination with fork-based multiprocessing", PyTorch's wiki page "Autograd and Fork"; seen
with the 8B LoRA step).

The work traces training steps, and the profile layer and the engine keep process-wide state while they trace (the
kept answers of :mod:`helpers.profile` and :mod:`helpers.evaluated`, ``torch.is_autocast_enabled`` and
``torch.compile`` replaced for the length of a step, the cycle collector paused): the caller serialises each piece of
it with its own questions under one lock (:data:`STEPS`), and stops it between two pieces (:meth:`Background.going`).
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from ... import profile

#: The one lock under which a widget's questions and its background work trace steps, one at a time: the profile
#: layer's own (:data:`helpers.profile.STEPS`), so that a learner's cell that asks for a step meanwhile waits too.
STEPS = profile.STEPS


class Stopped(Exception):
    """Raised by :meth:`Background.going` in work that was stopped (:meth:`Background.cancel`)."""


class Background:
    """``work(self)`` on a thread, then ``done(result, error)`` there (``error``: the work's exception in one line,
    ``result`` then None), unless :meth:`cancel` came first.  ``work`` calls :meth:`going` between its pieces."""

    def __init__(self, work: Callable[["Background"], Any], done: Callable[[Any, str | None], None]):
        self._cancelled = False
        self.thread = threading.Thread(target=self._run, args=(work, done), name="gm-background", daemon=True)
        self.thread.start()

    def _run(self, work, done) -> None:
        try:
            result, error = work(self), None
        except Stopped:
            return
        except Exception as e:  # said in the widget, in one line
            result, error = None, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        if not self._cancelled:
            done(result, error)

    def going(self) -> None:
        """Raise :class:`Stopped` if the work was stopped: what ``work`` calls before each piece.

        Raises:
            Stopped: after :meth:`cancel`.
        """
        if self._cancelled:
            raise Stopped()

    def cancel(self) -> None:
        """Stop the work at its next :meth:`going`; ``done`` is not called."""
        self._cancelled = True

    def join(self, timeout: float | None = None) -> None:
        """Wait for the work and for ``done`` (or for ``timeout`` seconds)."""
        self.thread.join(timeout)
