"""Figures of profiled steps and the studies built on them, each a ``matplotlib.figure.Figure`` without ``pyplot``.

In every function ``unit`` is ``"MiB"`` or ``"GiB"`` (another raises ``ValueError``) and ``title`` the figure's title.

* :mod:`.steps`: one step over time, by category and by stage; peaks, bytes per parameter, gradient accumulation,
  inference and leaking loops (lessons 03-05b);
* :mod:`.allocator`: allocated against reserved, the memory map, a real snapshot explained (lessons 06 and 06a);
* :mod:`.recorded`: a real GPU's recorded steps against the simulation, and what a snapshot holds that its simulated
  twin does not (lessons 06, 06b);
* :mod:`.sharding`: FSDP's sharded steps (lesson 07);
* :mod:`.transformer`: a block's parts, memory against sequence length, fine-tuning setups against cards, published
  figures beside the engine's (lessons 08, 08b, 09, 09b);
* :mod:`.serving`: generation over time, vLLM's start-up account, requests that fit, the profile run, published
  start-ups beside the engine (lesson 10).
"""
from .allocator import FIRST_STEP, memory_map, plot_memory_map, plot_reserved, plot_reserved_bars, plot_snapshot
from .recorded import gpu_only_bytes, plot_gpu_only, plot_recorded_runs, recorded_excess, recorded_label
from .serving import (plot_activation_peak, plot_concurrency, plot_engine_beside_logs, plot_generation_timeline,
                      plot_startup_accounts)
from .sharding import plot_sharded_peaks, plot_sharded_timeline, plot_sharded_world_sizes
from .steps import (plot_accumulation, plot_bytes_per_parameter, plot_categories, plot_inference_and_leaks,
                    plot_peak_bars, plot_stages, plot_timeline)
from .transformer import (plot_finetune_peaks, plot_memory_vs_seq, plot_peak_vs_depth, plot_peak_vs_tokens,
                          plot_published_comparison, plot_stacked_parts)
