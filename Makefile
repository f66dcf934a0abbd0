# Two commands for a fresh machine (see README.md):
#   make lessons   set up .venv and open the lessons in JupyterLab
#   make test      set up .venv and run the unit tests and strict nbval
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: lessons test setup refresh-notebooks benchmark

$(BIN)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

setup: $(BIN)/.installed

# JupyterLab refuses to run as root (common in containers) unless told to.
lessons: setup
	$(BIN)/jupyter lab lessons/ $(if $(filter 0,$(shell id -u)),--allow-root)

test: setup
	$(BIN)/python -m pytest

# Re-run every lesson top to bottom in a fresh kernel and store its outputs.
refresh-notebooks: setup
	for nb in lessons/*.ipynb; do $(BIN)/jupyter nbconvert --to notebook --execute --inplace --ExecutePreprocessor.store_widget_state=False "$$nb" || exit 1; done

benchmark: setup
	$(BIN)/python benchmarks/step_time.py
	$(BIN)/python benchmarks/widget_latency.py
