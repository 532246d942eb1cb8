"""Offline dependencies: copy the installed, pure-Python closure of requirements.txt into `vendor/`.

Chalice normally pip-downloads requirements.txt while packaging. Our runtime deps are pure Python, so the
files already installed in this environment are exactly what Lambda needs; Chalice zips `vendor/` as is.
"""
from __future__ import annotations

import shutil
from importlib import metadata
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

# Distributions whose compiled part is an optional accelerator with a pure-Python fallback: their Python files
# are vendored and the extension (built for this machine, maybe not Lambda's) left out. wrapt (aws-xray-sdk's
# dependency) falls back to wrapt/wrappers.py when wrapt/_wrappers cannot be imported.
PURE_FALLBACK = {"wrapt"}
COMPILED = (".so", ".pyd", ".dylib")


class VendorError(Exception):
    """The environment cannot supply a runtime dependency offline (missing, wrong version, or compiled)."""


def read_requirements(path: Path) -> list[Requirement]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [Requirement(line) for line in lines if line]


def _lambda_env(python_version: str) -> dict[str, str]:
    # Markers are evaluated for the Lambda runtime, not for the machine that packages.
    return {"python_version": python_version, "python_full_version": f"{python_version}.0",
            "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
            "platform_machine": "x86_64", "implementation_name": "cpython",
            "platform_python_implementation": "CPython"}


def _applies(marker: Marker | None, env: dict[str, str], extras: set[str]) -> bool:
    if marker is None:
        return True
    return any(marker.evaluate({**env, "extra": extra}) for extra in (extras or {""}))


def closure(requirements: list[Requirement], python_version: str) -> list[metadata.Distribution]:
    """Installed distributions satisfying `requirements` and their runtime dependencies, transitively.

    Raises VendorError when one is not installed or its version does not match the pin.
    """
    env = _lambda_env(python_version)
    found: dict[str, metadata.Distribution] = {}
    pending = [(r, set(r.extras)) for r in requirements if _applies(r.marker, env, set())]
    while pending:
        req, extras = pending.pop()
        key = canonicalize_name(req.name)
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            raise VendorError(f"{req} is not installed; run `make package` or install requirements.txt") from None
        if req.specifier and not req.specifier.contains(dist.version, prereleases=True):
            raise VendorError(f"{req} is pinned but {dist.version} is installed; reinstall requirements.txt")
        if key in found:
            continue
        found[key] = dist
        for dep in map(Requirement, dist.requires or []):
            if _applies(dep.marker, env, extras):
                pending.append((dep, set(dep.extras)))
    return sorted(found.values(), key=lambda d: canonicalize_name(d.metadata["Name"]))


def _is_pure(dist: metadata.Distribution) -> bool:
    wheel = dist.read_text("WHEEL") or ""
    files = dist.files or []
    return "Root-Is-Purelib: true" in wheel and not any(f.suffix in COMPILED for f in files)


def copy_distribution(dist: metadata.Distribution, target: Path) -> int:
    """Copy an installed distribution's files (modules and .dist-info) under `target`; returns the count."""
    name = dist.metadata["Name"]
    if dist.files is None:
        raise VendorError(f"{name} has no RECORD; reinstall it with pip")
    fallback = canonicalize_name(name) in PURE_FALLBACK
    if not fallback and not _is_pure(dist):
        raise VendorError(f"{name} is not pure Python; it must be built for Lambda (pip download --platform)")
    count = 0
    for rel in dist.files:
        # Skip console scripts (outside site-packages) and bytecode compiled for this machine's Python.
        if rel.parts[0] == ".." or "__pycache__" in rel.parts or rel.suffix == ".pyc":
            continue
        if fallback and (rel.suffix in COMPILED or rel.suffix == ".c"):
            continue
        source = Path(str(dist.locate_file(rel)))
        if not source.is_file():
            continue
        dest = target / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, dest)
        count += 1
    return count


def vendor(requirements_file: Path, target: Path, python_version: str) -> list[str]:
    """Fill `target` with the closure of `requirements_file`; returns `name==version` of each distribution."""
    dists = closure(read_requirements(requirements_file), python_version)
    for dist in dists:
        copy_distribution(dist, target)
    return [f"{d.metadata['Name']}=={d.version}" for d in dists]
