"""The command line's cold answer from a symbolic log on disk, without ``transformers``, ``peft`` or ``bitsandbytes``.

A new process that asks ``python -m helpers profile`` for a shipped Hugging Face config (:data:`helpers.hf_config.SHIPPED`)
would import ``transformers`` (and, for its steps, ``peft``) only to resolve the model's config and spec, even where
:func:`helpers.profile.profile_step` then answers from the configuration's symbolic log on disk
(:mod:`helpers.symbolic_store`) without building the model: 7.5 s of a 10.7 s answer on the 2-core machine (issue 50).
:func:`from_disk` gives that same answer without them: the configuration is the one ``profile_step`` makes of the
options (:func:`helpers.profile.step_config`), the file is the one it reads (:func:`helpers.symbolic_store.load`, named
by :func:`helpers.symbolic.key` of that configuration: the key needs no model), and the log is evaluated with what the
step's task reads of the model (:func:`helpers.models.resolve.shipped_task_spec`, from the ``config.json`` alone), so
the profile is the one ``profile_step`` evaluates from the same log, field by field (``tests/test_cli_cold.py``).
Where there is no log on disk, or none that holds at this point (another regime, a guard), it answers None and the
command line asks ``profile_step`` as before, which imports them.
"""

from __future__ import annotations


def from_disk(options: dict):
    """The :class:`helpers.record.StepProfile` that :func:`helpers.profile.profile_step` with ``options`` (its
    keyword arguments) would evaluate from a symbolic log on disk, or None where it would not.

    It answers for a shipped Hugging Face config whose question :func:`helpers.profile.profile_step` answers from a
    symbolic log (a simulated step of plain options, :func:`helpers.symbolic.applies`), and only where a log of its
    configuration on disk holds at its point (:meth:`helpers.symbolic.SymbolicStep.outside`), evaluated as
    ``profile_step`` evaluates it.  None everywhere else: ``profile_step`` answers (traces) as without this module.

    Raises:
        ValueError: as :func:`helpers.profile.profile_step` does for a bad option.
    """
    from .models.resolve import shipped_task_spec

    model = options.get("model")
    spec = shipped_task_spec(model, options.get("name"))
    if spec is None:
        return None
    from . import symbolic, symbolic_store
    from .profile import _kept_key, step_config

    config = step_config(model, options.get("batch_size", 128), options.get("image_size", 224), "profile_step",
                         **{k: v for k, v in options.items() if k not in ("model", "batch_size", "image_size")})
    # profile_step's own conditions for an answer from a symbolic log (helpers.profile.obtain)
    if config.frozen or _kept_key(config) is None or symbolic.applies(config) is not None:
        return None
    for step in symbolic_store.load(config, spec):
        if step.outside(config) is None:
            return step.evaluate(config)
    return None

