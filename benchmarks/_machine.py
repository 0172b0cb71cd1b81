"""Describe the machine and software a benchmark ran on (shared by every benchmark)."""

from __future__ import annotations

import os
import platform
import sys
from importlib.metadata import PackageNotFoundError, version

__all__ = ["machine_info", "package_versions", "save_record"]

_PACKAGES = ("gflow", "jax", "jaxlib", "diffrax", "equinox", "numpy", "scipy")


def _cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (Linux), else ``platform.processor()``."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def package_versions(packages=_PACKAGES) -> dict[str, str]:
    """Installed version of each package in ``packages`` (``"not installed"`` if absent)."""
    out = {}
    for name in packages:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


def machine_info() -> dict:
    """Hardware and software of this run, JSON-serialisable.

    Returns:
        A dict with ``cpu`` (model name), ``cpu_count`` (``os.cpu_count()``, logical
        cores), ``cpus_usable`` (cores this process may run on, if known), ``platform``,
        ``python``, ``versions`` (see :func:`package_versions`), ``jax_backend`` and
        ``jax_devices`` (JAX's default backend and its devices), and ``x64`` (whether
        JAX runs in float64).
    """
    import jax  # imported here so that describing the machine never configures JAX first

    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = None
    return {
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": usable,
        "platform": platform.platform(),
        "python": f"{platform.python_implementation()} {sys.version.split()[0]}",
        "versions": package_versions(),
        "jax_backend": jax.default_backend(),
        "jax_devices": [str(d) for d in jax.devices()],
        "x64": bool(jax.config.jax_enable_x64),
    }


def describe(info: dict) -> str:
    """One line per field of :func:`machine_info`, for printing under a results table."""
    v = info["versions"]
    return "\n".join(
        [
            f"CPU: {info['cpu']} ({info['cpu_count']} logical cores, {info['cpus_usable']} usable)",
            f"Platform: {info['platform']}; Python {info['python']}",
            "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()),
            f"JAX backend: {info['jax_backend']}; devices: {', '.join(info['jax_devices'])}; float64: {info['x64']}",
        ]
    )


def save_record(path, benchmark: str, config: dict, machine: dict, results) -> None:
    """Write one benchmark's record (name, UTC date, config, machine, versions, results)
    as strict JSON, atomically, and say where."""
    import datetime

    from gflow._io import write_json

    write_json(
        path,
        dict(
            benchmark=benchmark,
            date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            config=config,
            machine=machine,
            versions=machine["versions"],
            results=results,
        ),
    )
    print(f"wrote {path}")
