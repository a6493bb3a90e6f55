"""CITATION.cff (issue #39): it parses, has what Citation File Format 1.2.0 requires of a file and of
each reference, and names the version that `hpstudy --version` prints."""

from pathlib import Path

import yaml

import hpstudy

CITATION = Path(__file__).resolve().parents[2] / "CITATION.cff"
REQUIRED = ("cff-version", "message", "title", "authors")  # CFF 1.2.0's required keys
REFERENCE_REQUIRED = ("type", "title", "authors")


def load():
    return yaml.safe_load(CITATION.read_text(encoding="utf-8"))


def named(author) -> bool:
    """A CFF person (family-names) or entity (name)."""
    return isinstance(author, dict) and bool(author.get("family-names") or author.get("name"))


def test_citation_has_the_required_keys_and_named_authors():
    cff = load()
    missing = [key for key in REQUIRED if key not in cff]
    assert not missing, f"CITATION.cff lacks {', '.join(missing)}"
    assert cff["cff-version"] == "1.2.0"
    assert cff["authors"] and all(named(a) for a in cff["authors"]), cff["authors"]
    for ref in cff.get("references", []):
        lacks = [key for key in REFERENCE_REQUIRED if key not in ref]
        assert not lacks, f"reference {ref.get('title')!r} lacks {', '.join(lacks)}"
        assert ref["authors"] and all(named(a) for a in ref["authors"]), ref["title"]


def test_citation_version_is_the_package_version():
    version = load()["version"]
    assert isinstance(version, str), f"version {version!r} reads as {type(version).__name__}: quote it"
    assert version == hpstudy.__version__, f"CITATION.cff says {version}, hpstudy.__version__ is {hpstudy.__version__}"


def test_citation_cites_the_paper_the_studies_reproduce():
    titles = {ref["title"]: ref for ref in load().get("references", [])}
    paper = titles.get("Early Convolutions Help Transformers See Better")
    assert paper is not None, f"no reference to Xiao et al. 2021 among {sorted(titles)}"
    assert paper["year"] == 2021 and "2106.14881" in paper["url"]
