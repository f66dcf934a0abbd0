"""vLLM's start-up account (helpers.serving): the KV page, the traced weights and profile run, vLLM's arithmetic on
published logs, and the one-line refusals of the library and of ``python -m helpers serve``.

The logs are those of the project's research notes on vLLM's start-up logs (section 2, by number); their figures are
printed with two decimals in GiB, so each is known to ±0.005 GiB.
"""

import dataclasses
import math
import subprocess
import sys

import pytest

from helpers.__main__ import main
from helpers.hf_config import SHIPPED, load_config, shipped_configs
from helpers.serving import (NON_TORCH_BYTES, StartupAccount, WouldNotStart, kv_bytes_per_token, vllm_startup)
from helpers.transformer import kv_cache_bytes_per_token
from helpers.units import GiB, KiB

#: Half of a logged figure's last digit: vLLM prints GiB with two decimals.
ROUNDING = 0.005 * GiB


def _shape(name):
    text = load_config(name).get_text_config()
    head = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    return text.num_hidden_layers, text.num_key_value_heads or text.num_attention_heads, head


@pytest.mark.parametrize("name", shipped_configs())
def test_the_kv_page_per_token_is_the_configs_formula_for_every_shipped_config(name):
    """No shipped config has sliding windows or latent attention, so none is refused."""
    layers, kv_heads, head = _shape(name)
    assert kv_bytes_per_token(name) == kv_cache_bytes_per_token(layers, kv_heads, head, 2)
    assert kv_bytes_per_token(name, kv_cache_dtype="fp8") == kv_cache_bytes_per_token(layers, kv_heads, head, 1)
    assert kv_bytes_per_token(name, "float32") == kv_cache_bytes_per_token(layers, kv_heads, head, 4)


def test_the_kv_page_of_llama_3_8b_is_the_published_128_kib():
    """Notes, log 1: 32 layers x 8 KV heads x 128 x 2 x 2 bytes; Llama 3.1 has Llama 3's attention."""
    assert kv_bytes_per_token("meta-llama/Llama-3.1-8B") == 128 * KiB
    assert kv_bytes_per_token("meta-llama/Llama-2-7b-hf") == 512 * KiB  # log 16: multi-head attention


@pytest.mark.parametrize("config, reason", [
    ({"model_type": "qwen2", "use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 20},
     "vLLM refuses it: Sliding window for some but all layers is not supported"),
    ({"model_type": "deepseek_v3"}, "latent attention"),
    ({"model_type": "llama4_text", "attention_chunk_size": 8192}, "chunked local attention"),
])
def test_models_whose_layers_keep_other_than_full_or_windowed_keys_and_values_are_refused_with_the_reason(config,
                                                                                                        reason):
    with pytest.raises(ValueError) as error:
        kv_bytes_per_token(config)
    message = str(error.value)
    assert reason in message and "\n" not in message


def test_sliding_windows_are_sized_by_vllms_groups():
    """A window on every layer (Mistral 7B v0.1): one group, the same page per token as full attention; Gemma-2's
    alternation: two groups of half the layers, every layer still a page per block (tests/test_vllm_groups.py)."""
    mistral_v01 = {**load_config("mistralai/Mistral-7B-v0.3").to_dict(), "sliding_window": 4096}
    assert kv_bytes_per_token(mistral_v01) == kv_bytes_per_token("mistralai/Mistral-7B-v0.3") == 128 * KiB
    gemma2 = load_config({"model_type": "gemma2"})  # Gemma2Config's defaults: 26 layers, 4 KV heads of 256
    assert kv_bytes_per_token(gemma2) == 2 * 26 * 4 * 256 * 2


def test_a_qwen2_config_whose_window_is_off_is_full_attention():
    config = {**load_config("Qwen/Qwen2.5-7B").to_dict(), "use_sliding_window": False}
    assert kv_bytes_per_token(config) == kv_bytes_per_token("Qwen/Qwen2.5-7B") == 56 * KiB


@pytest.mark.parametrize("name", ["HuggingFaceTB/SmolLM2-135M", "meta-llama/Llama-3.1-8B", "Qwen/Qwen2.5-7B"])
def test_the_traced_weights_are_the_parameters_in_the_dtype(name):
    """Every parameter (tied ones once) and buffer placed, each rounded up to 512 bytes by the allocator."""
    account = vllm_startup(name, max_model_len=2048, max_num_batched_tokens=2048)
    weights = account.parameter_count * 2
    assert weights <= account.weights_bytes < weights * 1.0001
    if isinstance(SHIPPED[name].parameters, int):
        assert account.parameter_count == SHIPPED[name].parameters


def test_the_weights_of_llama_3_8b_are_those_logged():
    """Notes, log 1: "model weights take 14.96GiB" (Meta-Llama-3-8B; Llama 3.1 has the same parameters)."""
    account = vllm_startup("meta-llama/Llama-3.1-8B", max_model_len=8192, max_num_batched_tokens=2048)
    assert abs(account.weights_bytes - 14.96 * GiB) <= 0.01 * 14.96 * GiB
    assert abs(account.weights_bytes - 14.96 * GiB) <= ROUNDING


def _log1(**changes):
    """Log 1 (`vllm serve meta-llama/Meta-Llama-3-8B`, a V0 build of PR #10511): total 79.22 GiB, utilization 0.90,
    max_model_len 8192, V0's default max_num_batched_tokens max(8192, 2048), non-torch memory as logged, 1.79 GiB."""
    return vllm_startup("meta-llama/Llama-3.1-8B", gpu=round(79.22 * GiB), max_model_len=8192, version="0.6.5",
                        non_torch_bytes=round(1.79 * GiB), **changes)


def test_log_1_reproduced_the_arithmetic_of_the_account():
    account = _log1()
    assert (account.max_num_batched_tokens, account.max_num_seqs, account.num_reqs) == (8192, 256, 256)
    assert account.requested_bytes == pytest.approx(71.29 * GiB, abs=0.01 * GiB)  # "can use 71.29GiB"
    assert account.available_kv_bytes == (account.requested_bytes - account.weights_bytes
                                          - account.activation_peak_bytes - account.non_torch_bytes)
    assert account.block_bytes == 16 * 128 * KiB == 2 * 2**20
    assert account.num_blocks == math.floor(account.available_kv_bytes / account.block_bytes)
    assert account.kv_tokens == 16 * account.num_blocks
    assert account.max_concurrency == account.kv_tokens / 8192
    # the logged figures in the same arithmetic: 71.29 - 14.96 - 1.79 - 1.26 = 53.28, logged 53.29 (four roundings)
    logged = dataclasses.replace(account, weights_bytes=round(14.96 * GiB), activation_peak_bytes=round(1.26 * GiB))
    assert logged.available_kv_bytes == pytest.approx(53.29 * GiB, abs=4 * ROUNDING)
    assert abs(logged.num_blocks - 27_284) <= 4 * ROUNDING / account.block_bytes  # the notes' expected blocks


def test_log_1s_activation_peak_holds_the_float32_logits_and_lies_near_the_logged_one():
    """The logged 1.26 GiB: the traced run is within 35% of it (Hugging Face's kernels, not vLLM's; the sampler's
    temporaries not simulated), and holds at least the logits of 256 requests, in bfloat16 and float32."""
    account = _log1()
    vocab = load_config("meta-llama/Llama-3.1-8B").vocab_size
    assert account.activation_peak_bytes >= 256 * vocab * (2 + 4)
    assert abs(account.activation_peak_bytes - 1.26 * GiB) <= 0.35 * 1.26 * GiB


def test_the_profile_run_counts_the_logits_of_every_request_in_float32():
    small = vllm_startup("HuggingFaceTB/SmolLM2-135M", max_num_batched_tokens=2048, max_num_seqs=1)
    many = vllm_startup("HuggingFaceTB/SmolLM2-135M", max_num_batched_tokens=2048, max_num_seqs=2048)
    assert (small.num_reqs, many.num_reqs) == (1, 2048)
    assert many.activation_peak_bytes >= 2048 * 49152 * (2 + 4) > 20 * small.activation_peak_bytes


def _published(version, per_token, max_model_len, *, total=80.0, util=0.9, weights=0.0, activation=0.0,
               non_torch=0.0, blocks=None):
    """An account of logged figures (GiB), for vLLM's arithmetic alone; with ``blocks``, the budget that leaves
    exactly that many blocks (for logs that print the blocks, not the memory)."""
    account = StartupAccount("logged", version, "logged", round(total * GiB), util, "bfloat16", "none", "auto", 16,
                             max_model_len, 8192, 256, 256, 0, round(weights * GiB), round(activation * GiB),
                             round(non_torch * GiB), per_token)
    if blocks is not None:  # the weights take what the blocks leave, half a block to spare
        left = account.requested_bytes - (blocks + 0.5) * account.block_bytes
        account = dataclasses.replace(account, weights_bytes=math.floor(left))
    return account


@pytest.mark.parametrize("log, account, blocks", [
    # log 6: Qwen2.5-32B, TP 2 on L40S (v0.7.1): 4 KV heads per GPU, 128 KiB per token; "# CUDA blocks: 3947"
    ("6", _published("0.6.5", 128 * KiB, 10000, total=44.42, weights=30.71, activation=1.26, non_torch=0.30), 3947),
    # log 9: Qwen3-0.6B inferred, 112 KiB per token (V0, v0.8 or later); "# cuda blocks: 36184"
    ("9", _published("0.6.5", 112 * KiB, 8192, total=79.19, util=0.8, weights=1.12, activation=0.23,
                     non_torch=0.16), 36184),
    # log 12: Qwen3-14B (V1, October 2025), 160 KiB per token: "Available KV cache memory: 6.51 GiB" and
    # "GPU KV cache size: 42,656 tokens"
    ("12", _published("0.11", 160 * KiB, 32768, total=6.51 / 0.9), 42656 // 16),
])
def test_the_logged_budget_gives_the_logged_blocks(log, account, blocks):
    """Each figure is logged to ±0.005 GiB, so the blocks it gives are known to a few."""
    terms = 1 + sum(bool(n) for n in (account.weights_bytes, account.activation_peak_bytes, account.non_torch_bytes))
    assert abs(account.num_blocks - blocks) <= terms * ROUNDING / account.block_bytes + 1, log


@pytest.mark.parametrize("log, account, tokens, concurrency", [
    ("3", _published("0.6.5", 128 * KiB, 20000, total=23.58, blocks=1952), 31232, "1.56"),  # Llama-3.1-8B
    ("4", _published("0.6.5", 128 * KiB, 29000, total=23.58, blocks=1478), 23648, "0.82"),  # refused
    ("7", _published("0.11", 320 * KiB, 2048, blocks=1381), 22096, "10.79"),  # Llama-3.1-70B w8a8
    ("9", _published("0.6.5", 112 * KiB, 8192, blocks=36184), 578944, "70.67"),
    ("12", _published("0.11", 160 * KiB, 32768, total=8, blocks=2666), 42656, "1.30"),
])
def test_the_logged_blocks_give_the_logged_tokens_and_concurrency(log, account, tokens, concurrency):
    assert account.kv_tokens == tokens and f"{account.max_concurrency:.2f}" == concurrency, log
    assert (account.refusal is not None) == (log == "4"), log
    if log == "4":  # "The model's max seq len (29000) is larger than ... (23648)"
        assert "the longest that fits is 23,648 tokens" in account.refusal


def test_log_5s_negative_budget_leaves_no_block_and_vllm_would_not_start():
    """Log 5: 8.00 x 0.70 = 5.60 GiB; 5.20 + 0.03 + 1.42 leave -1.05 GiB: 0 blocks, 0.00x."""
    account = _published("0.6.5", 56 * KiB, 4096, total=8.00, util=0.70, weights=5.20, activation=1.42,
                         non_torch=0.03)
    assert account.available_kv_bytes == pytest.approx(-1.05 * GiB, abs=4 * ROUNDING)
    assert account.num_blocks == 0 and account.max_concurrency == 0
    assert "no memory is left for the KV cache" in account.refusal


def test_a_cache_too_small_for_one_sequence_is_refused_with_its_account():
    options = {"non_torch_bytes": 0, "max_num_batched_tokens": 2048, "max_num_seqs": 256}  # the same on any card
    fits = vllm_startup("HuggingFaceTB/SmolLM2-135M", **options)
    need = math.ceil(fits.max_model_len / 16) * fits.block_bytes
    total = math.ceil((fits.non_kv_cache_bytes + need / 2) / 0.9)
    with pytest.raises(WouldNotStart) as error:
        vllm_startup("HuggingFaceTB/SmolLM2-135M", gpu=total, **options)
    account = error.value.account
    assert isinstance(error.value, ValueError) and "\n" not in str(error.value)
    assert f"max_model_len {fits.max_model_len:,} tokens" in str(error.value)
    assert f"the longest that fits is {account.kv_tokens:,} tokens" in str(error.value)
    assert 0 < account.kv_tokens < fits.max_model_len and account.max_concurrency < 1
    assert vllm_startup("HuggingFaceTB/SmolLM2-135M", gpu=total, max_model_len=account.kv_tokens,
                        **options).num_blocks == account.num_blocks


def test_the_defaults_follow_the_card_and_the_version():
    h100 = vllm_startup("HuggingFaceTB/SmolLM2-135M")
    a100 = vllm_startup("HuggingFaceTB/SmolLM2-135M", gpu="A100 80 GB")
    v0 = vllm_startup("HuggingFaceTB/SmolLM2-135M", version="0.6.5", max_model_len=1024)
    assert (h100.max_num_batched_tokens, h100.max_num_seqs) == (8192, 1024)
    assert (a100.max_num_batched_tokens, a100.max_num_seqs) == (2048, 256)
    assert (v0.max_num_batched_tokens, v0.max_num_seqs) == (2048, 256)
    assert h100.max_model_len == 8192 and h100.non_torch_bytes == NON_TORCH_BYTES
    assert h100.max_concurrency == h100.num_blocks / (8192 / 16)


@pytest.mark.parametrize("kwargs, message", [
    ({"model": "no-such-model"}, "unknown model 'no-such-model'"),
    ({"gpu_memory_utilization": 0}, "gpu_memory_utilization must be in (0, 1], got 0"),
    ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization must be in (0, 1], got 1.5"),
    ({"max_model_len": 8193}, "max_model_len 8,193 exceeds the 8,192 positions"),
    ({"dtype": "float8"}, "unknown dtype 'float8'"),
    ({"kv_cache_dtype": "int4"}, "unknown kv_cache_dtype 'int4'"),
    ({"gpu": "H100"}, "unknown GPU 'H100'"),
    ({"version": "0.5"}, "unknown version '0.5'"),
    ({"max_num_seqs": 0}, "max_num_seqs must be an integer >= 1, got 0"),
    ({"version": "0.6.5", "max_model_len": 8192, "model": "meta-llama/Llama-3.1-8B", "max_num_batched_tokens": None,
      "gpu": "H100 80 GB", "max_num_seqs": None}, None),
    ({"version": "0.6.5", "max_model_len": 40000, "model": "meta-llama/Llama-3.1-8B"}, "give max_num_batched_tokens"),
])
def test_bad_input_is_one_line_naming_the_problem(kwargs, message):
    kwargs = {"model": "HuggingFaceTB/SmolLM2-135M", **kwargs}
    if message is None:  # a control: V0 below 32K tokens has its default
        assert vllm_startup(**kwargs).max_num_batched_tokens == 8192
        return
    with pytest.raises(ValueError) as error:
        vllm_startup(**kwargs)
    assert message in str(error.value) and "\n" not in str(error.value), str(error.value)


def test_the_command_line_prints_the_account_in_vllms_terms(capsys):
    assert main(["serve", "HuggingFaceTB/SmolLM2-135M", "--max-model-len", "4096", "--kv-cache-dtype", "fp8"]) == 0
    out = capsys.readouterr().out
    account = vllm_startup("HuggingFaceTB/SmolLM2-135M", max_model_len=4096, kv_cache_dtype="fp8")
    assert out.splitlines() == account.lines()
    for said in ("model weights take", "PyTorch activation peak memory takes", "non_torch_memory takes",
                 "Available KV cache memory:", f"GPU KV cache size: {account.kv_tokens:,} tokens",
                 "Maximum concurrency for 4,096 tokens per request:"):
        assert said in out


@pytest.mark.parametrize("args, message", [
    (["nope"], "unknown model 'nope'"),
    (["HuggingFaceTB/SmolLM2-135M", "--gpu-memory-utilization", "1.5"],
     "--gpu-memory-utilization must be in (0, 1], got 1.5"),
    (["HuggingFaceTB/SmolLM2-135M", "--max-model-len", "9000"], "--max-model-len 9,000 exceeds"),
    (["HuggingFaceTB/SmolLM2-135M", "--dtype", "float8"], "argument --dtype: invalid choice"),
    (["HuggingFaceTB/SmolLM2-135M", "--gpu", "V100 16 GB", "--gpu-memory-utilization", "0.02"],
     "no memory is left for the KV cache"),
])
def test_the_command_lines_bad_input_exits_with_2_and_one_line(capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        raise SystemExit(main(["serve", *args]))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert "_" not in err[0].partition("error: ")[2].split("'")[0].replace("max_position_embeddings", ""), err


def test_a_refused_start_prints_the_account_then_one_line():
    """In a fresh process: SmolLM2-135M (its profile run traced in a second or two) on a V100 with 4% of it for vLLM,
    0.63 GiB: its weights, activation peak and non-torch memory take 0.59 GiB, and the 40 MiB left hold less than
    one sequence of its 8,192 tokens (180 MiB)."""
    run = subprocess.run([sys.executable, "-m", "helpers", "serve", "HuggingFaceTB/SmolLM2-135M", "--gpu",
                          "V100 16 GB", "--gpu-memory-utilization", "0.04"], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 2
    assert "GPU KV cache size:" in run.stdout
    err = run.stderr.strip().splitlines()
    assert len(err) == 1 and "vLLM would not start" in err[0] and "--max-model-len" in err[0], run.stderr
    assert "one sequence of --max-model-len 8,192 tokens needs 0.18 GiB" in err[0], run.stderr


@pytest.mark.parametrize("max_model_len, peak_torch, refused", [(20_000, 17.06, False), (29_000, 17.98, True)])
def test_logs_3_and_4_the_activation_peak_near_the_logged_one_and_the_refusal_at_29000(max_model_len, peak_torch,
                                                                                        refused):
    """Logs 3 and 4 (Llama-3.1-8B-Instruct on an RTX 3090, 23.58 GiB, V0 v0.6.4): ``peak_torch_memory`` includes the
    weights (14.9888 "GB", GiB in fact), so the activation peak is their difference; the profile run is V0's default,
    max_model_len tokens in 256 sequences.  The traced peak lies within 10% of it; vLLM refused 29,000 tokens
    (23,648 fit), and so does the account, non-torch memory as logged (0.35 GiB)."""
    options = {"gpu": round(23.58 * GiB), "max_model_len": max_model_len, "version": "0.6.5",
               "non_torch_bytes": round(0.35 * GiB)}
    if refused:
        with pytest.raises(WouldNotStart) as error:
            vllm_startup("meta-llama/Llama-3.1-8B", **options)
        account = error.value.account
    else:
        account = vllm_startup("meta-llama/Llama-3.1-8B", **options)
    assert account.max_num_batched_tokens == max_model_len and account.num_reqs == 256
    logged = (peak_torch - 14.9888) * GiB
    assert abs(account.activation_peak_bytes - logged) <= 0.10 * logged
    assert (account.refusal is not None) == refused


def test_4_bit_weights_leave_the_kv_cache_what_they_save():
    """bitsandbytes' NF4 weights (vLLM's --quantization bitsandbytes): the linear layers' weights take half a byte each
    and a float32 scale per 64 (the embeddings and head stay in bfloat16); the KV cache per token is unchanged, and
    the bytes the weights save go to the KV cache, less what the profile run's peak moves."""
    full = vllm_startup("meta-llama/Llama-3.1-8B", gpu="RTX 4090 24 GB", max_model_len=8192)
    nf4 = vllm_startup("meta-llama/Llama-3.1-8B", gpu="RTX 4090 24 GB", max_model_len=8192, quantization="nf4")
    assert nf4.parameter_count == full.parameter_count == 8_030_261_248
    embeddings = 2 * 128_256 * 4096 * 2  # input embeddings and the untied head, bfloat16
    linear = full.parameter_count - 2 * 128_256 * 4096 - 65 * 4096  # less both of those and the 65 norms
    assert nf4.weights_bytes == pytest.approx(embeddings + 65 * 4096 * 2 + linear // 2 + linear // 64 * 4, rel=1e-3)
    assert nf4.kv_bytes_per_token == full.kv_bytes_per_token
    saved = full.weights_bytes - nf4.weights_bytes
    assert nf4.available_kv_bytes - full.available_kv_bytes == pytest.approx(saved, abs=0.5 * GiB)
    assert nf4.kv_tokens > 2 * full.kv_tokens  # 51,136 tokens become 127,232 on a 24 GB card


def test_weights_larger_than_the_card_are_not_told_to_raise_the_utilization():
    with pytest.raises(WouldNotStart, match="more than the whole card's 79.19 GiB: smaller weights") as e:
        vllm_startup("huggyllama/llama-65b", max_model_len=2048)
    assert e.value.account.weights_bytes > e.value.account.total_bytes


def test_fp8_and_int4_weights_by_formula():
    """fp8: a byte a weight of every linear layer but the head, and a scale each; 4-bit GPTQ/AWQ as Marlin keeps it:
    half a byte and a 16-bit scale per 128; embeddings, norms and head in the model's dtype.  Llama-3.1 8B: 32 layers
    of 7 linear weights, 6,979,321,856 weights in all."""
    fp8 = vllm_startup("meta-llama/Llama-3.1-8B", max_model_len=8192, quantization="fp8")
    int4 = vllm_startup("meta-llama/Llama-3.1-8B", max_model_len=8192, quantization="int4", dtype="float16")
    linear = 6_979_321_856
    rest = 8_030_261_248 - linear  # embeddings, head, norms
    assert fp8.weights_bytes == pytest.approx(linear + 2 * rest, abs=32 * 7 * 1024 + 2 * 2**20)
    assert int4.weights_bytes == pytest.approx(linear // 2 + linear // 128 * 2 + 2 * rest, abs=32 * 7 * 1024 + 2**21)
    assert fp8.activation_peak_bytes == vllm_startup("meta-llama/Llama-3.1-8B", max_model_len=8192).activation_peak_bytes
