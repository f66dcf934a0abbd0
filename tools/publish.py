"""Where the course is published, for the website's launch links: ``site/publish.cfg``.

Read by ``site/conf.py`` (the Jupyter Book theme's launch menu, :func:`theme_options`)
and ``tools/build_site.py`` (the widget notes say where a lesson can run,
:func:`launch_services`).  The file is ``site/publish.cfg``, or the one named by
the environment variable ``SITE_PUBLISH``.  Every link is off until set: no
repository (``repository_url``, else ``CITATION.cff``'s ``repository-code``),
or no service, gives no launch link.  Standard library only: it runs in the
website's environment and the lessons'.
"""

from __future__ import annotations

import configparser
import os
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: Google Colab's address: its launch link opens ``/github/ORG/REPO/blob/BRANCH/PATH``.
COLAB_URL = "https://colab.research.google.com"
#: Where the lesson notebooks are in the repository (the launch links open ``lessons/NN_topic.ipynb``).
LESSONS_IN_REPOSITORY = "lessons"


def settings(path: str | os.PathLike | None = None, citation: str | os.PathLike | None = None) -> dict[str, str]:
    """The ``[publish]`` section of ``path`` (default: ``$SITE_PUBLISH``, else ``site/publish.cfg``), each value
    stripped; ``repository_url`` falls back to the ``repository-code`` of ``citation`` (default: the
    repository's ``CITATION.cff``).

    Raises:
        ValueError: for a file that does not exist or has no ``[publish]`` section, or a URL that does not
            start with ``https://``.
    """
    path = pathlib.Path(path or os.environ.get("SITE_PUBLISH") or ROOT / "site" / "publish.cfg")
    parser = configparser.ConfigParser()
    if not parser.read(path) or not parser.has_section("publish"):
        raise ValueError(f"{path}: no [publish] section (see site/publish.cfg)")
    values = {key: value.strip() for key, value in parser["publish"].items()}
    if not values.get("repository_url"):
        cff = pathlib.Path(citation or ROOT / "CITATION.cff").read_text()
        found = re.search(r"^repository-code:\s*[\"']?([^\"'\s]+)", cff, re.M)
        values["repository_url"] = found.group(1) if found else ""
    for key in ("repository_url", "binderhub_url", "jupyterhub_url"):
        if values.get(key) and not values[key].startswith("https://"):
            raise ValueError(f"{path}: {key} must be an https:// address, got {values[key]!r}")
    return values


def launch_services(values: dict[str, str]) -> list[str]:
    """The services a lesson page links to, by name (``"Binder"``, ``"JupyterHub"``, ``"Colab"``); none
    without a repository."""
    if not values.get("repository_url"):
        return []
    named = [("Binder", values.get("binderhub_url")), ("JupyterHub", values.get("jupyterhub_url")),
             ("Colab", values.get("colab", "no").lower() in ("yes", "true", "1"))]
    return [name for name, on in named if on]


def theme_options(values: dict[str, str]) -> dict:
    """The Jupyter Book theme's options for the launch menu (``launch_buttons``, ``repository_url``,
    ``repository_branch``, ``path_to_docs``), or ``{}`` when no launch link is set."""
    services = launch_services(values)
    if not services:
        return {}
    buttons = {"notebook_interface": "jupyterlab"}
    if "Binder" in services:
        buttons["binderhub_url"] = values["binderhub_url"]
    if "JupyterHub" in services:
        buttons["jupyterhub_url"] = values["jupyterhub_url"]
    if "Colab" in services:
        buttons["colab_url"] = COLAB_URL
    return {"repository_url": values["repository_url"], "repository_branch": values.get("branch") or "main",
            "path_to_docs": LESSONS_IN_REPOSITORY, "launch_buttons": buttons}
