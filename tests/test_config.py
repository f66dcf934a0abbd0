"""helpers.config: every option of a step, checked in one place."""

import dataclasses

import pytest

from helpers.config import CLI_OPTIONS, StepConfig


@pytest.mark.parametrize("options, message", [
    (dict(batch_size=0), "batch_size must be an integer >= 1"),
    (dict(batch_size=2.5), "batch_size must be an integer"),
    (dict(batch_size=True), "batch_size must be an integer"),
    (dict(image_size=0), "image_size must be an integer >= 1"),
    (dict(checkpoint=-1), "checkpoint must be an integer >= 0"),
    (dict(optimizer="lion"), "unknown optimizer 'lion'; use one of sgd, sgd-momentum, adam, adamw"),
    (dict(device="tpu"), "unknown device 'tpu'"),
    (dict(amp_dtype="float8"), "unknown amp_dtype 'float8'"),
    (dict(attention="ring"), "unknown attention 'ring'"),
    (dict(amp="yes"), "amp must be True or False"),
    (dict(reentrant=True), "reentrant applies to checkpointing"),
    (dict(input_shape=(3, 0, 4)), "each input_shape entry must be an integer >= 1"),
    (dict(input_shape=(64,), seq_len=8), "not both"),
    (dict(inputs=lambda b, d: None, seq_len=8), "not both"),
    (dict(inputs=3), "inputs must be a function"),
    (dict(loss="hinge"), "unknown loss 'hinge'"),
    (dict(vocab_size=100), "vocab_size applies to token inputs"),
    (dict(num_classes=0), "num_classes must be an integer >= 1"),
    (dict(capacity=0), "capacity must be an integer >= 1"),
    (dict(model=3), "model must be a model name"),
    (dict(model=""), "model must be a model name"),
])
def test_each_bad_option_is_named(options, message):
    with pytest.raises(ValueError, match=message):
        StepConfig(**options)


def test_a_config_is_frozen_hashable_and_echoed():
    config = StepConfig(model="resnet18", batch_size=8, input_shape=[3, 64, 64])
    assert config.input_shape == (3, 64, 64) and config.sample_shape == (3, 64, 64)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.batch_size = 9
    assert config.curve_key() == config.replace(batch_size=77).curve_key()
    assert len({config, config.replace(batch_size=8)}) == 1
    echo = config.to_dict()
    assert echo["model"] == "resnet18" and echo["input_shape"] == [3, 64, 64] and echo["loss"] == "auto"

    def builder():
        return None

    assert StepConfig(model=builder, name="mine").to_dict()["model"] == "mine"
    assert StepConfig(model=builder).label == "builder"


def test_tasks_follow_the_inputs():
    assert StepConfig().task_loss == "classification" and not StepConfig().tokens
    assert StepConfig(seq_len=16).task_loss == "next_token"
    assert StepConfig(seq_len=16, loss="classification").task_loss == "classification"


def test_every_cli_flag_is_a_field():
    fields = {f.name for f in dataclasses.fields(StepConfig)}
    assert {name for _, name, _ in CLI_OPTIONS} <= fields
    assert all(flag == "--" + name.replace("_", "-") for flag, name, _ in CLI_OPTIONS)
