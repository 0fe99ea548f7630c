from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nodeforge.cli import main
from tests.conftest import SHIPPED, Edit


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_check_all_passes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "check", "--catalog", str(SHIPPED))
    assert code == 0
    assert "7 targets checked: 0 error(s)" in out


def test_check_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "check", "--catalog", str(SHIPPED), "--json", "p6-ubuntu24.04")
    assert code == 0
    report = json.loads(out)
    assert report["ok"] is True
    assert {t["profile"] for t in report["targets"]} == {"p6-b200.48xlarge", "p6-b300.48xlarge"}
    assert {r["id"] for r in report["rules"]} >= {"driver-floor", "known-bad"}


def test_check_violation_exit_1_names_rule_and_fix(
    capsys: pytest.CaptureFixture[str], edit: Edit, catalog_dir: Path
) -> None:
    def cu126(data: dict[str, Any]) -> None:
        data["frameworks"]["pytorch"]["variant"] = "cu126"

    edit("stacks/blackwell-2026.11.yml", cu126)
    code, out, _ = _run(capsys, "check", "--catalog", str(catalog_dir), "p6-ubuntu24.04")
    assert code == 1
    assert "ERROR [torch-sm] p6-ubuntu24.04 / p6-b200.48xlarge" in out
    assert "fix: use a variant that covers it" in out


def test_check_unverified_artifact(
    capsys: pytest.CaptureFixture[str], edit: Edit, catalog_dir: Path
) -> None:
    def strip(data: dict[str, Any]) -> None:
        data["artifacts"]["efa_installer"].pop("gpg_fingerprint")

    edit("stacks/hopper-2026.11.yml", strip)
    code, out, _ = _run(capsys, "check", "--catalog", str(catalog_dir), "p5-ubuntu24.04")
    assert code == 1
    assert "[artifact-unverified]" in out
    code, out, _ = _run(
        capsys, "check", "--catalog", str(catalog_dir), "--allow-unverified", "p5-ubuntu24.04"
    )
    assert code == 0
    assert "WARNING [artifact-unverified]" in out


def test_bad_input_exit_2_one_paragraph(
    capsys: pytest.CaptureFixture[str], catalog_dir: Path
) -> None:
    (catalog_dir / "os" / "debian12.yml").write_text("name: debian12\nversion: [\n")
    code, out, err = _run(capsys, "check", "--catalog", str(catalog_dir))
    assert code == 2
    assert out == ""
    assert err.startswith("nodeforge: error: ")
    assert "debian12.yml:" in err
    assert err.count("\n") == 1


def test_unknown_image_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "check", "--catalog", str(SHIPPED), "p9-ubuntu")
    assert code == 2
    assert "unknown image 'p9-ubuntu'" in err and "local-debian13" in err


def test_usage_error_exit_2() -> None:
    with pytest.raises(SystemExit) as info:
        main(["list", "everything"])
    assert info.value.code == 2


def test_render_to_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    output = tmp_path / "out" / "vars.json"
    code, out, _ = _run(
        capsys, "render", "--catalog", str(SHIPPED), "local-debian13", "-o", str(output)
    )
    assert code == 0
    assert "wrote" in out
    doc = json.loads(output.read_text())
    assert doc["nodeforge"]["image"] == "local-debian13"
    assert doc["nodeforge_manifest_path"] == "/etc/nodeforge/manifest.json"
    assert not list(output.parent.glob("*.tmp"))


def test_render_refuses_failing_target(
    capsys: pytest.CaptureFixture[str], edit: Edit, catalog_dir: Path, tmp_path: Path
) -> None:
    edit("stacks/blackwell-2026.11.yml", lambda d: d["driver"].update(flavour="proprietary"))
    output = tmp_path / "vars.json"
    code, _, err = _run(
        capsys,
        "render",
        "--catalog",
        str(catalog_dir),
        "p6-ubuntu24.04",
        "--profile",
        "p6-b200.48xlarge",
        "-o",
        str(output),
    )
    assert code == 1
    assert "[open-modules]" in err
    assert not output.exists()


@pytest.mark.parametrize("kind", ["images", "stacks", "profiles", "os"])
def test_list(capsys: pytest.CaptureFixture[str], kind: str) -> None:
    code, out, _ = _run(capsys, "list", kind, "--catalog", str(SHIPPED))
    assert code == 0
    assert len(out.splitlines()) > 3
    code, out, _ = _run(capsys, "list", kind, "--catalog", str(SHIPPED), "--json")
    assert code == 0 and isinstance(json.loads(out), list)


def test_show(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "show", "gb200-ubuntu24.04-arm64", "--catalog", str(SHIPPED))
    assert code == 0
    assert "blackwell-2026.11" in out and "p6e-gb200.36xlarge" in out
    code, out, _ = _run(capsys, "show", "p5-ubuntu24.04", "--catalog", str(SHIPPED), "--json")
    assert json.loads(out)["stack"]["name"] == "hopper-2026.11"


def test_matrix_lists_every_profile(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "matrix", "--catalog", str(SHIPPED), "--json")
    assert code == 0
    rows = json.loads(out)
    assert {r["instance type"] for r in rows} == {
        p.stem for p in (SHIPPED / "profiles").glob("*.yml")
    }
    assert next(r for r in rows if r["instance type"] == "p4d.24xlarge")["check"] == "no image"


def test_console_script_prints_no_traceback(tmp_path: Path) -> None:
    (tmp_path / "compat.yml").write_text("sources: [x]\ndriver_cuda: oops\n")
    result = subprocess.run(
        [sys.executable, "-m", "nodeforge.cli", "check", "--catalog", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "compat.yml" in result.stderr and "driver_cuda" in result.stderr
