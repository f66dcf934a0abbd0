"""One question at a time per process (:data:`helpers.profile.STEPS`): the fine-tuning widget confirms a search on a
thread (:mod:`helpers.teaching.widgets.background`) while the learner may ask for a step in the next cell, and the
profile layer and the engine keep process-wide state while a step is traced."""

import threading

from helpers import depth, profile
from helpers.config import StepConfig
from helpers.teaching.widgets import background


def test_every_way_to_a_step_holds_the_one_lock_while_it_traces(monkeypatch):
    """profile_step, concrete_step and obtain_concrete each trace with the lock held by the tracing thread (so a
    second thread waits: an RLock), and the widget's background work takes the same lock."""
    held = []
    write = depth.write

    def watched(*args, **kwargs):
        held.append(profile.STEPS._is_owned())
        return write(*args, **kwargs)

    monkeypatch.setattr(depth, "write", watched)
    profile.forget_kept()
    profile.profile_step("mlp", batch_size=3, device="simulated")
    profile.concrete_step(StepConfig(model="mlp", batch_size=5, device="simulated"))
    profile.obtain_concrete(StepConfig(model="mlp", batch_size=6, device="simulated"))
    assert held == [True, True, True]
    assert background.STEPS is profile.STEPS


def test_a_second_thread_waits_for_the_step_in_progress():
    """While one thread holds the lock (a step in progress), another thread's question does not start; it runs once
    the lock is free, and gets the same answer as a question asked alone."""
    profile.forget_kept()
    started, answers = threading.Event(), []

    def ask():
        started.set()
        answers.append(profile.profile_step("mlp", batch_size=4, device="simulated"))

    with profile.STEPS:
        other = threading.Thread(target=ask)
        other.start()
        started.wait()
        other.join(timeout=2)
        assert other.is_alive() and answers == []  # waiting for the lock, not done
    other.join()
    alone = profile.obtain_concrete(StepConfig(model="mlp", batch_size=4, device="simulated"))
    assert answers[0].peak_allocated_bytes == alone.peak_allocated_bytes
