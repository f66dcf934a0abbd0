"""The material's version, licences and citation agree with each other.

One version number: ``pyproject.toml``'s ``version``, which ``CITATION.cff``, the
newest entry of ``CHANGELOG.md`` and the website (``site/conf.py`` reads it) state
too.  ``CITATION.cff`` has the keys the Citation File Format 1.2.0 requires
(``cff-version``, ``message``, ``title``, ``authors``; checked in full with
``cffconvert --validate``, which is not a dependency) and names both licences.
"""

import pathlib
import re

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _version() -> str:
    return re.search(r'^version = "(.+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)


def _cff() -> dict:
    return yaml.safe_load((ROOT / "CITATION.cff").read_text())


def test_citation_and_changelog_state_the_version_of_pyproject():
    version = _version()
    assert re.fullmatch(r"\d+\.\d+\.\d+", version)
    assert str(_cff()["version"]) == version
    newest = re.search(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), re.M).group(1)
    assert newest == version, f"CHANGELOG.md's newest entry is {newest}, the version is {version}"


def test_citation_file_has_the_required_keys_and_both_licences():
    cff = _cff()
    assert cff["cff-version"] == "1.2.0"
    for key in ("message", "title"):
        assert isinstance(cff[key], str) and cff[key].strip()
    assert cff["authors"] and all("name" in a or "family-names" in a for a in cff["authors"])
    assert set(cff["license"]) == {"MIT", "CC-BY-4.0"}


def test_licence_files_say_which_licence_covers_what():
    code = (ROOT / "LICENSE").read_text()
    lessons = (ROOT / "LICENSE-lessons").read_text()
    assert code.startswith("MIT License") and "LICENSE-lessons" in code
    assert "Creative Commons Attribution 4.0 International" in lessons
    assert "https://creativecommons.org/licenses/by/4.0/legalcode" in lessons
    readme = (ROOT / "README.md").read_text()
    assert "## Licence" in readme and "CC BY 4.0" in readme and "MIT" in readme
