"""What the test suite's slowest items cost, in this checkout and, beside it, in another (an older commit).

``make test`` took 18:10 at 25029f4 where it took 7:43 at 3380f1e (the closing note of that stop).  This script
times, each in a fresh process, the work behind the suite's slowest items, so that a regression of the engine shows
as a ratio, not as minutes of a whole run on a shared machine:

* ``8b-lora``: a Llama-3.1 8B LoRA steady step with checkpointing, written from shallow traces (lesson 09's config);
* ``resnet18``: ResNet18 at batch 128, simulated (the lessons' running example);
* ``sharded``: lesson 07's cell of 16 FSDP2 steps (ResNet18 at batch 8, GPT-2 at 8 x 512, world sizes 1 to 8);
* ``published``: lesson 09b's comparison with the published figures (``finetune_comparison``), every row traced;
* ``widget-search``: the fine-tuning widget's "largest batch" search on SmolLM2-135M (``tests/test_widget_finetune.py``).

For each it prints the CPU seconds of the work (``time.process_time``, imports done first: what a loaded machine
does not inflate), its wall seconds, and how many training steps the step runner ran
(``helpers.step.StepRunner.run``): a count that grows where a cached answer used to be found is a cache miss.  With
``--against PATH`` (a checkout of another commit, e.g. ``git worktree add ../old 3380f1e``) every item also runs with
that checkout's ``helpers`` first on ``sys.path``, and the ratio now / then is printed.  Nothing is asserted: this
is a measurement, not a test.  Run with ``python benchmarks/test_time.py [--against PATH] [--only NAME ...]``.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent

#: name -> the code one child process runs: ``work()`` is timed; the names it needs are imported before.
ITEMS = {
    "8b-lora": (
        "from helpers import profile_step",
        "profile_step('meta-llama/Llama-3.1-8B', 1, seq_len=2048, amp=True, amp_dtype='bfloat16', optimizer='adamw',"
        " lora_rank=16, lora_targets=('q_proj', 'v_proj'), steady_state=True, checkpoint=1, device='simulated')"),
    "resnet18": (
        "from helpers import profile_step",
        "profile_step('resnet18', 128, device='simulated')"),
    "sharded": (
        "from helpers.fsdp import sharded_step",
        "[sharded_step('resnet18', n, batch_size=8) for n in range(1, 9)] + "
        "[sharded_step('gpt2', n, batch_size=8, seq_len=512) for n in range(1, 9)]"),
    "published": (
        "from helpers.teaching.published import finetune_comparison",
        "finetune_comparison()"),
    "widget-search": (
        "from helpers.teaching.widgets import FineTuneFit",
        "FineTuneFit('HuggingFaceTB/SmolLM2-135M', models=('HuggingFaceTB/SmolLM2-135M',), method='full fine-tuning',"
        " weights='float32', checkpointing=False, seq=1024, capacity='V100 16 GB', question='largest batch').largest"),
}

#: The child: counts the step runner's runs, warms the imports up (a tiny GPT-2 step), then times ``work()``.
CHILD = """
import json, sys, time
import helpers.step as _st
_runs = [0]
_run = _st.StepRunner.run
def _counted(self, *a, **k):
    _runs[0] += 1
    return _run(self, *a, **k)
_st.StepRunner.run = _counted
from helpers import profile_step
profile_step('gpt2', 1, seq_len=8, device='simulated')  # imports and first-call costs, not counted
{imports}
_runs[0] = 0
cpu, wall = time.process_time(), time.perf_counter()
{work}
print(json.dumps({{"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall, "runs": _runs[0],
                  "helpers": __import__("helpers").__file__}}))
"""


def measure(tree: pathlib.Path, name: str) -> dict:
    """CPU and wall seconds of item ``name`` with ``tree``'s ``helpers``, and the step runner's runs, in a fresh
    process (one torch thread, as ``make test`` runs).

    Raises:
        RuntimeError: if the child fails (its last lines of stderr in the message).
    """
    imports, work = ITEMS[name]
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", CHILD.format(imports=imports, work=work)], cwd=tree, env=env,
                          capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{name} in {tree} failed: {' / '.join(done.stderr.strip().splitlines()[-3:])}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if pathlib.Path(result["helpers"]).resolve().parent.parent != tree.resolve():
        raise RuntimeError(f"{name}: imported {result['helpers']}, not {tree}'s helpers")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=pathlib.Path, help="another checkout (an older commit) to time beside")
    parser.add_argument("--only", nargs="+", choices=sorted(ITEMS), help="these items only")
    args = parser.parse_args()
    names = args.only or list(ITEMS)
    print(f"{'item':<15} {'CPU s':>8} {'wall s':>8} {'steps':>6}" +
          (f" | {'then CPU s':>10} {'wall s':>8} {'steps':>6} | {'CPU now/then':>12}" if args.against else ""))
    for name in names:
        now = measure(ROOT, name)
        line = f"{name:<15} {now['cpu']:>8.1f} {now['wall']:>8.1f} {now['runs']:>6}"
        if args.against:
            then = measure(args.against, name)
            line += (f" | {then['cpu']:>10.1f} {then['wall']:>8.1f} {then['runs']:>6} | "
                     f"{now['cpu'] / then['cpu']:>12.2f}")
        print(line, flush=True)


if __name__ == "__main__":
    main()
