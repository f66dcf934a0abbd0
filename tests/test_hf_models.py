"""Hugging Face models by their config, LoRA through peft, and Hugging Face's checkpointing, in the engine.

The small model (SmolLM2-135M's config, cut to 2 of its 30 layers: what is checked counts per layer) runs whole
steps at short sequences;
the 7-8B configs are only built on the meta device, except one short step of
Llama-3.1 8B against the project's own llama3-8b preset.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from helpers.allocator.rules import round_up
from helpers.config import StepConfig
from helpers import hf_config
from helpers.models import hf, resolve_model
from helpers.profile import profile_step

SMOL = "HuggingFaceTB/SmolLM2-135M"
#: SmolLM2-135M's shipped config.json with 2 of its 30 decoder layers: the steps below.
SMOL2 = {**hf_config.shipped_json(SMOL), "num_hidden_layers": 2}
SMOL_LAYERS, SMOL_H, SMOL_KV = 2, 576, 192  # 9 heads of 64, 3 key/value heads
QV = ("q_proj", "v_proj")
ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
STEP = dict(batch_size=1, seq_len=32, device="simulated", optimizer="adamw")


def _bytes(profile, category: str) -> int:
    """Bytes of every storage of ``category`` the step allocated (each once)."""
    return sum(s.nbytes for s in profile.storages.values() if s.category == category)


def _count_by_formula(c: dict) -> int:
    """Parameters of a Llama-style decoder (Llama, Qwen2, Mistral) from its config.json, by hand."""
    h, layers, inter, vocab = c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"], c["vocab_size"]
    d = c.get("head_dim") or h // c["num_attention_heads"]
    q, kv = c["num_attention_heads"] * d, c["num_key_value_heads"] * d
    bias = q + 2 * kv if c["model_type"] == "qwen2" else 0  # Qwen2: biases on q, k and v
    block = 2 * h + h * q + 2 * h * kv + q * h + 3 * h * inter + bias
    return layers * block + vocab * h * (1 if c["tie_word_embeddings"] else 2) + h


def _published(count: int, name: str) -> None:
    """``count`` agrees with the figure published for ``name`` (exact, or as rounded there)."""
    published = hf_config.SHIPPED[name].parameters
    if isinstance(published, int):
        assert count == published
    elif name == "Qwen/Qwen2.5-7B":  # "7.61B (6.53B non-embedding)": the embedding and the head are 152064 x 3584
        assert int(count / 1e7) == 761 and round((count - 2 * 152064 * 3584) / 1e9, 2) == 6.53
    else:
        assert f"{count / 1e9:.2f}B" == published


@pytest.mark.parametrize("name", list(hf_config.SHIPPED))
def test_every_shipped_config_builds_with_its_published_parameter_count(name):
    data = json.loads((hf_config.CONFIG_DIR / hf_config.SHIPPED[name].file).read_text())
    with torch.device("meta"):
        model = hf.build_causal_lm(name)
    count = sum(p.numel() for p in model.parameters())
    assert count == _count_by_formula(data)
    _published(count, name)
    assert all(p.device.type == "meta" for p in model.parameters())
    assert model.config._attn_implementation == hf.SDPA and model.config.use_cache is False
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert tied == data["tie_word_embeddings"]


def test_llama_3_1_8b_has_8_030_261_248_parameters_as_the_projects_preset():
    spec = resolve_model("meta-llama/Llama-3.1-8B")
    assert (spec.vocab_size, spec.seq_len) == (128256, 131072)
    with torch.device("meta"):
        model = spec.build()
    from helpers.models.llama import LLAMA_PRESETS
    assert sum(p.numel() for p in model.parameters()) == LLAMA_PRESETS["llama3-8b"].parameter_count() == 8_030_261_248


def test_hf_llama_keeps_one_more_hidden_state_per_rmsnorm_than_the_projects_llama():
    """The same step (8B, 64 tokens, the math kernel for both): equal parameters,
    and Hugging Face's written-out LlamaRMSNorm keeps its normalised input, one
    (batch, seq, hidden) float32 tensor more per norm: 2 per layer and the final one."""
    b, s, h, layers = 1, 64, 4096, 32
    ours = profile_step("llama3-8b", batch_size=b, seq_len=s, device="simulated", optimizer="sgd", attention="math")
    theirs = profile_step("meta-llama/Llama-3.1-8B", batch_size=b, seq_len=s, device="simulated", optimizer="sgd",
                          attention="math")
    assert theirs.parameter_count == ours.parameter_count
    # Hugging Face keeps the rotary frequencies as two buffers (inv_freq, original_inv_freq: 64 floats
    # each, a 512-byte block each); the project's Llama computes them in each forward pass.
    assert _bytes(theirs, "parameters") - _bytes(ours, "parameters") == 2 * round_up(64 * 4) == 1024
    norms = 2 * layers + 1
    assert _bytes(theirs, "activations") - _bytes(ours, "activations") == norms * b * s * h * 4


def test_sdpa_is_called_causal_without_a_mask_so_no_code_reads_tensor_values(monkeypatch):
    calls = []
    original = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    model = hf.build_causal_lm({"model_type": "llama", "vocab_size": 50, "hidden_size": 32, "intermediate_size": 64,
                                "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2})
    model(torch.randint(0, 50, (2, 8)))
    assert len(calls) == 2
    assert all(c.get("attn_mask") is None and c.get("is_causal") is True for c in calls)
    assert all(c.get("enable_gqa") is True for c in calls)  # the engine's limit, see helpers.models.hf


def test_configs_as_a_dict_a_file_a_folder_and_an_object_build_the_same_model(tmp_path):
    data = json.loads((hf_config.CONFIG_DIR / hf_config.SHIPPED[SMOL].file).read_text())
    (tmp_path / "config.json").write_text(json.dumps(data))
    from transformers import AutoConfig
    as_object = AutoConfig.for_model(**data)
    counts = set()
    for config in (SMOL, data, str(tmp_path / "config.json"), str(tmp_path), as_object):
        spec = resolve_model(config)
        assert spec.vocab_size == 49152
        with torch.device("meta"):
            counts.add(sum(p.numel() for p in spec.build().parameters()))
    assert counts == {134_515_008}
    assert StepConfig(model=data).label == "llama"
    assert StepConfig(model=as_object).label == "llama"
    assert StepConfig(model=SMOL).label == SMOL


@pytest.fixture(scope="module")
def smol():
    """SmolLM2-135M (2 layers), one AdamW step of 32 tokens: fully fine-tuned, with LoRA, with LoRA and
    checkpointing."""
    return {
        "full": profile_step(SMOL2, **STEP),
        "lora": profile_step(SMOL2, lora_rank=8, lora_targets=QV, **STEP),
        "lora-all": profile_step(SMOL2, lora_rank=8, lora_targets=ALL_LINEAR, **STEP),
        "lora-checkpointed": profile_step(SMOL2, lora_rank=8, lora_targets=QV, checkpoint=1, **STEP),
    }


def test_tied_weights_are_one_parameter_counted_once(smol):
    """SmolLM2's LM head is its token embedding: 134,515,008 parameters, not 162,826,560; in 2 layers, 35,392,320
    (each layer 3,540,096, the embedding 28,311,552 once)."""
    with torch.device("meta"):
        assert sum(p.numel() for p in hf.build_causal_lm(SMOL).parameters()) == 134_515_008
        model = hf.build_causal_lm(SMOL2)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    unique = {id(t): t for t in (*model.parameters(), *model.buffers())}.values()
    full = smol["full"]
    assert full.parameter_count == 35_392_320 == 134_515_008 - 28 * 3_540_096
    assert _bytes(full, "parameters") == sum(round_up(t.numel() * 4) for t in unique)
    assert _bytes(full, "gradients") == sum(round_up(p.numel() * 4) for p in model.parameters())


def _adapter_bytes(rank: int, shapes: list[tuple[int, int]]) -> int:
    """float32 bytes of LoRA's A (rank x in) and B (out x rank) for each adapted (in, out) layer, each a storage."""
    return SMOL_LAYERS * sum(round_up(rank * n_in * 4) + round_up(n_out * rank * 4) for n_in, n_out in shapes)


def test_lora_gives_gradients_and_adam_states_to_the_adapters_only(smol):
    lora = smol["lora"]
    adapters = _adapter_bytes(8, [(SMOL_H, SMOL_H), (SMOL_H, SMOL_KV)])  # q_proj, v_proj
    assert adapters == 2 * 8 * (576 + 576 + 576 + 192) * 4 == 122_880
    assert _bytes(lora, "gradients") == adapters
    assert _bytes(lora, "optimizer_states") == 2 * adapters  # exp_avg and exp_avg_sq; the step counts on the host
    assert sum(1 for s in lora.storages.values() if s.category == "gradients") == 2 * 2 * SMOL_LAYERS
    assert lora.params_without_grad == []
    assert _bytes(lora, "parameters") == _bytes(smol["full"], "parameters") + adapters
    everything = _adapter_bytes(8, [(576, 576), (576, 192), (576, 192), (576, 576),
                                    (576, 1536), (576, 1536), (1536, 576)])
    assert _bytes(smol["lora-all"], "gradients") == everything


def test_lora_still_keeps_the_activations(smol):
    """The frozen weights need no gradient, but the gradient still flows back through every layer to
    the adapters: with every linear layer adapted, LoRA keeps over 90% of full fine-tuning's
    activations; with q and v only, over half, already more than its adapters' gradients and
    Adam states at 32 tokens (and activations grow with the tokens, the adapters do not)."""
    full, lora, every = smol["full"], smol["lora"], smol["lora-all"]
    assert _bytes(every, "activations") > 0.9 * _bytes(full, "activations")
    assert _bytes(lora, "activations") > 0.5 * _bytes(full, "activations")
    assert _bytes(lora, "activations") > _bytes(lora, "gradients") + _bytes(lora, "optimizer_states")
    assert lora.peak_allocated_bytes < 0.5 * full.peak_allocated_bytes  # no full gradients, no full Adam states


def test_hugging_face_checkpointing_recomputes_every_layer_and_lowers_the_peak(smol):
    lora, checkpointed = smol["lora"], smol["lora-checkpointed"]
    recomputed = {e.module for e in checkpointed.events if e.phase == "recompute"}
    assert {f"base_model.model.model.layers.{i}.{part}" for i in range(SMOL_LAYERS)
            for part in ("input_layernorm", "self_attn.q_proj.lora_A.default", "mlp.up_proj")} <= recomputed
    # Non-reentrant checkpointing stops recomputing once the last tensor backward needs is back
    # (torch.utils.checkpoint's early stop): the frozen down_proj, which saves nothing, is not rerun.
    assert not any(name.endswith("mlp.down_proj") for name in recomputed)
    assert not any(e.phase == "recompute" for e in lora.events)
    assert checkpointed.peak_allocated_bytes < lora.peak_allocated_bytes
    assert _bytes(checkpointed, "gradients") == _bytes(lora, "gradients")  # the adapters still get theirs


@pytest.mark.parametrize("config, message", [
    ({"model_type": "nosuch"}, "transformers 5.23.0 does not know the architecture 'nosuch'"),
    ({"model_type": "llama", "auto_map": {"AutoModelForCausalLM": "modeling.Mine"}},
     "needs trust_remote_code (auto_map: AutoModelForCausalLM): refused"),
    ({"hidden_size": 8}, "has no model_type"),
    ("no/such/dir/config.json", "no config file 'no/such/dir/config.json'"),
    ({"model_type": "t5"}, "transformers cannot build a causal LM from t5"),
])
def test_a_config_that_cannot_run_is_refused_in_one_line(config, message):
    with pytest.raises(ValueError) as error:
        hf.build_causal_lm(config)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_config_file_that_is_not_json_is_refused_in_one_line(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match="cannot read .* as a config.json: Expecting property name"):
        hf_config.load_config(str(path))


@pytest.mark.parametrize("raised, message", [
    (OSError("We couldn't connect to 'https://huggingface.co' to load the files.\nCheck your connection."),
     "cannot fetch the config of 'someone/model' from the Hugging Face Hub (We couldn't connect"),
    (ValueError("The repository someone/model contains custom code which must be executed; "
                "pass the argument `trust_remote_code=True`."),
     "someone/model needs trust_remote_code"),
])
def test_a_hub_name_is_read_online_and_refused_in_one_line_otherwise(monkeypatch, raised, message):
    from transformers import AutoConfig
    asked = []

    def from_pretrained(name, trust_remote_code):
        asked.append((name, trust_remote_code))
        raise raised

    monkeypatch.setattr(AutoConfig, "from_pretrained", from_pretrained)
    monkeypatch.setattr(hf_config, "_hub_unreachable", lambda: "")  # as if online: the Hub is asked
    with pytest.raises(ValueError) as error:
        hf_config.load_config("someone/model")
    assert asked == [("someone/model", False)]
    assert message in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("options, message", [
    (dict(lora_rank=-1), "lora_rank must be an integer >= 0, got -1"),
    (dict(lora_rank=True), "lora_rank must be an integer >= 0, got True"),
    (dict(lora_targets=("q_proj",)), "lora_targets and lora_dropout apply to LoRA: give lora_rank too"),
    (dict(lora_rank=4, lora_targets=("q_proj", "")), "lora_targets must be names of linear layers"),
    (dict(lora_rank=4, lora_dropout=1.0), "lora_dropout must be a probability from 0 to below 1, got 1.0"),
])
def test_bad_lora_options_are_refused_by_step_config(options, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        StepConfig(model=SMOL, **options)


def test_a_lora_target_that_matches_no_layer_is_named_with_the_layers_there_are():
    with pytest.raises(ValueError) as error:
        profile_step(SMOL, lora_rank=4, lora_targets=("qkv",), batch_size=1, seq_len=8, device="simulated")
    assert ("LoRA target 'qkv' matches no linear layer of HuggingFaceTB/SmolLM2-135M; its linear layers are "
            "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, lm_head") in str(error.value)
    assert "\n" not in str(error.value)


def test_a_lora_target_string_is_one_target():
    assert StepConfig(model=SMOL, lora_rank=2, lora_targets="q_proj").lora_targets == ("q_proj",)
