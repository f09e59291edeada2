"""The release: one version, printed by `slicemeter --version`, declared by pyproject.toml
from its one source and described in CHANGELOG.md."""
from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import slicemeter

REPO = Path(__file__).resolve().parent.parent
SEMVER = re.compile(r"^\d+\.\d+\.\d+$")


def test_version_prints_the_release():
    out = subprocess.run([sys.executable, "-m", "slicemeter.cli", "--version"], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == f"slicemeter {slicemeter.__version__}"
    assert SEMVER.match(slicemeter.__version__)
    assert slicemeter.__version__ == "0.4.0"


def test_pyproject_reads_the_version_from_its_one_source():
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"]
    assert pyproject["project"]["dynamic"] == ["version"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "slicemeter.__version__"}


def test_the_changelog_describes_the_release_in_keep_a_changelog_form():
    text = (REPO / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", text, re.MULTILINE)
    names = [name for name, _ in releases]
    assert names[0] == "Unreleased"
    assert names[1] == slicemeter.__version__
    assert names[1:] == sorted(names[1:], key=lambda v: tuple(map(int, v.split("."))), reverse=True)
    assert all(SEMVER.match(name) and date for name, date in releases[1:])
    for section in re.findall(r"^### (.+)$", text, re.MULTILINE):
        assert section in {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}


def test_the_images_in_the_manifests_are_the_release():
    for manifest in ("deploy/ingest.yaml", "deploy/exporter/daemonset.yaml"):
        tags = re.findall(r"image: ghcr\.io/slicemeter/[\w-]+:(\S+)", (REPO / manifest).read_text())
        assert tags and set(tags) == {slicemeter.__version__}, manifest
