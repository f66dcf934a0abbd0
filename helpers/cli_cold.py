"""The command line's cold answer from a symbolic log on disk: without torch or sympy where its plain form answers,
else without ``transformers``, ``peft`` or ``bitsandbytes``.

A new process that asks ``python -m helpers profile`` for a shipped Hugging Face config (:data:`helpers.hf_config.SHIPPED`)
would import ``transformers`` (and, for its steps, ``peft``) only to resolve the model's config and spec, even where
:func:`helpers.profile.profile_step` then answers from the configuration's symbolic log on disk
(:mod:`helpers.symbolic_store`) without building the model: 7.5 s of a 10.7 s answer on the 2-core machine (issue 50).
:func:`from_disk` gives that same answer without them, two ways, the first that holds:

1. :func:`from_plain`: the log's plain form (:mod:`helpers.plain_step`, written beside it by
   :mod:`helpers.plain_log`), read with ``json`` and evaluated on plain values: neither torch nor sympy imported (their
   imports were 3.8 s of a 4.7 s answer);
2. the log itself (:func:`helpers.symbolic_store.load`), evaluated with what the step's task reads of the model
   (:func:`helpers.models.resolve.shipped_task_spec`, from the ``config.json`` alone).

Either way the configuration is the one ``profile_step`` makes of the options (:func:`helpers.config.step_config`),
the file is the one named by :func:`helpers.symbolic_scope.key` of it (the key needs no model), and the profile is
the one ``profile_step`` evaluates from the same log, field by field (``tests/test_cli_cold.py``; the plain form's
storages name their dtype).  Where there is no log on disk, or none that holds at this point (another regime, a
guard), it answers None and the command line asks ``profile_step`` as before, which imports them.
"""

from __future__ import annotations

import os


def _config(options: dict):
    """The :class:`helpers.config.StepConfig` that :func:`helpers.profile.profile_step` makes of ``options``.

    Raises:
        ValueError: for a bad option, as ``profile_step`` says it.
    """
    from .config import step_config

    return step_config(options.get("model"), options.get("batch_size", 128), options.get("image_size", 224),
                       "profile_step", **{k: v for k, v in options.items()
                                          if k not in ("model", "batch_size", "image_size")})


def from_plain(options: dict):
    """The :class:`helpers.record.StepProfile` that :func:`from_disk` gives, read from a log's plain form without
    importing torch or sympy (:mod:`helpers.plain_step`), or None where there is none that holds.

    It answers only a simulated step (``device="simulated"``: ``"auto"`` asks torch whether there is a GPU) of a
    shipped config named as shipped (no file or folder of that name here, which ``profile_step`` would read), whose
    step may be evaluated from a symbolic log (:func:`helpers.symbolic_scope.applies`, not ``frozen``).

    Raises:
        ValueError: as :func:`helpers.profile.profile_step` does for a bad option.
    """
    from . import hf_config, plain_step
    from .symbolic_scope import applies

    model = options.get("model")
    if hf_config.shipped_json(model) is None or os.path.exists(model):
        return None
    config = _config(options)
    if config.device != "simulated" or config.frozen or applies(config) is not None:
        return None
    for step in plain_step.load(config):
        profile = step.evaluate(config)
        if profile is not None:
            return profile
    return None


def from_disk(options: dict):
    """The :class:`helpers.record.StepProfile` that :func:`helpers.profile.profile_step` with ``options`` (its
    keyword arguments) would evaluate from a symbolic log on disk, or None where it would not.

    It answers for a shipped Hugging Face config whose question :func:`helpers.profile.profile_step` answers from a
    symbolic log (a simulated step of plain options, :func:`helpers.symbolic_scope.applies`), and only where a log of
    its configuration on disk holds at its point (:meth:`helpers.symbolic.SymbolicStep.outside`), evaluated as
    ``profile_step`` evaluates it: from the log's plain form where one holds (:func:`from_plain`), else from the log.
    None everywhere else: ``profile_step`` answers (traces) as without this module.

    Raises:
        ValueError: as :func:`helpers.profile.profile_step` does for a bad option.
    """
    profile = from_plain(options)
    if profile is not None:
        return profile
    from .models.resolve import shipped_task_spec

    model = options.get("model")
    spec = shipped_task_spec(model, options.get("name"))
    if spec is None:
        return None
    from . import symbolic, symbolic_store
    from .profile import _kept_key

    config = _config(options)
    # profile_step's own conditions for an answer from a symbolic log (helpers.profile.obtain)
    if config.frozen or _kept_key(config) is None or symbolic.applies(config) is not None:
        return None
    for step in symbolic_store.load(config, spec):
        if step.outside(config) is None:
            return step.evaluate(config)
    return None
