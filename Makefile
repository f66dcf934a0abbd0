# Two commands for a fresh machine (see README.md):
#   make lessons   set up .venv and open the lessons in JupyterLab (a working copy in my-lessons/)
#   make test      set up .venv and run the unit tests and strict nbval (without the slow groups)
# and, for the course's website: make site (build/site/html/index.html).
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
# Optional: another package index for torch and torchvision, e.g. PyTorch's
# CPU-only wheels (same versions, about 1 GB instead of 6 GB; see README.md):
#   make lessons TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
TORCH_INDEX_URL ?=
# The learner's working copies: JupyterLab saves here, never over lessons/.
WORK    = my-lessons
# Which lessons `make refresh-notebooks` rebuilds (default: all).
LESSONS ?= $(wildcard lessons/[0-9][0-9]*_*.py)

.PHONY: lessons test test-slow test-all test-other-cpu lint-imports setup refresh-notebooks symbolic-logs reset-lessons benchmark benchmark-published gpu-reference gpu-wheels site

# Bytecode: pip compiles every installed module on one core (about 70 s of CPU here, 16,577 files); compileall -j 0
# does the same on every core. A file that does not compile on this Python (torch's py312_intrinsics.py before 3.12)
# is left without bytecode, as pip leaves it, hence -qq and `|| true`: it is only read from source if imported.
# The editable install: pip (26) shows the build backend's warnings even with --quiet, and setuptools' flat-layout
# strategy warns, in a box of asterisks, that a folder named like the package may take precedence during imports
# (editable_wheel.py, _TopLevelFinder); here that folder is the package itself, so the box is silenced, by its message.
$(BIN)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(if $(TORCH_INDEX_URL),$(BIN)/python -m pip install --quiet --no-compile --index-url $(TORCH_INDEX_URL) \
	    $$(grep -E '^(torch|torchvision)==' requirements.txt))
	$(BIN)/python -m pip install --quiet --no-compile -r requirements.txt
	$(BIN)/python -m compileall -qq -j 0 "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" || true
	$(BIN)/python -W "ignore:Editable installation:UserWarning" -m pip install --quiet --no-deps -e .
	touch $@

setup: $(BIN)/.installed

# Copy each lesson into $(WORK)/ unless the learner already has it there, as a
# plain notebook (no jupytext pairing: saving it writes no .py beside it;
# tools/learner_copies.py), then open JupyterLab on the copies, with the
# course's JupyterLab settings (tools/jupyter-config: no news pop-up, no update
# check). JupyterLab refuses to run as root (common in containers) unless told to.
JUPYTER_SETTINGS = JUPYTER_CONFIG_PATH="$(CURDIR)/tools/jupyter-config$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}"
lessons: setup
	$(BIN)/python tools/learner_copies.py lessons $(WORK)
	$(JUPYTER_SETTINGS) $(BIN)/jupyter lab $(WORK)/ $(if $(filter 0,$(shell id -u)),--allow-root)

# Start over: replace the working copies with the committed lessons.
reset-lessons: setup
	rm -rf $(WORK)
	$(BIN)/python tools/learner_copies.py lessons $(WORK)

# One pytest worker per core (pytest-xdist), each test file or notebook whole on
# one worker, and one torch thread per worker: the step's many small operations
# run faster so than on threads that contend for the same cores. Each lesson runs
# once, under strict nbval, its exercise solutions after it in the same kernel.
# The slow groups (tests/conftest.py, SLOW) are left out: make test-slow runs them,
# make test-all runs both. Each target hands the files out in tests/conftest.py's
# order (--no-loadscope-reorder; heaviest_files_first): the heaviest first, a
# lesson weighing its run-all's seconds, a test file its measured seconds (COSTS),
# so that no long file is left to run alone at the end.
# Progress a person can read: how many items are done ([412/1310]) at each line's
# end, and the 15 slowest before pytest's closing line. PYTEST_ARGS: more options
# (PYTEST_ARGS=--durations=0 lists every item, for tools/test_costs.py).
PROGRESS = -o console_output_style=count --durations=15
PYTEST_ARGS ?=
XDIST = --dist loadfile --no-loadscope-reorder
test: setup
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n auto $(XDIST) -m "not slow" $(PROGRESS) $(PYTEST_ARGS)

# The slow groups: the website and the lessons in Chromium, the stub-driver
# oracle, the published figures, the short paths run in a kernel.
# PYTEST_WORKERS: how many at once (default one per core). Its 40 slowest items
# are listed at the end: where the time goes.
PYTEST_WORKERS ?= auto
test-slow: setup
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n $(PYTEST_WORKERS) $(XDIST) -m slow tests $(PROGRESS:15=40) $(PYTEST_ARGS)

# Both in one session (what .ci/run runs): the files of both groups share the
# workers, so neither group's last file runs alone, and pytest starts once.
test-all: setup
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n $(PYTEST_WORKERS) $(XDIST) $(PROGRESS:15=40) $(PYTEST_ARGS)

# The layers of helpers/ (.importlinter): no import up a layer, no circle.
lint-imports: setup
	$(BIN)/lint-imports

# The lessons under strict nbval as another CPU computes them: PyTorch's plain
# (unvectorised) kernels, MKL's AVX2 code path, one thread. Every checked
# output must be the same (.ci/run runs all of make test this way).
test-other-cpu: setup
	ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=AVX2 OMP_NUM_THREADS=1 $(BIN)/python -m pytest lessons

# Each lesson's source is lessons/NN_topic.py (NNa_topic.py and NNb_topic.py for a
# lesson in two parts; jupytext py:percent). Rebuild the notebook from it (keeping
# cell ids), run it top to bottom in a fresh kernel, and keep the widgets' readable
# stand-ins instead of views no one can display unrun. Of the cells' metadata only
# nbval's tags (nbval-ignore-output, ...) and their reason (nbval_reason) are kept.
refresh-notebooks: setup
	for src in $(LESSONS); do \
	    nb=$${src%.py}.ipynb; \
	    $(BIN)/jupytext --quiet --update --to ipynb --output "$$nb" "$$src" || exit 1; \
	    $(BIN)/jupyter nbconvert --to notebook --execute --inplace --log-level WARN \
	        --ExecutePreprocessor.store_widget_state=False --ExecutePreprocessor.record_timing=False \
	        --ClearMetadataPreprocessor.enabled=True --ClearMetadataPreprocessor.clear_notebook_metadata=False \
	        --ClearMetadataPreprocessor.preserve_cell_metadata_mask=tags \
	        --ClearMetadataPreprocessor.preserve_cell_metadata_mask=nbval_reason \
	        "$$nb" || exit 1; \
	    $(BIN)/python tools/strip_widget_views.py "$$nb" || exit 1; \
	done

# The symbolic logs shipped with the package (helpers/symbolic_logs/, issue 50): every
# lesson and its solutions run with each configuration traced symbolically at its first
# point and checked, the logs written there.  Again after any change of code at or
# below helpers.symbolic, not of its docstrings or comments (helpers.log_names.code_text;
# tests/test_shipped_logs.py says when).  Measured on the 2-core machine for version
# 0.11.0: every lesson and its solutions, 1,935 s of kernel CPU (about 32 minutes;
# each configuration traced symbolically and concretely); SHIP_ARGS="--jobs 2" runs
# two lessons at once.
symbolic-logs: setup
	PYTHONPATH=$(CURDIR) nice -n 19 $(BIN)/python tools/ship_symbolic_logs.py $(SHIP_ARGS)

benchmark: setup
	$(BIN)/python benchmarks/step_time.py
	$(BIN)/python benchmarks/gpt2_step.py
	$(BIN)/python benchmarks/widget_latency.py
	$(BIN)/python benchmarks/allocator_replay.py
	$(BIN)/python benchmarks/whole_step_reference.py
	$(BIN)/python benchmarks/real_step_on_stub.py
	$(BIN)/python benchmarks/explain_snapshot.py
	$(BIN)/python benchmarks/lesson_times.py
	$(BIN)/python benchmarks/finetune_step.py
	$(BIN)/python benchmarks/finetune_widget.py

# Published real-GPU figures beside the engine's (helpers/teaching/published.py):
# the whole table, 7B to 65B models included (several minutes on two cores).
benchmark-published: setup
	OMP_NUM_THREADS=1 $(BIN)/python benchmarks/published_figures.py

# Real-GPU figures beside the simulated ones, then the tests and lessons on the
# GPU (benchmarks/gpu_reference.py; without a GPU it says so and writes nothing);
# then, within 10 minutes, cuDNN workspaces and reductions measured on that card and
# every lesson run there as a notebook (benchmarks/gpu_tables.py; --budget SECONDS).
gpu-reference: setup
	$(BIN)/python benchmarks/gpu_reference.py
	$(BIN)/python benchmarks/gpu_tables.py

# For a GPU machine that has PyTorch but not the test packages (Python 3.12):
# their wheels, into .whl/ (see README.md, "Recording real-GPU figures"); and,
# without their dependencies (that machine has them), the pinned transformers,
# peft and bitsandbytes, whose wheel keeps only the CUDA 13.0 and CPU libraries
# (GPU_CUDA names another: 3.4 MiB instead of 41; tools/slim_wheel.py).
GPU_CUDA ?= cuda130
gpu-wheels:
	$(PYTHON) -m pip download --quiet --only-binary=:all: --python-version 3.12 --implementation cp \
	    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
	    -d .whl $$(grep -E '^(nbval|ipykernel|ipywidgets|jupytext|nbconvert)==' requirements.txt)
	$(PYTHON) -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	    --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
	    --platform manylinux2014_x86_64 \
	    -d .whl $$(grep -E '^(transformers|peft|bitsandbytes)==' requirements.txt)
	$(PYTHON) tools/slim_wheel.py $$(ls .whl/bitsandbytes-*.whl) $(GPU_CUDA) _cpu

# The course as a static website (Sphinx + myst-nb, tools/build_site.py) from the
# committed notebooks and their stored outputs, nothing executed, into
# build/site/html. Its packages (requirements-site.txt) go into an environment of
# their own, build/site-venv, so that `make setup` and the lessons' pins stay as
# they are. tests/test_site.py opens every page in Chromium.
SITE_VENV ?= build/site-venv
SITE_OUT  ?= build/site

$(SITE_VENV)/.installed: requirements-site.txt
	$(PYTHON) -m venv $(SITE_VENV)
	$(SITE_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(SITE_VENV)/bin/python -m pip install --quiet -r requirements-site.txt
	touch $@

site: $(SITE_VENV)/.installed
	$(SITE_VENV)/bin/python tools/build_site.py $(SITE_OUT)
