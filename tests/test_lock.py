"""Locks: the writer and reader round-trip, bad locks are named with the fix, the variant check,
the pip command for a foreign interpreter, and the `nodeforge lock` command without a network."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from nodeforge.catalog.loader import Catalog, load_catalog
from nodeforge.cli import main
from nodeforge.errors import InputError
from nodeforge.lock import (
    MAGIC,
    Lock,
    Locked,
    LockFailedError,
    LockHeader,
    check_lock,
    expand_platform,
    lock_environment,
    pip_command,
    pip_environment,
    read_lock,
    render_lock,
    request_for,
    variant_cuda,
)
from tests.conftest import SHIPPED
from tests.fake_pip import fake_pip, report_item
from tests.mirror.spec import add_reference_stacks

CI_LOCK = SHIPPED / "locks" / "ci" / "train.txt"


@pytest.fixture(scope="module")
def labelled(tmp_path_factory: pytest.TempPathFactory) -> Catalog:
    """The shipped catalog with the mirror's reference stacks, whose torch builds (cu126,
    cu130 of 2.13) are the variant indexes' labelled ones."""
    copy = tmp_path_factory.mktemp("labelled") / "images"
    shutil.copytree(SHIPPED, copy, ignore=shutil.ignore_patterns("packer"))
    add_reference_stacks(copy)
    return load_catalog(copy)


HEADER = LockHeader(
    stack="hopper-2026.11",
    environment="train",
    python="3.11",
    platform="manylinux_2_34_x86_64",
    torch_variant="cpu",
    index_urls=["https://pypi.org/simple"],
    find_links=["/opt/wheels"],
    locked="2026-12-02T00:00:00Z",
)
SHA = "a" * 64


def _lock(**header: Any) -> Lock:
    return Lock(
        HEADER.model_copy(update=header),
        (
            Locked(name="torch", version="2.13.0+cpu", hashes=[SHA]),
            Locked(name="typing_extensions", version="4.16.0", hashes=["b" * 64, "c" * 64]),
        ),
    )


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "lock.txt"
    path.write_text(text, encoding="utf-8")
    return path


def test_round_trip(tmp_path: Path) -> None:
    text = render_lock(_lock())
    assert text.startswith(MAGIC + "\n# stack: hopper-2026.11\n")
    assert "typing-extensions==4.16.0 \\\n    --hash=sha256:" + "b" * 64 in text
    back = read_lock(_write(tmp_path, text))
    assert back.header == HEADER
    assert back.versions() == {"torch": "2.13.0+cpu", "typing-extensions": "4.16.0"}
    assert render_lock(back) == text


def test_shipped_ci_lock_is_hash_checked_and_cpu() -> None:
    lock = read_lock(CI_LOCK)
    check_lock(lock, CI_LOCK, torch_variant="cpu", python="3.11", torch="2.13.0+cpu")
    versions = lock.versions()
    assert versions["megatron-core"] == "0.16.1"
    assert versions["transformers"] == "5.24.0"
    assert {"accelerate", "torch"} <= versions.keys()
    assert all(len(r.hashes) >= 1 for r in lock.requirements)


def test_every_stack_lock_present_matches_its_stack(shipped: Catalog) -> None:
    for stack in shipped.stacks.values():
        if stack.frameworks is None:
            continue
        for name, environment in stack.frameworks.environments.items():
            for relative in environment.locks.values():
                path = shipped.root / relative
                if not path.exists():  # not lockable here: download.pytorch.org is unreachable
                    continue
                lock = read_lock(path)
                assert (lock.header.stack, lock.header.environment) == (stack.name, name)
                pin = stack.frameworks.torch_of(name)
                check_lock(
                    lock,
                    path,
                    torch_variant=pin.variant,
                    python=stack.frameworks.python,
                    torch=shipped.compat.locked_torch(pin.version, pin.variant),
                )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("torch==2.13.0\n", "not a nodeforge lock"),
        (f"{MAGIC}\n# stack: s\n", "header line is missing"),
        (f"{MAGIC}\n# colour: blue\n", "unknown header key 'colour'"),
        ("{magic}torch>=2.13 \\\n    --hash=sha256:" + SHA + "\n", "not pinned as name==version"),
        ("{magic}torch==2.13.0+cpu\n", "torch has no --hash"),
        ("{magic}torch==2.13.0+cpu --hash=md5:abc\n", "not a --hash=sha256"),
        ("{magic}", "the lock has no requirements"),
    ],
)
def test_bad_locks_are_named(tmp_path: Path, text: str, message: str) -> None:
    header = render_lock(_lock()).split("torch==")[0]
    path = _write(tmp_path, text.replace("{magic}", header))
    with pytest.raises(InputError, match=message) as raised:
        read_lock(path)
    assert str(path) in str(raised.value)


def test_duplicate_requirement(tmp_path: Path) -> None:
    text = render_lock(_lock()) + f"Typing.Extensions==4.0.0 --hash=sha256:{SHA}\n"
    with pytest.raises(InputError, match="'typing-extensions' is locked twice"):
        read_lock(_write(tmp_path, text))


def test_missing_lock_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read the lock") as raised:
        read_lock(tmp_path / "absent.txt")
    assert "nodeforge lock" in str(raised.value)


@pytest.mark.parametrize(
    ("lock", "variant", "python", "message"),
    [
        (_lock(), "cu130", "3.11", "lock is for torch variant cpu, the stack wants cu130"),
        (_lock(), "cpu", "3.12", "lock is for Python 3.11, the stack wants 3.12"),
        (
            _lock(torch_variant="cu130"),
            "cu130",
            "3.11",
            "the locked torch is 2.13.0\\+cpu, the stack wants 2.13.0\\+cu130",
        ),
    ],
)
def test_variant_check(lock: Lock, variant: str, python: str, message: str) -> None:
    with pytest.raises(InputError, match=message) as raised:
        check_lock(
            lock,
            Path("images/locks/x.txt"),
            torch_variant=variant,
            python=python,
            torch=f"2.13.0+{variant}",
        )
    assert "images/locks/x.txt" in str(raised.value)
    assert "Fix: regenerate the lock" in str(raised.value)


def test_variant_check_accepts_the_match() -> None:
    check_lock(_lock(), Path("x"), torch_variant="cpu", python="3.11", torch="2.13.0+cpu")


def test_variant_cuda() -> None:
    assert variant_cuda("cpu") is None
    assert variant_cuda("cu126") == "12.6"
    assert variant_cuda("cu130") == "13.0"


def test_expand_platform() -> None:
    tags = expand_platform("manylinux_2_28_aarch64")
    assert tags[0] == "manylinux_2_28_aarch64"
    assert tags[-2:] == ["manylinux_2_17_aarch64", "manylinux2014_aarch64"]
    assert expand_platform("macosx_14_0_arm64") == ["macosx_14_0_arm64"]


def test_request_defaults_and_pip_command(labelled: Catalog, tmp_path: Path) -> None:
    request = request_for(labelled.stacks["blackwell-2026.11"], "serve", "arm64", labelled.compat)
    assert request.requirements() == ["torch==2.13.0+cu130", "vllm==0.29.0"]
    assert request.index_urls == (
        "https://download.pytorch.org/whl/cu130",
        "https://pypi.org/simple",
    )
    assert request.overrides() is None
    command = pip_command(request, tmp_path / "r.json", tmp_path / "t")
    assert command[command.index("--python-version") + 1] == "3.12"
    assert command[command.index("--abi") + 1] == "cp312"
    assert "manylinux_2_34_aarch64" in command and "manylinux2014_aarch64" in command
    assert {"--dry-run", "--only-binary=:all:", "--ignore-installed"} <= set(command)


def test_request_for_pypi_s_own_torch(shipped: Catalog, tmp_path: Path) -> None:
    """PyPI's torch 2.15.0 is the cu132 build (compat.yml torch_pypi): pinned unlabelled, from
    PyPI alone; an environment's own torch (vLLM's) is its own."""
    stack = shipped.stacks["hopper-2026.12"]
    train = request_for(stack, "train", "x86_64", shipped.compat)
    assert train.torch == "2.15.0" and train.torch_variant == "cu132"
    assert train.requirements()[0] == "torch==2.15.0"
    assert train.index_urls == ("https://pypi.org/simple",)
    serve = request_for(stack, "serve", "x86_64", shipped.compat)
    assert serve.requirements() == ["torch==2.14.0", "vllm==0.33.0"]
    assert serve.overrides() is None
    as_of = datetime(2026, 12, 5, 7, 27, 55, tzinfo=UTC)
    pinned = request_for(stack, "train", "x86_64", shipped.compat, as_of=as_of)
    command = pip_command(pinned, tmp_path / "r.json", tmp_path / "t")
    assert command[command.index("--uploaded-prior-to") + 1] == "2026-12-05T07:27:55Z"
    assert "--uploaded-prior-to" not in pip_command(train, tmp_path / "r.json", tmp_path / "t")


def test_request_overrides(labelled: Catalog) -> None:
    request = request_for(
        labelled.stacks["hopper-2026.11"],
        "train",
        "x86_64",
        labelled.compat,
        python="3.11",
        torch_variant="cpu",
    )
    assert request.requirements()[0] == "torch==2.13.0+cpu"
    assert request.overrides() == "python 3.11 (stack 3.12), torch-variant cpu (stack cu126)"


def test_unknown_environment(labelled: Catalog) -> None:
    with pytest.raises(InputError, match="has no environment 'serve' \\(it has: train\\)"):
        request_for(labelled.stacks["hopper-2026.11"], "serve", "x86_64", labelled.compat)


def test_pip_environment_drops_resolution_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_FIND_LINKS", "/opt/wheels")
    monkeypatch.setenv("PIP_CERT", "/etc/ssl/certs/ca-certificates.crt")
    env = pip_environment()
    assert "PIP_FIND_LINKS" not in env
    assert env["PIP_CERT"] == "/etc/ssl/certs/ca-certificates.crt"


def test_as_of_must_be_a_lock_time(catalog_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["lock", "hopper-2026.12", "--as-of", "yesterday", "--catalog", str(catalog_dir)])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--as-of: 'yesterday' is not a UTC time like 2026-12-05T07:27:55Z" in err
    assert "Traceback" not in err


def test_as_of_is_the_locked_time(shipped: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_pip(monkeypatch, {"install": [report_item("torch", "2.15.0", SHA)]})
    as_of = datetime(2026, 12, 5, 7, 27, 55, tzinfo=UTC)
    request = request_for(
        shipped.stacks["hopper-2026.12"], "train", "x86_64", shipped.compat, as_of=as_of
    )
    lock = lock_environment(request, now=datetime(2027, 1, 1, tzinfo=UTC))
    assert lock.header.locked == "2026-12-05T07:27:55Z"


def test_lock_environment_from_report(labelled: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_pip(monkeypatch, {"install": [report_item("torch", "2.13.0+cu126", SHA)]})
    request = request_for(labelled.stacks["hopper-2026.11"], "train", "x86_64", labelled.compat)
    lock = lock_environment(request, now=datetime(2026, 12, 2, tzinfo=UTC))
    assert lock.header.locked == "2026-12-02T00:00:00Z"
    assert lock.header.torch_variant == "cu126"
    assert lock.requirements == (Locked(name="torch", version="2.13.0+cu126", hashes=[SHA]),)


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (report_item("torch", "2.13.0+cu126", None), "no sha256 for torch"),
        (report_item("torch", "2.13.0", SHA), "the indexes gave the wrong torch"),
    ],
)
def test_lock_environment_refuses(
    labelled: Catalog, monkeypatch: pytest.MonkeyPatch, item: dict[str, Any], message: str
) -> None:
    fake_pip(monkeypatch, {"install": [item]})
    request = request_for(labelled.stacks["hopper-2026.11"], "train", "x86_64", labelled.compat)
    with pytest.raises(LockFailedError, match=message):
        lock_environment(request)


def test_cli_unreachable_index_writes_nothing(
    catalog_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    add_reference_stacks(catalog_dir)
    fake_pip(monkeypatch, None)
    code = main(["lock", "hopper-2026.11", "--catalog", str(catalog_dir)])
    err = capsys.readouterr().err
    assert code == 1
    assert "lock failed" in err and "train-x86_64.txt not written" in err
    assert "No matching distribution found for torch==2.13.0+cu126" in err
    assert not (catalog_dir / "locks" / "hopper-2026.11").exists()


def test_cli_writes_the_stack_lock(
    catalog_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    add_reference_stacks(catalog_dir)
    fake_pip(monkeypatch, {"install": [report_item("torch", "2.13.0+cu126", SHA)]})
    assert main(["lock", "hopper-2026.11", "--catalog", str(catalog_dir)]) == 0
    path = catalog_dir / "locks" / "hopper-2026.11" / "train-x86_64.txt"
    assert f"{path}: 1 requirements" in capsys.readouterr().out
    assert read_lock(path).header.environment == "train"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope"], "no stack 'nope'"),
        (["local-debian13"], "the stack has no Python environments"),
        (["blackwell-2026.12", "-o", "x.txt"], "-o writes one lock"),
        (["blackwell-2026.12", "--platform", "manylinux_2_28_x86_64"], "one architecture"),
        (["hopper-2026.12", "--python", "3.11"], "is not the stack's lock"),
    ],
)
def test_cli_bad_usage(
    catalog_dir: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["lock", *args, "--catalog", str(catalog_dir)]) == 2
    assert message in capsys.readouterr().err
