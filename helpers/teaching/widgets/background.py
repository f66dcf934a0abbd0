"""Work a widget does after it has answered: run in a forked child process, its result handed back on a thread.

Why a process and not a thread: the work is a concrete trace of a training step (seconds of Python under
``FakeTensorMode``), and the profile layer and the engine keep process-wide state while they trace (the kept answers
of :mod:`helpers.profile` and :mod:`helpers.evaluated`, ``torch.is_autocast_enabled`` and ``torch.compile`` replaced
for the length of a step, the cycle collector paused).  A thread would share that state with the learner's next
question, and the interpreter's lock with it, so that question would wait for a share of the CPU; a child forked from
the kernel has its own copy of every module (nothing to import again), runs on another core, and is stopped at once
(``SIGKILL``) when its answer is no longer wanted.  The parent keeps one thread per child, which waits for the child's
result and hands it to ``done``: ipywidgets documents updating a widget from a thread ("Updating a widget in the
background", ``Widget Asynchronous.ipynb``), ipykernel sends such messages on its IOPub thread (ipykernel PR #149,
"IOPub is threadsafe"; ipywidgets issue #4001, an ipykernel 7.0 regression, is gone from the pinned 7.4: no
``Thread.run`` hook in ``ipykernel/ipkernel.py``).  Where ``os.fork`` is missing (Windows) :func:`forkable` is False
and the caller does the work in the foreground, as before.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import threading
from typing import Any, Callable


def forkable() -> bool:
    """Whether this platform can run :class:`Background` work (``os.fork``)."""
    return hasattr(os, "fork")


class Background:
    """One piece of work running in a forked child: ``work()`` there, then ``done(result, error)`` here, on this
    object's thread (``error``: the child's exception as one line, ``result`` then None), unless :meth:`cancel` came
    first.  ``work`` must not touch a widget or print (the child has no kernel to send through): its standard output
    and error go to ``os.devnull``.  ``result`` must pickle.

    Raises:
        OSError: if the child cannot be forked.
    """

    def __init__(self, work: Callable[[], Any], done: Callable[[Any, str | None], None]):
        self._done, self._cancelled = done, False
        read, write = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the child: run, send, leave without running the parent's exit handlers
            _child(work, read, write)
        os.close(write)
        self._read = read
        self.thread = threading.Thread(target=self._wait, name="gm-background", daemon=True)
        self.thread.start()

    def _wait(self) -> None:
        chunks = []
        with os.fdopen(self._read, "rb") as pipe:
            while chunk := pipe.read(1 << 16):
                chunks.append(chunk)
        os.waitpid(self.pid, 0)
        if self._cancelled:
            return
        try:
            result, error = pickle.loads(b"".join(chunks))
        except Exception as e:  # killed from outside, or a result that did not pickle: say so, in one line
            result, error = None, f"the check stopped before it answered ({type(e).__name__})"
        self._done(result, error)

    def cancel(self) -> None:
        """Stop the child (its result is not wanted any more): ``done`` is not called."""
        self._cancelled = True
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:  # finished already
            pass

    def join(self, timeout: float | None = None) -> None:
        """Wait for the child and for ``done`` (or for ``timeout`` seconds)."""
        self.thread.join(timeout)


def _child(work, read: int, write: int) -> None:  # pragma: no cover - runs in the forked child (its exit is os._exit)
    os.close(read)
    code = 0
    try:
        sys.stdout = sys.stderr = open(os.devnull, "w")
        try:
            import torch

            torch.set_num_threads(1)  # as DataLoader's forked workers do: the parent's thread pool is not the child's
            payload = (work(), None)
        except BaseException as e:
            payload = (None, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        with os.fdopen(write, "wb") as pipe:
            pipe.write(pickle.dumps(payload))
    except BaseException:
        code = 1
    finally:
        os._exit(code)
