"""`nodeforge build IMAGE --target local`: converge playbooks/image.yml into a systemd container.

Render, verify downloads, boot a container from the debootstrapped base image, converge, run
the build stage of the validation suite against the container, and only then commit it as a
local image. Whatever happens (failure, Ctrl-C), the container is removed and no image is left
half-tagged: the commit is an untagged image until the single `podman tag` at the very end.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from nodeforge.artifacts import artifacts_for, check_mirror, fetch_and_verify, fetch_key
from nodeforge.catalog.loader import Catalog
from nodeforge.errors import BuildFailedError, InputError
from nodeforge.local import podman
from nodeforge.local.baseimage import ensure_base_image
from nodeforge.local.playbook import PlaybookResult, Progress, run_playbook
from nodeforge.mirror import resolve_url
from nodeforge.outfile import output_folder, write_output
from nodeforge.render import UserOverrides, render, to_json
from nodeforge.target import Target
from nodeforge.validate import NOT_RUN, run_validation

# The only base images these machines can build (debootstrap from Debian's archive).
_SUITES = {("debian", "12"): "bookworm", ("debian", "13"): "trixie"}
REPOSITORY = "localhost/nodeforge"


@dataclass(frozen=True)
class BuildSummary:
    image_ref: str
    image: str
    profile: str
    seconds: float
    tasks: int
    changed: int
    changed_tasks: list[str]
    role_seconds: dict[str, float]
    """Seconds per role in the (first) converge."""
    validation: dict[str, int]
    bom: dict[str, str]
    log: str
    reconverge: dict[str, float] | None = None
    """Seconds and changes of a second converge into the same container (--reconverge)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def image_ref_for(target: Target) -> str:
    """localhost/nodeforge/<image>:<stack>: one tag per image and stack version."""
    return f"{REPOSITORY}/{target.image.name}:{target.stack.name}"


def base_suite(target: Target) -> str:
    suite = _SUITES.get((target.os.distribution, target.os.version))
    if suite is None:
        raise InputError(
            f"image {target.image.name} is built on {target.os.name}; local builds need a "
            "Debian 12 or 13 base image (the only ones debootstrap can make here)",
            fix="build it with --target aws, or pick an image on debian12 or debian13",
        )
    return suite


# The build host's CA bundle inside the build container: under /run, podman's tmpfs, so that
# neither the bundle nor its mount point is committed into the image.
BUILD_TRUST_STORE = "/run/nodeforge/build-host-ca-certificates.crt"
_TRUST_STORES = (
    Path("/etc/ssl/certs/ca-certificates.crt"),  # Debian, Ubuntu
    Path("/etc/pki/tls/certs/ca-bundle.crt"),  # Fedora, RHEL, Amazon Linux
)


def host_trust_store() -> Path | None:
    """The build host's system CA bundle, if it has one where distributions put it."""
    return next((path for path in _TRUST_STORES if path.is_file()), None)


def build_local(
    catalog: Catalog,
    target: Target,
    *,
    repo_root: Path,
    work_dir: Path,
    overrides: UserOverrides | None,
    overrides_path: Path | None,
    progress: Progress,
    reconverge: bool = False,
) -> BuildSummary:
    started = time.monotonic()
    suite = base_suite(target)
    output_folder(work_dir)
    document = render(
        catalog, target, mode="image", overrides=overrides, overrides_path=overrides_path
    )
    trust = host_trust_store()
    if trust is not None:
        # pip in the container trusts what the build host trusts (a TLS-inspecting proxy's CA
        # included); a user's own *_pip_cert wins
        for layer in ("python_ml", "gpu_health"):
            if target.layer(layer):
                document.setdefault(f"{layer}_pip_cert", BUILD_TRUST_STORE)
    vars_path = work_dir / "vars.json"
    write_output(vars_path, to_json(document))
    _preflight_downloads(target, document, work_dir / "artifacts", progress)

    podman.podman_path()
    base = ensure_base_image(suite, progress=progress)
    name = f"nodeforge-build-{target.image.name}-{uuid.uuid4().hex[:8]}"
    progress(f"booting {name} from {base}")
    mounts = [(trust, BUILD_TRUST_STORE)] if trust is not None else []
    with podman.SystemdContainer(base, name=name, read_only_mounts=mounts) as container:
        inventory = work_dir / "inventory.yml"
        inventory.write_text(
            json.dumps(
                {
                    "all": {
                        "hosts": {
                            container.name: {
                                "ansible_connection": "nodeforge_podman",
                                "ansible_python_interpreter": "/usr/bin/python3",
                            }
                        }
                    }
                }
            ),
            encoding="utf-8",
        )
        log = work_dir / "ansible.log"
        progress(f"converging playbooks/image.yml (full log: {log})")
        played = _converge(repo_root, inventory, vars_path, log, progress)
        second = None
        if reconverge:
            progress("converging again: a second converge must change nothing")
            again_started = time.monotonic()
            again = _converge(repo_root, inventory, vars_path, work_dir / "ansible-2.log", progress)
            second = {
                "seconds": round(time.monotonic() - again_started, 1),
                "tasks": again.tasks,
                "changed": again.changed,
            }
            if again.changed:
                raise BuildFailedError(
                    f"not idempotent: the second converge changed {again.changed} task(s): "
                    + ", ".join(again.changed_tasks)
                )
        validation = _validate(container.name, vars_path, work_dir, progress)
        bom = _bom(target, container)
        ref = image_ref_for(target)
        progress(f"committing {ref}")
        committed = _commit(container.name, target, progress)
    _tag(committed, ref)
    return BuildSummary(
        image_ref=ref,
        image=target.image.name,
        profile=target.profile.name,
        seconds=round(time.monotonic() - started, 1),
        tasks=played.tasks,
        changed=played.changed,
        changed_tasks=played.changed_tasks,
        role_seconds=played.roles.seconds,
        validation=validation,
        bom=bom,
        log=str(log),
        reconverge=second,
    )


def _converge(
    repo_root: Path, inventory: Path, vars_path: Path, log: Path, progress: Progress
) -> PlaybookResult:
    played = run_playbook(
        repo_root / "playbooks" / "image.yml",
        inventory=inventory,
        extra_vars=vars_path,
        repo_root=repo_root,
        log=log,
        progress=progress,
    )
    if played.returncode != 0:
        detail = "; ".join(played.failures) or f"ansible-playbook exited {played.returncode}"
        raise BuildFailedError(f"converge failed: {detail} (log: {log})")
    return played


def _preflight_downloads(
    target: Target, document: dict[str, Any], dest: Path, progress: Progress
) -> None:
    """A dead mirror or a tampered artifact stops the build before a container exists."""
    mirror = document["nodeforge"]["mirror"]
    if mirror is not None:
        check_mirror(mirror)
    for name, artifact in sorted(artifacts_for(target).items()):
        url = resolve_url(artifact.url, target, mirror)
        if url is None:
            continue
        signature = (
            resolve_url(artifact.signature_url, target, mirror) if artifact.signature_url else None
        )
        keyring = None
        if artifact.key_url is not None:
            key_url = resolve_url(artifact.key_url, target, mirror)
            if key_url is not None:
                keyring = fetch_key(name, key_url, dest)
        progress(f"verifying artifact {name}")
        fetch_and_verify(name, artifact, url, signature, dest, keyring=keyring, progress=progress)


def _validate(
    container: str, vars_path: Path, work_dir: Path, progress: Progress
) -> dict[str, int]:
    progress("validation (build stage)")
    run = run_validation(
        hosts=f"podman://{container}", vars_path=vars_path, stage="build", report_dir=work_dir
    )
    counts = run.counts
    if not run.ok:
        # a required check that did not run fails the build as a failed one does
        wrong = (run.failures() + run.not_run())[:3]
        failed = "; ".join(f"{c['id']}: {c['outcome']}: {c['message']}" for c in wrong)
        raise BuildFailedError(
            f"validation failed ({counts['failed']} failed, {counts[NOT_RUN]} not run): "
            f"{failed} (report: {run.json_report})"
        )
    progress(f"validation: {counts['passed']} passed, {counts['skipped']} skipped (not applicable)")
    return counts


def _bom(target: Target, container: podman.SystemdContainer) -> dict[str, str]:
    """What the image carries: the stack's pins for the enabled layers, the kernel as installed."""
    kernel = target.os_arch.kernel.image_package if target.os_arch else None
    bom = {"os": target.os.name, "stack": target.stack.name}
    if kernel and target.layer("base"):
        probe = container.exec(
            ["dpkg-query", "--show", "--showformat=${Version}", kernel], check=False
        )
        bom["kernel"] = f"{kernel} {probe.stdout.strip() or '(not installed)'}"
    return {**bom, **target.pinned_versions()}


# How often a long `podman commit` says it is still at work (a CUDA image is many GB).
COMMIT_HEARTBEAT_S = 30.0


def _commit(container: str, target: Target, progress: Progress) -> str:
    """The container as an untagged image; its id. Says every half minute that it is still at
    work: committing a CUDA image writes many GB."""
    argv = [
        podman.podman_path(), "commit",
        "--change", 'CMD ["/sbin/init"]',
        "--change", f"LABEL org.nodeforge.image={target.image.name}",
        "--change", f"LABEL org.nodeforge.stack={target.stack.name}",
        container,
    ]  # fmt: skip
    started = time.monotonic()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while True:
            try:
                out, err = process.communicate(timeout=COMMIT_HEARTBEAT_S)
                break
            except subprocess.TimeoutExpired:
                progress(f"still committing ({time.monotonic() - started:.0f} s)")
    except BaseException:
        process.kill()  # Ctrl-C: no half-written image keeps running behind us
        process.wait()
        raise
    if process.returncode != 0:
        raise podman.PodmanError(
            f"{' '.join(argv)} exited {process.returncode}: {(err or out).strip()}"
        )
    return out.strip().splitlines()[-1]


def _tag(committed: str, ref: str) -> None:
    """Point `ref` at the new image in one step; drop the image it pointed at before, if unused.

    Until the tag, the new image is only an id: an interrupted build removes it here.
    """
    previous = podman.run(["image", "inspect", "--format", "{{.Id}}", ref], check=False)
    tagged = False
    try:
        podman.run(["tag", committed, ref])
        tagged = True
    finally:
        if not tagged:
            podman.run(["rmi", "--force", committed], check=False)
    old = previous.stdout.strip()
    if previous.returncode == 0 and old and not committed.startswith(old[:12]):
        # fails harmlessly while another tag or a container still uses it
        podman.run(["rmi", old], check=False)
