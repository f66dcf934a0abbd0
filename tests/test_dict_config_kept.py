"""A Hugging Face config given as a dict (lesson 09's TinyLlama) is keyed by its content (issue 50's follow-up):
:class:`helpers.config.StepConfig` keeps a read-only copy of it (:class:`helpers.hf_config.FrozenDict`), so that
:func:`helpers.profile.profile_step` keeps its profiles and :mod:`helpers.evaluated` answers it from a symbolic log,
kept in the process or on disk, named the same whatever order the keys were written in; the learner's dict is never
changed, and a change of it gives a new answer.
"""

import pickle

import pytest

from helpers import evaluated, log_names, profile, symbolic, symbolic_store
from helpers.config import StepConfig
from helpers.hf_config import FrozenDict, FrozenList, frozen_config, thawed
from helpers.models import resolve_model
from helpers.profile import obtain_concrete, profile_step
from test_depth import _tiny


def _two_layers() -> dict:
    """A 2-layer llama 64 wide, with a nested object and an array as config.json files have them."""
    return {**_tiny(layers=2), "rope_scaling": {"rope_type": "linear", "factor": 2.0},
            "architectures": ["LlamaForCausalLM"]}


def _config(model, batch_size: int = 2, seq_len: int = 16, **options) -> StepConfig:
    return StepConfig(model=model, batch_size=batch_size, seq_len=seq_len, device="simulated", **options)


def test_a_config_dict_is_kept_as_a_read_only_copy_keyed_by_its_content():
    """The step's model is a read-only copy, still a dict; the learner's dict is not changed; two dicts with the same
    items in any order give equal configurations with one log name, another value (a type too) another name."""
    mine = _two_layers()
    before = dict(mine)
    config = _config(mine)
    assert isinstance(config.model, FrozenDict) and isinstance(config.model, dict) and config.model is not mine
    assert type(mine) is dict and mine == before and list(mine) == list(before)
    assert list(config.model) == sorted(mine) and config.model == mine and config.label == "llama"
    assert isinstance(config.model["rope_scaling"], FrozenDict) and isinstance(config.model["architectures"], FrozenList)
    reordered = _config(dict(reversed(list(mine.items()))))
    assert reordered == config and hash(reordered) == hash(config)
    assert repr(reordered.model) == repr(config.model)
    assert log_names.name(reordered) == log_names.name(config)
    for change in ({"hidden_size": 128}, {"rope_scaling": {"rope_type": "linear", "factor": 4.0}},
                   {"tie_word_embeddings": 0}, {"rms_norm_eps": 1e-5}):
        other = _config({**mine, **change})
        assert other != config and log_names.name(other) != log_names.name(config), change
    assert FrozenDict({"a": 1}) != FrozenDict({"a": 1.0}) != FrozenDict({"a": True})
    for change in (lambda m: m.__setitem__("hidden_size", 8), lambda m: m.update(hidden_size=8),
                   lambda m: m.pop("hidden_size"), lambda m: m.setdefault("x", 1), lambda m: m.clear(),
                   lambda m: m["rope_scaling"].__setitem__("factor", 8.0), lambda m: m["architectures"].append("x"),
                   lambda m: m.__delitem__("model_type")):
        with pytest.raises(TypeError, match="read-only copy"):
            change(config.model)
    assert config.model == mine  # nothing changed
    plain = thawed(config.model)
    assert type(plain) is dict and type(plain["rope_scaling"]) is dict and type(plain["architectures"]) is list
    assert plain == mine
    copied = pickle.loads(pickle.dumps(config.model, protocol=pickle.HIGHEST_PROTOCOL))
    assert type(copied) is FrozenDict and copied == config.model and type(copied["architectures"]) is FrozenList
    assert profile._kept_key(config) == ("profile_step", config)


def test_a_config_dict_of_other_values_or_a_pretrained_config_stays_as_given_and_is_not_kept():
    """A dict holding a value that is not JSON (a torch dtype, a tuple) is the learner's own object, as before: not
    kept, not evaluated from a log; a ``PretrainedConfig`` too."""
    import torch
    from transformers import LlamaConfig

    for mine in ({**_tiny(layers=2), "torch_dtype": torch.bfloat16}, {**_tiny(layers=2), "architectures": ("x",)},
                 {**_tiny(layers=2), 3: "a key that is not a string"}):
        assert frozen_config(mine) is None
        config = _config(mine)
        assert config.model is mine and profile._kept_key(config) is None
    pretrained = LlamaConfig(**_tiny(layers=2))
    config = _config(pretrained)
    assert config.model is pretrained and profile._kept_key(config) is None


def test_profile_step_keeps_a_dict_config_and_a_change_of_the_dict_gives_a_new_answer(symbolic_logs):
    """Asked twice, the same profile; the learner's dict changed in between, a new one (what the change says), the
    first unchanged; changed back, the first again; the same items in another order, the first again."""
    mine = _two_layers()
    first = profile_step(mine, 2, seq_len=16, device="simulated")
    assert profile_step(mine, 2, seq_len=16, device="simulated") is first
    mine["num_hidden_layers"] = 3
    deeper = profile_step(mine, 2, seq_len=16, device="simulated")
    assert deeper is not first and deeper.parameter_count > first.parameter_count
    assert first.config.model["num_hidden_layers"] == 2 and deeper.config.model["num_hidden_layers"] == 3
    mine["num_hidden_layers"] = 2
    assert profile_step(mine, 2, seq_len=16, device="simulated") is first
    assert profile_step(dict(reversed(list(mine.items()))), 2, seq_len=16, device="simulated") is first


def test_a_dict_configs_symbolic_log_is_saved_read_back_and_evaluated_exactly(symbolic_logs, monkeypatch):
    """A dict config's step traced with symbolic sizes equals its concrete trace; its log written to disk is read
    back (the config inside it a :class:`FrozenDict` again) by a dict with its keys in another order, and
    :func:`profile_step` answers a new point from it, without tracing, equal to a concrete trace in every field
    :func:`helpers.evaluated.differs` compares."""
    config = _config(_two_layers(), 2, 16)
    step = symbolic.trace(config)
    assert evaluated.differs(step.evaluate(config), obtain_concrete(config)) is None
    assert symbolic_store.save(config, [step])
    assert [f.name for f in symbolic_logs.iterdir() if f.suffix == ".pickle"] == [log_names.name(config)]
    written = symbolic_store.configuration(symbolic_logs / log_names.name(config))
    assert type(written.model) is FrozenDict and written == symbolic.key(config)
    reordered = dict(reversed(list(_two_layers().items())))
    loaded = symbolic_store.load(_config(reordered), resolve_model(reordered))
    assert len(loaded) == 1 and type(loaded[0].config.model) is FrozenDict and loaded[0].config == step.config
    profile.forget_kept()
    monkeypatch.setattr(evaluated, "trace", lambda *a, **k: pytest.fail("traced again"))
    answered = profile_step(reordered, 3, seq_len=24, device="simulated")
    assert evaluated.was_evaluated(answered) and answered.depth_note.endswith("(helpers.symbolic)")
    assert evaluated.differs(answered, obtain_concrete(_config(_two_layers(), 3, 24))) is None
