"""A stand-in of NVIDIA's libnvidia-container apt repository (the container toolkit).

Upstream publishes four packages per release, at one version (the install guide pins them all
alike): libnvidia-container1, libnvidia-container-tools (nvidia-container-cli),
nvidia-container-toolkit-base (nvidia-ctk, nvidia-container-runtime, nvidia-cdi-hook and, from
1.18, the nvidia-cdi-refresh units) and nvidia-container-toolkit (the legacy runtime hook).

The stub `nvidia-ctk` answers the subcommands nodeforge uses, with the real CLI's syntax:

- `--version`;
- `runtime configure --runtime=containerd|docker [--config=PATH] [--drop-in-config=PATH]
  [--config-source=file|command] [--set-as-default] [--cdi.enabled] [--dry-run]`, as 1.18 does
  it (pkg/config/engine/containerd): the config it starts from is the top-level file
  (`file`, the default) or `containerd config dump` (`command`); for containerd the nvidia
  runtime goes to a drop-in file (default `/etc/containerd/config.d/99-nvidia.toml`, the 1.18.0
  path that 1.18.1 corrected to `conf.d`, NVIDIA/nvidia-container-toolkit#1404) that starts
  from the source's whole CRI section (containerd before 2.1 replaces a plugin's section by key
  when it merges imports), with runc's options copied to the nvidia runtime; the top-level
  config gets an `imports` entry for the drop-in's folder (`<dir>/*.toml`). The version comes
  from the source (2 when it is empty, 1 when it names none); `--drop-in-config=` (empty)
  rewrites the top-level file instead. For docker it edits `/etc/docker/daemon.json`
  (runtimes.nvidia, default-runtime, features.cdi). Like the real one it rewrites every time it
  is run: callers check before they configure;
- `cdi generate [--output=PATH]` (or NVIDIA_CTK_CDI_OUTPUT_FILE_PATH, what the
  nvidia-cdi-refresh unit sets): fails as the real one does without a driver (NVML cannot be
  loaded) when sysfs shows no NVIDIA GPU (vendor 0x10de, class 0x0300/0x0302) or /dev/nvidia0 is
  missing; otherwise writes a small CDI spec naming each GPU by index and `all`.
  NODEFORGE_SYSFS_ROOT (default /sys) and NODEFORGE_DEV_ROOT (default /dev) fake the hardware.

The stub is a Python 3 script (the targets run Ansible, so python3 is there); it touches no GPU.
"""

from __future__ import annotations

from tests.mirror.aptrepo import RepoSpec
from tests.mirror.debs import DebSpec

PATH = "nvidia.github.io/libnvidia-container/stable/deb/amd64"
KEY = "nvidia.github.io/libnvidia-container/gpgkey"
_UNITS = "/usr/lib/systemd/system"

_NVIDIA_CTK = r'''#!/usr/bin/python3
"""nodeforge test stub of nvidia-ctk @VERSION@: the real CLI's syntax, no GPU, no NVML."""
import copy, json, os, re, subprocess, sys, tomllib

VERSION = "@VERSION@"
RUNTIME = "/usr/bin/nvidia-container-runtime"


def log(level, message):
    print(f"{level}[0000] {message}", file=sys.stderr)


def options(args):
    """--name=value, --name value and bare --flag, as urfave/cli takes them."""
    found, rest, i = {}, [], 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--") and "=" in arg:
            name, _, value = arg[2:].partition("=")
            found[name] = value
        elif arg.startswith("--") and arg[2:] in FLAGS:
            found[arg[2:]] = "true"
        elif arg.startswith("--") and i + 1 < len(args):
            found[arg[2:]] = args[i + 1]
            i += 1
        else:
            rest.append(arg)
        i += 1
    return found, rest


FLAGS = {"set-as-default", "nvidia-set-as-default", "cdi.enabled", "enable-cdi", "dry-run"}


def read(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return ""


def write(path, text):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def toml_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    return json.dumps(value)


def toml_key(key):
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def toml_dumps(tree):
    """A TOML document of nested tables (what containerd's configs hold), keys in order."""
    lines = []

    def emit(table, path):
        if path:
            lines.extend(["", "[" + ".".join(toml_key(part) for part in path) + "]"])
        for key, value in table.items():
            if not isinstance(value, dict) and not (
                    isinstance(value, list) and value and all(isinstance(v, dict) for v in value)):
                lines.append(f"{toml_key(key)} = {toml_value(value)}")
        for key, value in table.items():
            if isinstance(value, dict):
                emit(value, (*path, key))
            elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
                for item in value:
                    name = ".".join(toml_key(part) for part in (*path, key))
                    lines.extend(["", f"[[{name}]]"])
                    lines.extend(f"{toml_key(k)} = {toml_value(v)}" for k, v in item.items())

    emit(tree, ())
    return "\n".join(lines).lstrip("\n") + "\n"


def source_config(opts, top):
    """The config nvidia-ctk starts from: the top-level file (--config-source=file, the
    default), or containerd's own merged view (--config-source=command)."""
    if opts.get("config-source", "file") == "command":
        dump = subprocess.run(["containerd", "config", "dump"], capture_output=True, text=True)
        if dump.returncode != 0:
            log("ERRO", f"failed to load config: {dump.stderr.strip()}")
            return None
        return tomllib.loads(dump.stdout)
    return tomllib.loads(read(top))


def with_nvidia(config, plugin, default, cdi):
    """config with the nvidia runtime added as 1.18 adds it: runc's options copied, the
    runtime binary set, CDI and the default runtime as asked."""
    cri = config.setdefault("plugins", {}).setdefault(plugin, {})
    runtimes = cri.setdefault("containerd", {}).setdefault("runtimes", {})
    nvidia = copy.deepcopy(runtimes.get("runc") or {
        "privileged_without_host_devices": False, "runtime_engine": "", "runtime_root": "",
        "runtime_type": "io.containerd.runc.v2"})
    nvidia.setdefault("options", {})["BinaryName"] = RUNTIME
    runtimes["nvidia"] = nvidia
    if cdi:
        cri["enable_cdi"] = True
    if default:
        cri["containerd"]["default_runtime_name"] = "nvidia"
    return config


def configure_containerd(opts):
    top = opts.get("config") or "/etc/containerd/config.toml"
    drop_in = opts.get("drop-in-config", "/etc/containerd/config.d/99-nvidia.toml")
    source = source_config(opts, top)
    if source is None:
        return 1
    version = source.get("version", 1) if source else 2
    log("INFO", f"Using config version {version}")
    plugin = "io.containerd.grpc.v1.cri" if version < 3 else "io.containerd.cri.v1.runtime"
    default = "set-as-default" in opts or "nvidia-set-as-default" in opts
    cdi = "cdi.enabled" in opts or "enable-cdi" in opts
    if not drop_in:
        # no drop-in: the whole top-level file, rewritten
        text = toml_dumps(with_nvidia({"version": version, **source}, plugin, default, cdi))
        if "dry-run" in opts:
            print(text, end="")
            return 0
        write(top, text)
        log("INFO", f"Wrote updated config to {top}")
        log("INFO", "It is recommended that containerd daemon be restarted.")
        return 0
    # containerd before 2.1 replaces a plugin's section by key when it merges imports: the
    # drop-in starts from the source's whole CRI section, or it would lose runc.
    base = copy.deepcopy(source.get("plugins", {}).get(plugin, {}))
    text = toml_dumps(with_nvidia({"version": version, "plugins": {plugin: base}}, plugin,
                                  default, cdi))
    if "dry-run" in opts:
        print(text, end="")
        return 0
    write(drop_in, text)
    pattern = os.path.dirname(drop_in) + "/*.toml"
    top_text = read(top)
    imports = re.search(r"^imports\s*=\s*\[(.*)\]\s*$", top_text, re.M)
    if imports is None:
        match = re.search(r"^version\s*=\s*\d+\n", top_text, re.M)
        line = f'imports = ["{pattern}"]\n'
        if match:
            top_text = top_text[: match.end()] + line + top_text[match.end():]
        else:
            top_text = f"version = {version}\n" + line + top_text
    elif f'"{pattern}"' not in imports.group(1):
        items = [s for s in (imports.group(1).strip(), f'"{pattern}"') if s]
        line = f"imports = [{', '.join(items)}]"
        top_text = top_text[: imports.start()] + line + top_text[imports.end():]
    write(top, top_text)
    log("INFO", f"Wrote updated config to {drop_in}")
    log("INFO", "It is recommended that containerd daemon be restarted.")
    return 0


def configure_docker(opts):
    path = opts.get("config") or "/etc/docker/daemon.json"
    if opts.get("drop-in-config"):
        log("ERRO", "runtime docker does not support drop-in configs")
        return 1
    config = json.loads(read(path) or "{}")
    config.setdefault("runtimes", {})["nvidia"] = {"args": [], "path": "nvidia-container-runtime"}
    if "set-as-default" in opts or "nvidia-set-as-default" in opts:
        config["default-runtime"] = "nvidia"
    if "cdi.enabled" in opts or "enable-cdi" in opts:
        config.setdefault("features", {})["cdi"] = True
    text = json.dumps(config, indent=4) + "\n"
    if "dry-run" in opts:
        print(text, end="")
        return 0
    write(path, text)
    log("INFO", f"Wrote updated config to {path}")
    log("INFO", "It is recommended that docker daemon be restarted.")
    return 0


def gpus(root):
    devices = os.path.join(root, "bus/pci/devices")
    found = []
    for name in sorted(os.listdir(devices)) if os.path.isdir(devices) else []:
        folder = os.path.join(devices, name)
        vendor = read(os.path.join(folder, "vendor")).strip()
        klass = read(os.path.join(folder, "class")).strip()[:6]
        if vendor == "0x10de" and klass in ("0x0300", "0x0302"):
            found.append(name)
    return found


def cdi_generate(opts):
    output = opts.get("output") or os.environ.get("NVIDIA_CTK_CDI_OUTPUT_FILE_PATH", "")
    dev = os.environ.get("NODEFORGE_DEV_ROOT", "/dev")
    found = gpus(os.environ.get("NODEFORGE_SYSFS_ROOT", "/sys"))
    if not found or not os.path.exists(os.path.join(dev, "nvidia0")):
        log("ERRO", "failed to generate CDI spec: failed to create device CDI specs: "
                    "failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND")
        return 1
    lines = ["---", "cdiVersion: 0.5.0", "kind: nvidia.com/gpu", "devices:"]
    for index, _address in enumerate(found):
        lines += [f'- name: "{index}"', "  containerEdits:", "    deviceNodes:",
                  f"    - path: /dev/nvidia{index}"]
    lines += ["- name: all", "  containerEdits:", "    deviceNodes:"]
    lines += [f"    - path: /dev/nvidia{index}" for index in range(len(found))]
    lines += ["containerEdits:", "  deviceNodes:", "  - path: /dev/nvidiactl",
              "  - path: /dev/nvidia-uvm"]
    spec = "\n".join(lines) + "\n"
    if not output:
        print(spec, end="")
        return 0
    write(output, spec)
    os.chmod(output, 0o644)
    log("INFO", "Generated CDI spec with version 0.5.0")
    return 0


def main(argv):
    if not argv or argv[0] in ("-v", "--version", "version"):
        print(f"NVIDIA Container Toolkit CLI version {VERSION}")
        print("commit: nodeforge-test-stub")
        return 0
    opts, rest = options(argv)
    if rest[:2] == ["runtime", "configure"]:
        runtime = opts.get("runtime", "docker")
        if runtime == "containerd":
            return configure_containerd(opts)
        if runtime == "docker":
            return configure_docker(opts)
        log("ERRO", f"unrecognized runtime '{runtime}'")
        return 1
    if rest[:2] == ["cdi", "generate"]:
        return cdi_generate(opts)
    log("ERRO", f"nodeforge test stub: unsupported command: {' '.join(argv)}")
    return 2


sys.exit(main(sys.argv[1:]))
'''

# Written from NVIDIA's deployments/systemd units (1.18): regenerate the CDI spec at boot where
# a driver is installed; the package's postinst enables and starts both.
_REFRESH_SERVICE = """[Unit]
Description=Refresh NVIDIA CDI specification file (nodeforge test stub)
ConditionPathExists=|/usr/bin/nvidia-smi
ConditionPathExists=|/usr/sbin/nvidia-smi
ConditionPathExists=/usr/bin/nvidia-ctk
After=multi-user.target

[Service]
Type=oneshot
Environment=NVIDIA_CTK_CDI_OUTPUT_FILE_PATH=/var/run/cdi/nvidia.yaml
EnvironmentFile=-/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env
ExecCondition=/usr/bin/grep -qE '/(nvidia|nvidia-current)\\\\.ko' /lib/modules/%v/modules.dep
ExecStart=/usr/bin/nvidia-ctk cdi generate
RemainAfterExit=yes

[Install]
WantedBy=multi-user.target
"""

_REFRESH_PATH = """[Unit]
Description=Trigger CDI refresh on NVIDIA driver or toolkit changes (nodeforge test stub)

[Path]
PathChanged=/lib/modules/%v/modules.dep
PathChanged=/lib/modules/%v/modules.dep.bin
PathChanged=/usr/bin/nvidia-ctk

[Install]
WantedBy=multi-user.target
"""

# What nvidia-container-toolkit-base's postinst does from 1.18 (packaging/debian): enable both
# units and trigger a refresh right away, warning (never failing) where systemd says no.
_BASE_POSTINST = """#!/bin/sh
set -e
if [ "$1" = configure ] && [ -d /run/systemd/system ]; then
  systemctl daemon-reload || echo "Warning: Failed to reload systemd daemon" >&2
  for unit in nvidia-cdi-refresh.path nvidia-cdi-refresh.service; do
    systemctl enable --now "$unit" || echo "Warning: Failed to enable $unit" >&2
  done
  echo "Regenerating NVIDIA CDI specification..."
  systemctl start nvidia-cdi-refresh.service || echo "Warning: Failed to trigger CDI refresh" >&2
fi
exit 0
"""


def _tool(name: str, version: str) -> str:
    return (
        f"#!/bin/sh\n# nodeforge test stub of {name} {version}: touches no GPU\n"
        f"echo '{name} {version}'\n"
    )


def container_toolkit_packages(version: str) -> tuple[DebSpec, ...]:
    """The four packages of one toolkit release, named, versioned and laid out like upstream's."""
    short = version.partition("-")[0]
    lib = "/usr/lib/x86_64-linux-gnu"
    return (
        DebSpec(
            name="libnvidia-container1",
            version=version,
            summary="NVIDIA container runtime library",
            files={f"{lib}/libnvidia-container.so.{short}": b"nodeforge test stub: not an ELF\n"},
            links={f"{lib}/libnvidia-container.so.1": f"libnvidia-container.so.{short}"},
        ),
        DebSpec(
            name="libnvidia-container-tools",
            version=version,
            summary="NVIDIA container runtime library (command-line tools)",
            depends=(f"libnvidia-container1 (>= {version})",),
            files={"/usr/bin/nvidia-container-cli": _tool("nvidia-container-cli", short)},
        ),
        DebSpec(
            name="nvidia-container-toolkit-base",
            version=version,
            summary="NVIDIA Container Toolkit Base",
            depends=("python3",),
            files={
                "/usr/bin/nvidia-ctk": _NVIDIA_CTK.replace("@VERSION@", short),
                "/usr/bin/nvidia-container-runtime": _tool("nvidia-container-runtime", short),
                "/usr/bin/nvidia-cdi-hook": _tool("nvidia-cdi-hook", short),
                f"{_UNITS}/nvidia-cdi-refresh.service": _REFRESH_SERVICE,
                f"{_UNITS}/nvidia-cdi-refresh.path": _REFRESH_PATH,
            },
            scripts={"postinst": _BASE_POSTINST},
        ),
        DebSpec(
            name="nvidia-container-toolkit",
            version=version,
            summary="NVIDIA Container toolkit",
            depends=(
                f"nvidia-container-toolkit-base (= {version})",
                f"libnvidia-container-tools (>= {version})",
                "libnvidia-container-tools (<< 2.0.0)",
            ),
            files={
                "/usr/bin/nvidia-container-runtime-hook": _tool(
                    "nvidia-container-runtime-hook", short
                )
            },
        ),
    )


def container_toolkit_repo(version: str) -> RepoSpec:
    """NVIDIA's flat repository for amd64 (`deb [signed-by=...] URL /`), its key beside it."""
    return RepoSpec(
        path=PATH,
        packages=container_toolkit_packages(version),
        origin="https://nvidia.github.io/libnvidia-container/stable",
        label="libnvidia-container",
        key_files=(KEY,),
    )
