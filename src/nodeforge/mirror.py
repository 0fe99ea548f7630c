"""Where a download comes from: the catalog's URL for the target, or the same path on a mirror."""

from __future__ import annotations

from urllib.parse import urlsplit

from nodeforge.catalog.placeholders import fill, uses
from nodeforge.target import Target

_DEB_ARCH = {"x86_64": "amd64", "arm64": "arm64"}


def resolve_url(url: str, target: Target, mirror: str | None) -> str | None:
    """Fill the URL's placeholders for the target and point it at the mirror when one is set.

    None when the URL needs an NVIDIA repository the OS does not have.
    """
    os_arch = target.os_arch
    nvidia_repo = os_arch.nvidia_repo if os_arch is not None else None
    if uses(url, "nvidia_repo") and nvidia_repo is None:
        return None
    resolved = fill(
        url,
        {
            "nvidia_repo": nvidia_repo or "",
            "arch": target.image.arch,
            "deb_arch": _DEB_ARCH[target.image.arch],
        },
    )
    return through_mirror(resolved, mirror)


def through_mirror(url: str, mirror: str | None) -> str:
    """`<mirror>/<upstream host>/<upstream path>`, or the URL itself without a mirror."""
    if mirror is None:
        return url
    parts = urlsplit(url)
    return f"{mirror.rstrip('/')}/{parts.netloc}{parts.path}"
