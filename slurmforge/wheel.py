"""The wheel of the slurmforge that is running: what the rollout installs in the scheduler
service's venv on the controller, so the service runs the very code that rolled it out.

It is made from the installed package, not from a source tree (an installed slurmforge has
none): the package's files with what slurmforge.package_data finds beside it in a clone
(playbooks/, roles/, templates/, stacks/) placed where the wheel built from pyproject.toml
has them, the installed metadata (dependencies, entry points) and a RECORD. Bytes depend
only on those files: no times, sorted, so the same code gives the same wheel and its digest
names the directory it is kept in (slurmforge.rollout.service_wheel_dir).

  python -m slurmforge.wheel DIR     # what roles/scheduler_service runs on the rollout machine
"""

from __future__ import annotations

import base64
import hashlib
import sys
import zipfile
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

from slurmforge import package_data

TAG = "py3-none-any"
STAMP = (1980, 1, 1, 0, 0, 0)
"""Every member's time: the earliest a zip can hold."""
WHEEL_FILE = f"Wheel-Version: 1.0\nGenerator: slurmforge.wheel\nRoot-Is-Purelib: true\nTag: {TAG}\n"


def _files(directory: Path, prefix: str, skip: Iterable[str] = ()) -> list[tuple[str, Path]]:
    skipped = set(skip)
    return [(f"{prefix}/{p.relative_to(directory).as_posix()}", p) for p in directory.rglob("*")
            if p.is_file() and p.suffix != ".pyc" and "__pycache__" not in p.parts
            and p.relative_to(directory).parts[0] not in skipped]


def wheel_files(package: Path | None = None, root: Path | None = None) -> list[tuple[str, Path]]:
    """(name in the wheel, file) for every file of the package, sorted by name: the package's
    own, and package_data's shipped directories from `root` (the package itself when
    installed, the source tree in a clone)."""
    package = package or package_data.package_dir()
    root = root or package_data.root()
    name = package_data.PACKAGE
    found = _files(package, name, skip=package_data.SHIPPED)
    for shipped in package_data.SHIPPED:
        found += _files(root / shipped, f"{name}/{shipped}")
    return sorted(found)


def _dist_info() -> tuple[str, dict[str, str]]:
    """The installed distribution's version and the metadata files the wheel carries."""
    dist = metadata.distribution(package_data.PACKAGE)
    files = {"METADATA": dist.read_text("METADATA") or "", "entry_points.txt": dist.read_text("entry_points.txt") or "",
             "WHEEL": WHEEL_FILE}
    if not files["METADATA"]:
        raise FileNotFoundError(f"the installed {package_data.PACKAGE} has no metadata: reinstall it")
    return dist.version, files


def digest(files: list[tuple[str, Path]] | None = None) -> str:
    """sha256 over what the wheel is made of: each file's name and bytes, and the metadata."""
    h = hashlib.sha256()
    for name, path in files if files is not None else wheel_files():
        h.update(name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    for name, text in sorted(_dist_info()[1].items()):
        h.update(name.encode() + b"\0" + hashlib.sha256(text.encode()).digest())
    return h.hexdigest()


def _record_line(name: str, data: bytes) -> str:
    sha = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={sha},{len(data)}"


def _member(name: str, executable: bool = False) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, STAMP)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = (0o100755 if executable else 0o100644) << 16
    return info


def build(directory: Path, files: list[tuple[str, Path]] | None = None) -> Path:
    """Write the wheel into `directory` (made if missing); returns its path."""
    version, meta = _dist_info()
    info_dir = f"{package_data.PACKAGE}-{version}.dist-info"
    target = directory / f"{package_data.PACKAGE}-{version}-{TAG}.whl"
    directory.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    record = []
    with zipfile.ZipFile(partial, "w") as wheel:
        for name, path in files if files is not None else wheel_files():
            data = path.read_bytes()
            wheel.writestr(_member(name, executable=bool(path.stat().st_mode & 0o100)), data)
            record.append(_record_line(name, data))
        for name, text in meta.items():
            wheel.writestr(_member(f"{info_dir}/{name}"), text)
            record.append(_record_line(f"{info_dir}/{name}", text.encode()))
        record.append(f"{info_dir}/RECORD,,")
        wheel.writestr(_member(f"{info_dir}/RECORD"), "\n".join(record) + "\n")
    partial.replace(target)
    return target


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m slurmforge.wheel DIR", file=sys.stderr)
        return 2
    print(build(Path(args[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
