"""enroot layer: enroot's release packages for the node's architecture at the stack's version,
held, and `enroot version` answering it; the settings drop-in; pyxis built from the stack's
release and named in Slurm's plugin stack. At target stage, where Slurm is configured, srun
loads pyxis and lists its options.

The expected packages are read off the stack's artifact URLs for this architecture (Debian file
names, name_version_arch.deb), as roles/enroot reads them; Slurm's and pyxis's locations come
from the resolved vars where an image sets them, else the role's defaults."""

from __future__ import annotations

import json
import re
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import pytest

from nodeforge.probes import file_text, held_packages, package_status, package_version
from nodeforge.report import not_applicable

pytestmark = pytest.mark.layer("enroot")
DEB_NAME = re.compile(r"^(?P<package>[^_/]+)_(?P<version>[^_/]+)_(?P<arch>[^_/]+)\.deb$")
DROPIN = "/etc/enroot/enroot.conf.d/50-nodeforge.conf"
# roles/enroot/defaults/main.yml
DEFAULTS = {
    "enroot_pyxis_prefix": "/usr/local",
    "enroot_slurm_plugstack_conf": "/opt/slurm/etc/plugstack.conf",
    "enroot_slurm_srun": "/opt/slurm/bin/srun",
}


def _enroot(nodeforge: dict[str, Any]) -> dict[str, Any]:
    section: dict[str, Any] | None = nodeforge["stack"].get("enroot")
    if section is None:
        pytest.skip(f"stack {nodeforge['stack']['name']} has no enroot section")
    return section


def _setting(resolved: dict[str, Any], name: str) -> str:
    return str(resolved.get(name, DEFAULTS[name]))


def _packages(nodeforge: dict[str, Any]) -> dict[str, str]:
    """package -> version of the release .debs the stack names for this architecture."""
    names = _enroot(nodeforge)["packages"].get(nodeforge["arch"], [])
    assert names, f"the stack names no enroot packages for {nodeforge['arch']}"
    found: dict[str, str] = {}
    for name in names:
        url = nodeforge["stack"]["artifacts"][name]["url"]
        match = DEB_NAME.match(PurePosixPath(urlsplit(url).path).name)
        assert match, f"artifact {name}: {url} is not a name_version_arch.deb"
        found[match["package"]] = match["version"]
    return found


def _pyxis(nodeforge: dict[str, Any]) -> dict[str, Any]:
    pyxis: dict[str, Any] | None = _enroot(nodeforge).get("pyxis")
    if pyxis is None:
        not_applicable(f"stack {nodeforge['stack']['name']} builds no pyxis")
    return pyxis


def test_packages_at_the_stacks_release(
    host: Any, nodeforge: dict[str, Any], record_property: Any
) -> None:
    expected = _packages(nodeforge)
    actual = {package: package_version(host, package) for package in expected}
    record_property("declared", json.dumps(expected, sort_keys=True))
    record_property("actual", json.dumps(actual, sort_keys=True))
    assert actual == expected
    assert {package: package_status(host, package) for package in expected} == dict.fromkeys(
        expected, "installed"
    )


def test_packages_held(host: Any, nodeforge: dict[str, Any]) -> None:
    unheld = set(_packages(nodeforge)) - held_packages(host)
    assert not unheld, f"not held: {sorted(unheld)}"


def test_enroot_answers_the_stacks_release(
    host: Any, nodeforge: dict[str, Any], record_property: Any
) -> None:
    version = str(_enroot(nodeforge)["version"])
    reported = host.run("enroot version")
    record_property("declared", version)
    record_property("actual", reported.stdout.strip() or reported.stderr.strip())
    assert reported.rc == 0, reported.stderr
    assert reported.stdout.strip() == version


def test_settings_drop_in(host: Any, nodeforge: dict[str, Any]) -> None:
    _enroot(nodeforge)
    text = file_text(host, DROPIN)
    assert text is not None, f"{DROPIN} is missing"
    assert any(line.startswith("ENROOT_RUNTIME_PATH ") for line in text.splitlines()), text


def test_pyxis_built_from_the_stacks_release(
    host: Any, nodeforge: dict[str, Any], resolved: dict[str, Any], record_property: Any
) -> None:
    pyxis = _pyxis(nodeforge)
    prefix = _setting(resolved, "enroot_pyxis_prefix")
    record = json.loads(file_text(host, f"{prefix}/share/pyxis/nodeforge-build.json") or "{}")
    record_property("declared", pyxis["version"])
    record_property("actual", record.get("version", "no build record"))
    assert record.get("version") == pyxis["version"]
    assert record.get("sha256") == nodeforge["stack"]["artifacts"][pyxis["artifact"]]["sha256"]
    assert host.file(f"{prefix}/lib/slurm/spank_pyxis.so").is_file


def test_pyxis_in_slurms_plugin_stack(
    host: Any, nodeforge: dict[str, Any], resolved: dict[str, Any]
) -> None:
    _pyxis(nodeforge)
    plugin = f"{_setting(resolved, 'enroot_pyxis_prefix')}/lib/slurm/spank_pyxis.so"
    plugstack = PurePosixPath(_setting(resolved, "enroot_slurm_plugstack_conf"))
    conf = file_text(host, str(plugstack.parent / "plugstack.conf.d" / "pyxis.conf")) or ""
    assert any(line.split()[:2] == ["required", plugin] for line in conf.splitlines() if line), conf


@pytest.mark.stage("target")
def test_slurm_loads_pyxis(host: Any, nodeforge: dict[str, Any], resolved: dict[str, Any]) -> None:
    _pyxis(nodeforge)
    srun = _setting(resolved, "enroot_slurm_srun")
    help_text = host.run("%s --help", srun)
    assert help_text.rc == 0, help_text.stderr
    assert "[pyxis]" in help_text.stdout, "srun --help lists no pyxis option"
