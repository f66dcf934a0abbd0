"""Wall time of vLLM's start-up account (helpers.serving.vllm_startup) of an 8B model at 8,192 tokens.

Prints the time of the first account (transformers imported, the model built and traced), then the median of
several more, each traced anew (the kept runs forgotten first), the account itself, and the process's peak RSS.
Targets: an 8B account at 8,192 tokens in at most 2 s when warm, on a 2-core CPU, in under 3 GiB.  Run with
``python benchmarks/serving_startup.py [--runs N] [--model NAME] [--tokens N] [--tp N] [--pp N]``: with ``--tp`` or
``--pp`` the account of one rank over several GPUs (issue 53's target: at most 1 s warm for an 8B at ``--tp 2``).
"""

import argparse
import resource
import statistics
import time

import torch

from helpers import profile, serving


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--model", default="meta-llama/Llama-3.1-8B")
    parser.add_argument("--tokens", type=int, default=8192, help="max_num_batched_tokens of the profile run")
    parser.add_argument("--tp", type=int, default=1, help="tensor_parallel_size")
    parser.add_argument("--pp", type=int, default=1, help="pipeline_parallel_size")
    args = parser.parse_args()

    def account():
        return serving.vllm_startup(args.model, max_model_len=8192, max_num_batched_tokens=args.tokens,
                                    tensor_parallel_size=args.tp, pipeline_parallel_size=args.pp)

    start = time.perf_counter()
    result = account()
    first = time.perf_counter() - start
    times = []
    for _ in range(args.runs):
        profile.forget_kept()  # trace again: the time of a new account, not of a kept one
        start = time.perf_counter()
        account()
        times.append(time.perf_counter() - start)
    start = time.perf_counter()
    account()
    kept = time.perf_counter() - start
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads")
    print("\n".join(result.lines()))
    print(f"first account (imports, build, trace): {first:.2f} s")
    print(f"warm, traced anew, over {args.runs} runs: median {statistics.median(times):.3f} s, "
          f"min {min(times):.3f} s, max {max(times):.3f} s")
    print(f"warm, the same account again (its traced run kept): {kept * 1000:.1f} ms")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    print(f"peak RSS of the process: {rss / 2**30:.2f} GiB (target: under 3 GiB)")


if __name__ == "__main__":
    main()
