"""The one image pipeline: what turns a fresh Debian machine into the node image, on every
target.

`prepare_inputs` writes everything a build receives into one directory - the image playbook
and the roles, the scheduler service's dependency wheels, the playbook's variables and the
build script (templates/image_build.sh.j2) - and nothing else. The machine being built gets
that directory at `WORKDIR` and runs `build.sh` there, as root, with Debian's own python3
and ansible-core:

- local target: a builder container from the debootstrap base (slurmforge.local.image_cache),
  committed as the node image;
- AWS: a build instance from Debian's official AMI, which fetches the same directory (as a
  tarball) in its user data (`aws_user_data`), then powers off; the stack makes the AMI
  from it (stacks/image.py).

So every local image build runs the AMI's recipe: same commands, same working directory,
same inputs. The build checks its Slurm release and records what it made in `RECORD` and
`PACKAGES`, which both targets read back the same way. `image_key` is the pipeline's one
change key: the local node image's tag and the AMI's inputs digest.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os as os_
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
from functools import cache
from pathlib import Path

import jinja2
import yaml

from slurmforge.distro import Distro
from slurmforge.errors import ProvisionError
from slurmforge.image_variant import ImageVariant, variant_vars
from slurmforge.package_data import data
from slurmforge.package_data import root as package_root
from slurmforge.templating import make_environment

WORKDIR = "/opt/slurmforge-image"
"""Where the machine being built finds its inputs (every target)."""
BUILD_SCRIPT = "build.sh"
TEMPLATE = "image_build.sh.j2"
RECORD = "/usr/share/slurmforge/image.json"
"""What the build made: base, variant, Slurm version, package count, inputs digest, seconds."""
PACKAGES = "/usr/share/slurmforge/image-packages.txt"
"""Every package of the image and its version, sorted: `<package> <version>` a line."""
INPUT_DIRS = ("playbooks", "roles")
IMAGE_PLAYBOOK = Path("playbooks") / "image.yml"
"""Relative to slurmforge.package_data.root() and to WORKDIR."""
DIGEST_FILE = "inputs.digest"


@cache
def _environment() -> jinja2.Environment:
    return make_environment(quote=shlex.quote)


def build_script(os: Distro, variant: ImageVariant = ImageVariant.BASE) -> str:
    return _environment().get_template(TEMPLATE).render(
        os=os, variant=str(variant), workdir=WORKDIR, record=RECORD, packages=PACKAGES)


def playbook_vars(os: Distro, variant: ImageVariant = ImageVariant.BASE) -> dict[str, object]:
    """The image playbook's variables (vars.json): the distribution's, and the variant's."""
    return {**os.image_vars(), **variant_vars(variant)}


def wheel_cache() -> Path:
    return Path(os_.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "slurmforge" / "wheels"


SERVICE_LOCK = "service-wheels.lock"
"""slurmforge/data/service-wheels.lock: the scheduler service's dependency wheels, exact
versions and sha256 (pip's hash-checking mode), for the nodes' Python."""
_WHEEL = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)-")


def service_lock() -> Path:
    return data(SERVICE_LOCK)


def locked_wheels(text: str) -> dict[str, str]:
    """{normalized name: version} of a lock's `name==version --hash=sha256:...` lines."""
    found = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, rest = line.partition("==")
            found[name.strip().lower().replace("_", "-")] = rest.split()[0]
    return found


def lock_lines(wheels: Path) -> list[str]:
    """The lock of a directory of wheels: one `name==version --hash=sha256:<digest>` each."""
    out = []
    for wheel in sorted(wheels.glob("*.whl")):
        m = _WHEEL.match(wheel.name)
        if m is None:
            raise ProvisionError(f"{wheel.name}: not a wheel's file name")
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        out.append(f"{m['name'].lower().replace('_', '-')}=={m['version']} --hash=sha256:{digest}")
    return out


def _pip_download(os: Distro, target: Path, args: list[str]) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--only-binary=:all:",
           "--python-version", os.python, "--platform", "manylinux2014_x86_64", "-d", str(target), *args]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        tail = (res.stdout + res.stderr).strip().splitlines()[-1:] or ["?"]
        raise ProvisionError(f"downloading the scheduler service's wheels failed: {tail[0]}")


def service_wheels(os: Distro) -> Path:
    """The scheduler service's dependency wheels for the nodes' Python: exactly the files the
    lock names (versions and sha256), downloaded once into this machine's cache. The lock,
    not a resolution of the version ranges, decides them, so every machine - another
    admin's, a CI runner - puts the same bytes in the image's inputs and the same digest
    rebakes nothing."""
    lock = service_lock()
    key = hashlib.sha256(json.dumps([os.python, lock.read_text()]).encode()).hexdigest()[:12]
    target = wheel_cache() / f"locked-{key}"
    if (target / ".complete").exists():
        return target
    target.mkdir(parents=True, exist_ok=True)
    _pip_download(os, target, ["--no-deps", "--require-hashes", "-r", str(lock)])
    (target / ".complete").touch()
    return target


def write_service_lock(os: Distro, dest: Path | None = None) -> Path:
    """Resolve the service's requirements (pyproject.toml's ranges) for the nodes' Python
    and write the lock: `python -m slurmforge.image --lock` after a dependency change."""
    import tempfile

    requirements = [str(r) for r in os.image_vars()["slurmforge_service_requirements"]]
    dest = dest or package_root() / "slurmforge" / "data" / SERVICE_LOCK
    with tempfile.TemporaryDirectory(prefix="slurmforge-lock-") as tmp:
        _pip_download(os, Path(tmp), requirements)
        header = [f"# The scheduler service's dependency wheels for the nodes' Python {os.python} "
                  "(manylinux2014_x86_64), resolved", f"# from {', '.join(requirements)}.",
                  "# Every image build downloads exactly these (slurmforge.image.service_wheels); regenerate",
                  "# after a change of pyproject.toml's dependencies or `service` extra: "
                  "python -m slurmforge.image --lock"]
        dest.write_text("\n".join([*header, *lock_lines(Path(tmp))]) + "\n")
    return dest


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def prepare_inputs(dest: Path, os: Distro, variant: ImageVariant = ImageVariant.BASE, root: Path | None = None) -> str:
    """Write a build's whole input into `dest` (which must not exist); returns its digest
    (also in dest/inputs.digest). `root`: where playbooks/ and roles/ are (default: slurmforge's own)."""
    root = root or package_root()
    dest.mkdir(parents=True)
    for name in INPUT_DIRS:
        shutil.copytree(root / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.retry"))
    shutil.copytree(service_wheels(os), dest / "wheels", ignore=shutil.ignore_patterns(".complete"))
    (dest / "vars.json").write_text(json.dumps(playbook_vars(os, variant), indent=1, sort_keys=True) + "\n")
    script = dest / BUILD_SCRIPT
    script.write_text(build_script(os, variant))
    script.chmod(0o755)
    digest = image_key(os, variant, root)[:16]
    (dest / DIGEST_FILE).write_text(digest + "\n")
    return digest


_JINJA_NAME = re.compile(r"{{\s*([A-Za-z_][A-Za-z0-9_]*)")
_COPIED = re.compile(r"^\s*src:\s*[\"']?([^\"'{\s]+)", re.MULTILINE)
"""A task's literal `src:`: a file of the role's files/ that the task copies."""


def image_key(os: Distro, variant: ImageVariant = ImageVariant.BASE, root: Path | None = None) -> str:
    """The image pipeline's one change key, on every target (the local node image's tag, the
    AMI's inputs digest, which a change of rebakes): the sha256 of what a build reads and
    nothing else - build.sh and the playbook's variables (`playbook_vars`: the contract's
    paths, the service venv's requirements), the image playbook with its config and library,
    every role's install tasks, the files of the role's files/ they copy, the role defaults
    they use (directly or through another default), and the service lock (the wheels' names,
    versions and sha256: the wheels themselves). Every other role file is configuration
    applied at rollout: changing it rebuilds no image. `root`: where playbooks/ and roles/
    are (default: slurmforge's own)."""
    root = root or package_root()
    installs = sorted((root / "roles").glob("*/tasks/install.yml"))
    playbooks = root / IMAGE_PLAYBOOK.parent
    copied = [install.parents[1] / "files" / name for install in installs
              for name in _COPIED.findall(install.read_text())]
    files = [root / IMAGE_PLAYBOOK, playbooks / "ansible.cfg", *sorted((playbooks / "library").glob("*.py")),
             *installs, *sorted(path for path in copied if path.is_file())]
    parts = [json.dumps(playbook_vars(os, variant), sort_keys=True).encode(), build_script(os, variant).encode(),
             service_lock().read_bytes()]
    parts += [f.relative_to(root).as_posix().encode() + f.read_bytes() for f in files]
    defaults: dict[str, object] = {}
    for path in sorted((root / "roles").glob("*/defaults/main.yml")):
        defaults.update(yaml.safe_load(path.read_text()) or {})
    used = {name for f in installs for name in _JINJA_NAME.findall(f.read_text())}
    pending = set(used)
    while pending:  # a used default may name another
        value = json.dumps(defaults.get(pending.pop()), sort_keys=True)
        found = set(_JINJA_NAME.findall(value)) - used
        used |= found
        pending |= found
    parts += [f"{name}={json.dumps(defaults[name], sort_keys=True)}".encode()
              for name in sorted(used) if name in defaults]
    h = hashlib.sha256()
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()


def tarball(inputs: Path) -> bytes:
    """The inputs as a reproducible .tar.gz (sorted, owner root, no times): what the AWS
    build instance downloads."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for path in _files(inputs):
            info = tar.gettarinfo(str(path), arcname=path.relative_to(inputs).as_posix())
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mtime = 0
            with path.open("rb") as f:
                tar.addfile(info, f)
    return gzip.compress(raw.getvalue(), mtime=0)


def aws_user_data(inputs_url: str, result_url: str) -> str:
    """The AWS build instance's user data: fetch the inputs, run build.sh as every target
    does, report (exit code, the record, the package list, the log's tail) to `result_url`
    (a presigned PUT), power off. cloud-init is cleaned so the image's instances boot as
    new machines, and /etc/machine-id left empty, as in the local node image: each
    instance makes its own at boot, and that boot is not systemd's "first boot" (which
    cloud-init's `clean --machine-id` would make it), which applies Debian's presets and
    enables every service the image leaves disabled - slurmctld, slurmdbd, MariaDB and
    ceph-mon on every pool node (the AWS rehearsal found it: docs/rehearsal.md)."""
    return f"""#!/bin/bash
# slurmforge golden image build (EC2): the node image's build, then power off
exec > >(tee -a /var/log/slurmforge-image.log) 2>&1
rc=0
(
    set -euo pipefail
    rm -rf {WORKDIR} && mkdir -p {WORKDIR}
    curl -fsS --retry 10 --retry-connrefused {shlex.quote(inputs_url)} | tar -C {WORKDIR} -xzf -
    bash {WORKDIR}/{BUILD_SCRIPT}
) || rc=$?
python3 - "$rc" > /tmp/slurmforge-image-result.json <<'PY'
import json, sys
def read(path):
    try:
        return open(path).read()
    except OSError:
        return ""
log = read("/var/log/slurmforge-image.log").splitlines()
fatal = [i for i, line in enumerate(log) if line.startswith(("fatal:", "failed:"))]
failed = []
if fatal:  # the task that failed and Ansible's error: the tail may have scrolled past them
    task = next((log[j] for j in range(fatal[-1], -1, -1) if log[j].startswith("TASK [")), "")
    failed = [task, log[fatal[-1]]]
print(json.dumps({{"rc": int(sys.argv[1]), "record": read({RECORD!r}), "packages": read({PACKAGES!r}),
                  "failed": failed, "log_tail": log[-40:]}}))
PY
curl -fsS --retry 10 -X PUT -H 'Content-Type: application/json' \\
    --upload-file /tmp/slurmforge-image-result.json {shlex.quote(result_url)}
cloud-init clean --logs || true
: > /etc/machine-id
rm -f /tmp/slurmforge-image-result.json
poweroff
"""


def read_record(record_json: str, packages: str, os: Distro) -> dict[str, object]:
    """A finished build's record (RECORD's JSON, with its package list), checked: the Slurm
    it installed must be the release the renderer writes for (a Debian point release that
    moved Slurm is looked at, not rolled out). Every target reads its build back so."""
    try:
        record = json.loads(record_json)
    except json.JSONDecodeError:
        raise ProvisionError("the image build recorded nothing (it failed before its record)") from None
    slurm = str(record.get("slurm", ""))
    if not slurm.startswith(os.slurm_release + "."):
        raise ProvisionError(f"the {os.base} image installed Slurm {slurm or '(none)'}, but slurmforge renders for "
                             f"Slurm {os.slurm_release}: update slurmforge/distro.py and the renderer")
    return {**record, "packages_text": packages}


def package_differences(a: list[str], b: list[str]) -> list[str]:
    """`-pkg ver` / `+pkg ver` lines between two images' package lists."""
    left, right = set(a), set(b)
    return [f"-{line}" for line in sorted(left - right)] + [f"+{line}" for line in sorted(right - left)]


if __name__ == "__main__":
    if sys.argv[1:] != ["--lock"]:
        sys.exit("usage: python -m slurmforge.image --lock")
    from slurmforge.distro import DEBIAN_13

    print(write_service_lock(DEBIAN_13))
