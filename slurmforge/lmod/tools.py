"""The two Lmod tools the publisher runs on the node: the modulefile syntax check and
the spider cache refresh. Paths are parameters (Debian 13's lmod 8.7.60 installs both in
/usr/share/lmod/8.7.60/libexec; /usr/share/lmod/lmod links to the version, so the
default below survives an Lmod upgrade)."""

from __future__ import annotations

from dataclasses import dataclass

from slurmforge.contract import LMOD_LIBEXEC
from slurmforge.errors import ModuleError
from slurmforge.remote.executor import Executor

DEBIAN_LIBEXEC = LMOD_LIBEXEC


@dataclass(frozen=True)
class Lmod:
    libexec: str = DEBIAN_LIBEXEC
    cache_dir: str | None = None
    """The system spider cache (lmodrc.lua scDescriptT `dir`); None: no cache to refresh."""
    timestamp_file: str | None = None
    """scDescriptT `timestamp`; default <cache_dir>/timestamp."""

    def check_syntax(self, ex: Executor, modulepath: str) -> None:
        """Lmod's own check of every modulefile under `modulepath` (exit 1 on errors)."""
        done = ex.run([f"{self.libexec}/check_module_tree_syntax", modulepath])
        if done.rc == 127 or "No such file" in done.stderr:
            raise ModuleError(f"Lmod not found at {self.libexec} on {ex.name}; "
                              "fix: install lmod there or pass its libexec directory")
        if not done.ok:
            errors = [ln.strip() for ln in (done.stderr + done.stdout).splitlines() if "Error:" in ln]
            raise ModuleError(f"Lmod rejects the modulefile: {errors[0] if errors else done.reason()}",
                              done.stdout + done.stderr)

    def refresh_cache(self, ex: Executor, modulepath: str) -> bool:
        """Rebuild the spider cache for `modulepath`; False when none is configured."""
        if self.cache_dir is None:
            return False
        stamp = self.timestamp_file or f"{self.cache_dir}/timestamp"
        argv = [f"{self.libexec}/update_lmod_system_cache_files", "-d", self.cache_dir, "-t", stamp, modulepath]
        done = ex.run(argv)
        if not done.ok:
            raise ModuleError(f"the change is in place, but refreshing Lmod's spider cache failed on "
                              f"{ex.name}: {done.reason()}; fix: run {' '.join(argv)}", done.stderr)
        return True

