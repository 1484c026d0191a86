"""The package's metadata says one thing everywhere (issue 28, items 7 and 8): pyproject.toml's
distribution name is not the index's unrelated `specgraph` and is the one the README tells a
user to look for, the import name is still `specgraph`, the licence is Apache-2.0 in SPDX form
(PEP 639, which needs scikit-build-core 0.11) with the full licence text shipped. What an
installed wheel carries (its dist-info, `importlib.metadata`) is checked by .ci/run after its
`pip install .`."""

from __future__ import annotations

import re

from conftest import ROOT

PYPROJECT = (ROOT / "pyproject.toml").read_text()


def field(name):
    m = re.search(rf'^{name} = "([^"]*)"$', PYPROJECT, re.M)
    assert m, f"pyproject.toml has no {name} = \"...\""
    return m.group(1)


def test_the_distribution_name_is_ours_and_the_readme_says_it():
    name = field("name")
    # "specgraph" on the package index is an unrelated project that also installs `specgraph`.
    assert name != "specgraph", name
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"The distribution is **`{name}`** (`pip show {name}`" in readme
    assert "the import name stays `specgraph`" in readme
    assert 'wheel.packages = ["python/specgraph"]' in PYPROJECT  # what `import specgraph` finds


def test_the_licence_is_apache_2_in_spdx_form_with_its_text():
    assert field("license") == "Apache-2.0"
    assert re.search(r'^license-files = \["LICENSE"\]$', PYPROJECT, re.M)
    floor = re.search(r'"scikit-build-core>=([0-9.]+)"', PYPROJECT).group(1)
    assert tuple(int(x) for x in floor.split(".")) >= (0, 11), floor  # PEP 639 support
    text = (ROOT / "LICENSE").read_text()
    assert text.split()[:5] == ["Apache", "License", "Version", "2.0,", "January"], text[:200]
    assert "END OF TERMS AND CONDITIONS" in text and len(text.splitlines()) == 202


def test_the_readme_names_every_public_header_and_stays_short():
    """The README is the front door: its "Where things are" names every public header, in at
    most 250 lines (issue 29)."""
    text = (ROOT / "README.md").read_text()
    where = text[text.index("## Where things are"):text.index("## Licence")]
    headers = sorted(p.name for p in (ROOT / "include" / "specgraph").iterdir())
    assert headers, "no public headers found"
    missing = [h for h in headers if f"`{h}`" not in where]
    assert not missing, missing
    assert len(text.splitlines()) <= 250, len(text.splitlines())
