"""pytest configuration shared by the unit tests and nbval.

nbval compares each stored cell output with a fresh run.  Warnings that
libraries print on stderr vary between machines and versions, so stderr is not
compared (as the MDAnalysis UserGuide does); everything else is, strictly,
after the substitutions in sanitize_output.cfg.
"""


def pytest_collectstart(collector):
    path = getattr(collector, "path", None)
    if path is not None and path.suffix == ".ipynb":
        collector.skip_compare += ("stderr",)
