"""The support matrix: instance type x OS x stack, with each target's check status."""

from __future__ import annotations

from nodeforge.catalog.loader import Catalog
from nodeforge.check import check_targets
from nodeforge.target import targets

HEADERS = (
    "instance type",
    "GPU",
    "arch",
    "image",
    "OS",
    "stack",
    "driver",
    "CUDA",
    "NCCL",
    "EFA",
    "PyTorch",
    "check",
)


def support_rows(catalog: Catalog) -> list[list[str]]:
    all_targets = targets(catalog)
    report = check_targets(all_targets, allow_unverified=True)
    rows = []
    for t in sorted(all_targets, key=lambda t: (t.profile.name, t.image.name)):
        stack = t.stack
        frameworks = stack.frameworks
        rows.append(
            [
                t.profile.name,
                f"{t.profile.gpu.count}x {t.profile.gpu.model}",
                t.image.arch,
                t.image.name,
                t.os.name,
                stack.name,
                f"{stack.driver.version} ({t.driver_flavour()})"
                if t.layer("nvidia_driver")
                else "-",
                stack.cuda.default if t.layer("cuda_toolkit") else "-",
                stack.nccl.version if stack.nccl and t.layer("nccl") else "-",
                stack.efa.installer_version if stack.efa and t.layer("efa") else "-",
                f"{frameworks.pytorch.version} {frameworks.pytorch.variant}"
                if frameworks and t.layer("python_ml")
                else "-",
                report.status_of(t.image.name, t.profile.name),
            ]
        )
    targeted = {t.profile.name for t in all_targets}
    for name, profile in sorted(catalog.profiles.items()):
        if name not in targeted:
            gpus = f"{profile.gpu.count}x {profile.gpu.model}"
            rows.append([name, gpus, profile.arch, *(["-"] * 8), "no image"])
    rows.sort(key=lambda r: (r[0], r[3]))
    return rows
