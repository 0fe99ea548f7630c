"""Local container harness: debootstrapped systemd base images and podman helpers.

These machines reach no container registry, so Molecule and local builds run on images built
here from Debian's archive (see DESIGN.md, "Test harness facts for these machines").
Import from the submodules: `nodeforge.local.baseimage` and `nodeforge.local.podman`; nothing
is re-exported here so that `python -m nodeforge.local.baseimage` runs without a warning.
"""
