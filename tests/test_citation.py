"""The material's version, licences and citation agree with each other.

One version number: ``pyproject.toml``'s ``version``, which ``CITATION.cff``, the
newest entry of ``CHANGELOG.md`` and the website (``site/conf.py`` reads it) state
too.  ``CITATION.cff`` is Citation File Format 1.2.0 (its keys and the types of
the fields it uses, checked here; in full by ``cffconvert --validate`` where
cffconvert is installed, which is not a dependency), names both licences, whom to
credit and how.  Where the course is published has no address yet: the two
address fields (``repository-code``, ``url``) stay commented out, for whoever
publishes it to fill in, and are checked once they are set.
"""

import datetime
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: The top-level keys of the Citation File Format 1.2.0 (its schema.json allows no others).
CFF_KEYS = {"abstract", "authors", "cff-version", "commit", "contact", "date-released", "doi", "identifiers",
            "keywords", "license", "license-url", "message", "preferred-citation", "references", "repository",
            "repository-artifact", "repository-code", "title", "type", "url", "version"}
#: The keys of a person and of an entity (``name`` required) in CFF 1.2.0.
PERSON_KEYS = {"family-names", "given-names", "name-particle", "name-suffix", "affiliation", "address", "city",
               "country", "email", "fax", "orcid", "post-code", "region", "tel", "website", "alias"}
ENTITY_KEYS = {"name", "address", "city", "country", "email", "fax", "orcid", "post-code", "region", "tel",
               "website", "alias", "date-start", "date-end", "location"}
#: The address fields whoever publishes the course fills in.
ADDRESSES = ("repository-code", "url")


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


def _check_cff(text: str) -> dict:
    """The checks of a CFF 1.2.0 file this course's CITATION.cff must pass; returns it parsed."""
    cff = yaml.safe_load(text)
    assert set(cff) <= CFF_KEYS, set(cff) - CFF_KEYS
    assert cff["cff-version"] == "1.2.0" and cff["type"] in ("software", "dataset")
    released = cff["date-released"]
    assert isinstance(released, datetime.date) or re.fullmatch(r"\d{4}-\d{2}-\d{2}", released)
    assert all(isinstance(k, str) and k for k in cff["keywords"])
    for author in cff["authors"]:
        keys = PERSON_KEYS if "family-names" in author or "given-names" in author else ENTITY_KEYS
        assert set(author) <= keys and all(isinstance(v, str) and v.strip() for v in author.values()), author
    for key in ADDRESSES:
        if key in cff:  # set by whoever publishes it: a real address, not the template's
            assert re.fullmatch(r"https://[^\s/]+\.[^\s]+", cff[key]) and "ORG" not in cff[key], cff[key]
        else:  # not yet: the field to fill in is there, commented out
            assert re.search(rf"^# {key}: \"https://", text, re.M), f"no {key} for the publisher to fill in"
    return cff


def test_citation_is_cff_1_2_and_says_whom_to_credit_and_how():
    cff = _check_cff((ROOT / "CITATION.cff").read_text())
    names = [a.get("name") or " ".join(filter(None, (a.get("given-names"), a.get("family-names"))))
             for a in cff["authors"]]
    assert names and all(names), cff["authors"]
    message = " ".join(cff["message"].split())
    for said in ("cite it as below", "credit them as", "Where does my GPU memory go?", "the authors listed here",
                 "https://creativecommons.org/licenses/by/4.0/", "say what you changed", "LICENSE"):
        assert said in message, f"CITATION.cff's message does not say {said!r}"


def test_the_publishers_addresses_once_filled_in(tmp_path):
    """Filled in as the comments say, the file is still CFF 1.2 and the website's launch links use it."""
    text = (ROOT / "CITATION.cff").read_text()
    filled = text.replace('# repository-code: "https://github.com/ORG/REPO"',
                          'repository-code: "https://github.com/example-org/gpu-memory-lessons"')
    filled = filled.replace('# url: "https://ORG.github.io/REPO/"', 'url: "https://example-org.github.io/gpu-memory-lessons/"')
    assert filled != text
    cff = _check_cff(filled)
    assert cff["repository-code"] == "https://github.com/example-org/gpu-memory-lessons"
    with pytest.raises(AssertionError):
        _check_cff(text.replace('# url: "https://ORG.github.io/REPO/"', 'url: "https://ORG.github.io/REPO/"'))
    (tmp_path / "CITATION.cff").write_text(filled)
    sys.path.insert(0, str(ROOT / "tools"))
    import publish

    values = publish.settings(ROOT / "site" / "publish.cfg", citation=tmp_path / "CITATION.cff")
    assert values["repository_url"] == "https://github.com/example-org/gpu-memory-lessons"


@pytest.mark.skipif(shutil.which("cffconvert") is None,
                    reason="cffconvert is not installed (pip install cffconvert==2.0.0 to validate in full)")
def test_cffconvert_validates_the_citation():
    run = subprocess.run(["cffconvert", "--validate", "-i", str(ROOT / "CITATION.cff")], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0 and "valid" in run.stdout, run.stdout + run.stderr
