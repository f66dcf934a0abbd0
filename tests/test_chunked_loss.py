"""``loss="chunked"``: next-token cross-entropy as torchtune's ``CEWithChunkedOutputLoss`` computes it.

The same loss as the whole-logits one (on real tensors), and, simulated, one float32 chunk of the logits at a time:
SmolLM2-135M's config cut to 2 of its 30 layers (vocabulary 49,152, a tied head: the loss is the head's, whatever
the depth) at 2 x 256 tokens, in bfloat16 under autocast, with LoRA.
"""

import json

import pytest
import torch
import torch.nn.functional as F

from helpers import StepConfig, profile_step
from helpers.__main__ import main
from helpers.hf_config import shipped_json
from helpers.models import OUTPUT_CHUNKS, chunked_output_loss
from helpers.models.hf import build_causal_lm

#: SmolLM2-135M's shipped config.json with 2 of its 30 decoder layers.
SMOL = {**shipped_json("HuggingFaceTB/SmolLM2-135M"), "num_hidden_layers": 2}
VOCAB, TOKENS = 49152, 2 * 256


def test_the_chunked_loss_is_the_whole_logits_loss():
    torch.manual_seed(0)
    config = {"model_type": "llama", "vocab_size": 97, "hidden_size": 32, "intermediate_size": 64,
              "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2}
    model = build_causal_lm(config)
    x = torch.randint(0, 97, (2, 19))
    targets = torch.randint(0, 97, (2, 19))
    whole = F.cross_entropy(model(x).logits.flatten(0, 1), targets.flatten())
    torch.testing.assert_close(chunked_output_loss(model, (x,), targets), whole)


@pytest.fixture(scope="module")
def profiles():
    options = dict(batch_size=2, seq_len=256, lora_rank=8, amp=True, amp_dtype="bfloat16", param_dtype="bfloat16",
                   steady_state=True, device="simulated")
    return {loss: profile_step(SMOL, loss=loss, **options) for loss in ("next_token", "chunked")}


def _logits_like(profile, dtype, rows):
    return [s for s in profile.at_peak() if s.dtype == dtype and s.nbytes == rows * VOCAB * dtype.itemsize]


def test_the_whole_logits_loss_holds_float32_logits_at_its_peak(profiles):
    assert len(_logits_like(profiles["next_token"], torch.float32, TOKENS)) == 2  # the log-softmax and its gradient


def test_chunks_are_upcast_one_at_a_time(profiles):
    chunked = profiles["chunked"]
    rows = TOKENS // OUTPUT_CHUNKS
    assert chunked.peak.phase == "loss"  # the last chunk's log-softmax is being written
    assert not _logits_like(chunked, torch.float32, TOKENS)
    assert len(_logits_like(chunked, torch.bfloat16, rows)) == OUTPUT_CHUNKS  # the head's output, chunk by chunk
    # each chunk's log-softmax (saved for backward) and the last chunk's float32 copy
    assert len(_logits_like(chunked, torch.float32, rows)) == OUTPUT_CHUNKS + 1
    assert chunked.peak_allocated_bytes < profiles["next_token"].peak_allocated_bytes - TOKENS * VOCAB * 2


def test_the_model_runs_whole_and_only_its_head_in_chunks(profiles):
    chunked = profiles["chunked"]
    assert chunked.find("", "fwd").phase == "fwd"  # the model's own forward ran: the end of the forward pass
    heads = [e for e in chunked.events if e.module == "base_model.model.lm_head" and e.phase == "fwd"]
    assert len(heads) == 1 and heads[0].shape == (2, 256 // OUTPUT_CHUNKS, VOCAB)  # one call, a list of chunks


def test_a_chunked_loss_needs_token_inputs_and_is_on_the_command_line(capsys, tmp_path):
    with pytest.raises(ValueError, match="loss='chunked' is a next-token loss"):
        profile_step("mlp", loss="chunked", device="simulated")
    with pytest.raises(ValueError, match=r"^loss='chunked' .* \(llama, mistral, qwen2, gpt2, bloom\), not GPT$"):
        profile_step("gpt2", seq_len=16, loss="chunked", device="simulated")
    bert = {"model_type": "bert", "vocab_size": 96, "hidden_size": 32, "num_hidden_layers": 1,
            "num_attention_heads": 2, "intermediate_size": 64, "is_decoder": True}
    with pytest.raises(ValueError, match=r"not a 'bert' model$"):
        profile_step(bert, seq_len=16, loss="chunked", device="simulated")
    with pytest.raises(ValueError, match="unknown loss 'chunks'"):
        StepConfig(loss="chunks")
    (tmp_path / "config.json").write_text(json.dumps(SMOL))
    assert main(["profile", "--model", str(tmp_path / "config.json"), "--batch-size", "1", "--seq-len", "16",
                 "--loss", "chunked", "--device", "simulated", "--json"]) == 0
    assert '"loss": "chunked"' in capsys.readouterr().out
