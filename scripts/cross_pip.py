"""pip, resolving for another Linux machine: python scripts/cross_pip.py --machine M --python X.Y -- PIP-ARGS.

pip's own --platform/--python-version options pick the target's wheels, but pip still
evaluates environment markers (`; platform_machine == "aarch64"`) with the values of the
interpreter running it (pypa/pip#10050: by design, not a bug). On this x86_64 host that
would pick the x86 torch pin for an arm64 Raspberry Pi, and pull the CUDA wheels that
torch's metadata only asks for on x86_64. So this wrapper runs pip in-process with the
marker environment of the target, adds the matching --platform/--python-version/--abi
options, and leaves every other argument to pip:

    python scripts/cross_pip.py --machine aarch64 --python 3.11 --glibc 2.36 -- \
        download -d wheels/ 'dartfl[edge] @ file:///.../dartfl-0.1.0-py3-none-any.whl'

Only binary wheels can be used (nothing can be built for the target here), so
--only-binary=:all: is added too. The target's own `pip check` is the test that the result
is what pip on the target would have chosen (scripts/test-arm64 runs it in the chroot).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

# The oldest glibc a manylinux wheel targets; every tag from there to the target's glibc
# must be listed, since some wheels carry only one of them (manylinux_2_27, _2_28, ...).
_OLDEST_GLIBC_MINOR = 17
_PIP_COMMANDS = ("install", "download", "wheel")


def manylinux_platforms(machine: str, glibc: str) -> list[str]:
    """Every manylinux platform tag a target with this glibc accepts, newest first."""
    major, minor = (int(part) for part in glibc.split("."))
    if major != 2 or minor < _OLDEST_GLIBC_MINOR:
        raise SystemExit(f"cross_pip: --glibc must be 2.{_OLDEST_GLIBC_MINOR} or newer, got {glibc}")
    tags = [f"manylinux_2_{m}_{machine}" for m in range(minor, _OLDEST_GLIBC_MINOR - 1, -1)]
    return [*tags, f"manylinux2014_{machine}"]  # the legacy alias of manylinux_2_17


def target_environment(machine: str, python: str) -> dict[str, str]:
    """PEP 508 marker values of CPython `python` on Linux on `machine`."""
    return {
        "implementation_name": "cpython",
        "implementation_version": f"{python}.0",
        "os_name": "posix",
        "platform_machine": machine,
        "platform_python_implementation": "CPython",
        "platform_system": "Linux",
        "python_full_version": f"{python}.0",
        "python_version": python,
        "sys_platform": "linux",
    }


def _patch_markers(environment: dict[str, str]) -> None:
    """Make pip's vendored `packaging` evaluate every marker in the target's environment."""
    from pip._vendor.packaging import markers

    host = markers.default_environment

    def target() -> dict[str, str]:
        return {**host(), **environment}

    markers.default_environment = target
    # Fail loudly if a pip release stops reading markers through this function.
    probe = markers.Marker(f'platform_machine == "{environment["platform_machine"]}"')
    if not probe.evaluate():
        raise SystemExit("cross_pip: could not set pip's marker environment (pip internals changed?)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machine", required=True, help="target platform_machine, e.g. aarch64")
    parser.add_argument("--python", required=True, help="target CPython X.Y, e.g. 3.11")
    parser.add_argument("--glibc", required=True, help="target glibc X.Y, e.g. 2.36 (Debian bookworm)")
    parser.add_argument("pip_args", nargs="+", help="pip command and its arguments (after --)")
    args = parser.parse_args(argv)
    if args.pip_args[0] not in _PIP_COMMANDS:
        parser.error(f"the pip command must be one of {', '.join(_PIP_COMMANDS)}, got {args.pip_args[0]!r}")

    _patch_markers(target_environment(args.machine, args.python))
    abi = "cp" + args.python.replace(".", "")
    target = ["--only-binary=:all:", "--implementation", "cp", "--python-version", args.python]
    target += ["--abi", abi, "--abi", "abi3", "--abi", "none"]
    for tag in manylinux_platforms(args.machine, args.glibc):
        target += ["--platform", tag]
    from pip._internal.cli.main import main as pip_main

    command, *rest = args.pip_args
    return pip_main([command, *target, *rest])


if __name__ == "__main__":
    sys.exit(main())
