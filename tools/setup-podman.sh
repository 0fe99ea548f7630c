#!/usr/bin/env bash
# Prepare a fresh Debian 12 machine (as root) for nodeforge's local container harness:
# podman with runc, and debootstrap for the locally built base images.
# Idempotent: a second run installs nothing and rewrites nothing.
set -euo pipefail

if [[ ${EUID} -ne 0 ]]; then
  echo "setup-podman.sh: run as root (it installs packages and writes /etc/containers)" >&2
  exit 1
fi

# conmon monitors containers, uidmap provides newuidmap for rootless use, fuse-overlayfs and
# slirp4netns are podman's fallbacks where kernel overlay or host networking are unavailable,
# and runc replaces crun, which refuses the hybrid cgroup layout of these machines. rpm and
# createrepo-c build the test mirror's stub rpm repository (rpmbuild, rpmsign, createrepo_c).
# prometheus provides promtool, which the monitoring tests (tests/test_monitoring.py) run to
# check and unit-test the alert rules in monitoring/prometheus.
PACKAGES=(podman runc conmon uidmap fuse-overlayfs slirp4netns containernetworking-plugins
  debootstrap ca-certificates tar rpm createrepo-c prometheus)

missing=()
for pkg in "${PACKAGES[@]}"; do
  # dpkg-query exits non-zero for unknown packages; "install ok installed" is the only good state.
  if [[ "$(dpkg-query -W -f='${Status}' "${pkg}" 2>/dev/null || true)" != "install ok installed" ]]; then
    missing+=("${pkg}")
  fi
done

if ((${#missing[@]} > 0)); then
  echo "setup-podman.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup-podman.sh: packages already installed"
fi

# Podman 4.3 (Debian 12) reads drop-ins from containers.conf.d, so the settings live in a file
# of our own and the packaged containers.conf stays untouched.
CONF_DIR=/etc/containers/containers.conf.d
CONF_FILE=${CONF_DIR}/50-nodeforge.conf
read -r -d '' WANT <<'EOF' || true
# Written by nodeforge tools/setup-podman.sh.
[containers]
# The sandbox cannot raise rlimits, so podman must not try to set its default ulimits.
default_ulimits = []

[engine]
# crun refuses the hybrid cgroup layout of these hosts; runc handles it.
runtime = "runc"
EOF

mkdir -p "${CONF_DIR}"
if [[ -f ${CONF_FILE} ]] && [[ "$(cat "${CONF_FILE}")" == "${WANT}" ]]; then
  echo "setup-podman.sh: ${CONF_FILE} already up to date"
else
  printf '%s\n' "${WANT}" >"${CONF_FILE}.tmp"
  mv "${CONF_FILE}.tmp" "${CONF_FILE}"
  echo "setup-podman.sh: wrote ${CONF_FILE}"
fi

# Prove the drop-in is honoured rather than trusting it: podman's debug log names every config
# file it merged, and the runtime must come out as runc (crun may be installed by someone else).
# The log is captured first: grep -q would exit early and pipefail would report podman's SIGPIPE.
debug_log=$(podman --log-level=debug info 2>&1 >/dev/null)
# podman logs the path with escaped quotes: Merged system config \"/etc/...\".
if [[ ${debug_log} != *'Merged system config \"'"${CONF_FILE}"* ]]; then
  echo "setup-podman.sh: podman did not merge ${CONF_FILE}; put the settings in /etc/containers/containers.conf" >&2
  exit 1
fi
runtime=$(podman info --format '{{.Host.OCIRuntime.Name}}')
if [[ ${runtime} != "runc" ]]; then
  echo "setup-podman.sh: podman uses OCI runtime '${runtime}', expected runc" >&2
  exit 1
fi
echo "setup-podman.sh: podman $(podman version --format '{{.Client.Version}}') ready (runtime ${runtime})"
