"""Read files and run commands on one host in one round trip: what `slurmforge plan` reads
from a controller (the configs and spec the last rollout left there, Slurm's and slurmdbd's
answers). The plan sends this file's source to the controller's own python3 (`python3 -c
SOURCE REQUEST`), so it uses the standard library only, like slurmforge/accounting.py,
which the rollout runs there the same way.

REQUEST is JSON: {"files": [path, ...], "commands": [[argv...], ...], "timeout": seconds}.
The answer, on stdout, is JSON: {"files": {path: text or null when missing},
"commands": [[rc, stdout, stderr], ...]} in the request's order. The commands run at the
same time (each is a Slurm client waiting for its daemon), so the round trip costs about
the slowest one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any


def read(path: str) -> str | None:
    try:
        return Path(path).read_text(errors="replace")
    except FileNotFoundError:
        return None


def run(argv: list[str], timeout: float) -> list[Any]:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return [124, "", f"{argv[0]}: timed out after {timeout:.0f} s"]
    except OSError as exc:
        return [127, "", f"{argv[0]}: {exc.strerror}"]
    return [done.returncode, done.stdout, done.stderr]


def gather(request: dict[str, Any]) -> dict[str, Any]:
    timeout = float(request.get("timeout", 30))
    commands = request.get("commands") or []
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(commands)))) as pool:
        answers = list(pool.map(lambda argv: run(argv, timeout), commands))
    return {"files": {path: read(path) for path in request.get("files") or []}, "commands": answers}


if __name__ == "__main__":
    json.dump(gather(json.loads(sys.argv[1])), sys.stdout)
