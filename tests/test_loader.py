from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from nodeforge.catalog.loader import Catalog, deep_merge, load_catalog
from nodeforge.errors import InputError
from tests.conftest import Edit


def _load_error(root: Path) -> InputError:
    with pytest.raises(InputError) as info:
        load_catalog(root)
    return info.value


def test_shipped_catalog_loads(shipped: Catalog) -> None:
    assert set(shipped.images) == {
        "p5-ubuntu24.04",
        "p6-ubuntu24.04",
        "gb200-ubuntu24.04-arm64",
        "local-debian12",
        "local-debian13",
        "p5-al2023",
    }
    assert len(shipped.profiles) == 8
    assert set(shipped.os) == {"ubuntu22.04", "ubuntu24.04", "debian12", "debian13", "al2023"}


def test_extends_merges_parent_then_child(shipped: Catalog) -> None:
    blackwell = shipped.stacks["blackwell-2026.12"]
    hopper = shipped.stacks["hopper-2026.12"]
    assert blackwell.driver.flavour == "open"
    assert hopper.driver.flavour == "profile"
    # inherited from the parent, key by key, environments included
    assert blackwell.nccl == hopper.nccl
    assert blackwell.efa == hopper.efa
    assert blackwell.frameworks is not None and hopper.frameworks is not None
    serve, parent = (
        blackwell.frameworks.environments["serve"],
        hopper.frameworks.environments["serve"],
    )
    assert serve.pytorch == parent.pytorch and serve.frameworks == parent.frameworks
    assert serve.locks["arm64"] == "locks/blackwell-2026.12/serve-arm64.txt"
    gb200 = shipped.images["gb200-ubuntu24.04-arm64"]
    assert gb200.arch == "arm64"
    assert gb200.stack == "blackwell-2026.12"  # from p6-ubuntu24.04, two levels up
    assert gb200.build.volume_size_gib == 150  # from p5-ubuntu24.04
    assert gb200.build.builder_instance_type == "c7g.4xlarge"


def test_deep_merge_replaces_lists() -> None:
    merged = deep_merge({"a": {"b": 1, "c": [1, 2]}, "d": 1}, {"a": {"c": [3]}, "e": 2})
    assert merged == {"a": {"b": 1, "c": [3]}, "d": 1, "e": 2}


def test_unknown_key_names_file_field_and_line(edit: Edit, catalog_dir: Path) -> None:
    def plant(data: dict[str, Any]) -> None:
        data["gpu"]["colour"] = "green"

    path = edit("profiles/p5.48xlarge.yml", plant)
    error = _load_error(catalog_dir)
    assert error.file == path
    assert error.field == "gpu.colour"
    assert error.line is not None
    assert path.read_text().splitlines()[error.line - 1].strip().startswith("colour:")
    assert "unknown key" in str(error)


def test_wrong_type_is_rejected_not_coerced(edit: Edit, catalog_dir: Path) -> None:
    def plant(data: dict[str, Any]) -> None:
        data["gpu"]["count"] = "8"

    edit("profiles/p5.48xlarge.yml", plant)
    error = _load_error(catalog_dir)
    assert error.field == "gpu.count"
    assert "integer" in error.message


def test_unquoted_version_is_rejected(catalog_dir: Path) -> None:
    path = catalog_dir / "stacks" / "hopper-2026.12.yml"
    path.write_text(path.read_text().replace('version: "595.91.07"', "version: 595.91"))
    error = _load_error(catalog_dir)
    assert error.field == "driver.version"
    assert error.line is not None and "595.91" in path.read_text().splitlines()[error.line - 1]


def test_error_in_inherited_field_points_at_the_child(edit: Edit, catalog_dir: Path) -> None:
    def plant(data: dict[str, Any]) -> None:
        data["driver"]["flavour"] = "closed"

    path = edit("stacks/blackwell-2026.12.yml", plant)
    error = _load_error(catalog_dir)
    assert error.file == path
    assert error.field == "driver.flavour"


def test_missing_required_field(edit: Edit, catalog_dir: Path) -> None:
    edit("os/debian12.yml", lambda data: data.pop("default_user"))
    error = _load_error(catalog_dir)
    assert error.field == "default_user"
    assert "required field is missing" in error.message


@pytest.mark.parametrize("kind", ["stacks", "profiles", "os"])
def test_missing_folder(catalog_dir: Path, kind: str) -> None:
    shutil.rmtree(catalog_dir / kind)
    error = _load_error(catalog_dir)
    assert error.file == catalog_dir / kind
    assert error.fix is not None


def test_missing_compat(catalog_dir: Path) -> None:
    (catalog_dir / "compat.yml").unlink()
    error = _load_error(catalog_dir)
    assert "compat.yml is missing" in str(error)


def test_missing_catalog_dir(tmp_path: Path) -> None:
    assert "not found" in str(_load_error(tmp_path / "nowhere"))


def test_missing_reference(edit: Edit, catalog_dir: Path) -> None:
    def plant(data: dict[str, Any]) -> None:
        data["profiles"] = ["p5.48xlarge", "p9.48xlarge"]

    path = edit("p5-ubuntu24.04.yml", plant)
    error = _load_error(catalog_dir)
    assert error.file == path
    assert error.field == "profiles"
    assert "p9.48xlarge" in error.message
    assert error.fix is not None and "p5e.48xlarge" in error.fix


def test_extends_cycle(edit: Edit, catalog_dir: Path) -> None:
    edit("stacks/hopper-2026.12.yml", lambda data: data.update(extends="blackwell-2026.12"))
    error = _load_error(catalog_dir)
    assert "cycle" in error.message
    assert error.field == "extends"


def test_extends_itself(edit: Edit, catalog_dir: Path) -> None:
    edit("local-debian13.yml", lambda data: data.update(extends="local-debian13"))
    assert "cycle" in _load_error(catalog_dir).message


def test_extends_unknown(edit: Edit, catalog_dir: Path) -> None:
    edit("local-debian13.yml", lambda data: data.update(extends="nothing"))
    error = _load_error(catalog_dir)
    assert "no image in this catalog has that name" in error.message
    assert error.fix is not None and "p5-ubuntu24.04" in error.fix


def test_name_must_match_file(edit: Edit, catalog_dir: Path) -> None:
    edit("os/debian12.yml", lambda data: data.update(name="debian-twelve"))
    error = _load_error(catalog_dir)
    assert error.field == "name"
    assert error.fix is not None and "debian12" in error.fix


def test_yaml_extension_is_named(catalog_dir: Path) -> None:
    (catalog_dir / "os" / "extra.yaml").write_text("name: extra\n")
    assert ".yml" in str(_load_error(catalog_dir))


def test_empty_file(catalog_dir: Path) -> None:
    (catalog_dir / "os" / "debian12.yml").write_text("")
    assert "empty file" in _load_error(catalog_dir).message


def test_baseline_unknown_must_have_no_value(edit: Edit, catalog_dir: Path) -> None:
    def plant(data: dict[str, Any]) -> None:
        data["baselines"]["bf16_matmul_tflops_per_gpu"]["value"] = 900.0

    edit("profiles/p5.48xlarge.yml", plant)
    assert "status is 'unknown'" in _load_error(catalog_dir).message


def test_artifact_reference_must_exist(edit: Edit, catalog_dir: Path) -> None:
    edit("stacks/hopper-2026.12.yml", lambda data: data["artifacts"].pop("gdrcopy"))
    assert "gdrcopy.artifact names artifact 'gdrcopy'" in _load_error(catalog_dir).message


def test_bad_sha256_and_fingerprint(edit: Edit, catalog_dir: Path) -> None:
    edit(
        "stacks/hopper-2026.12.yml",
        lambda data: data["artifacts"]["gdrcopy"].update(sha256="abc"),
    )
    error = _load_error(catalog_dir)
    assert error.field == "artifacts.gdrcopy.sha256"
    assert "64 lower-case hex" in error.message


def test_unknown_url_placeholder(edit: Edit, catalog_dir: Path) -> None:
    edit(
        "stacks/hopper-2026.12.yml",
        lambda data: data["repositories"]["cuda"].update(url="https://example.com/{distro}/"),
    )
    assert "unknown placeholder {distro}" in _load_error(catalog_dir).message
