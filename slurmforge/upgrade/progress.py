"""What an upgrade has done, kept in <state root>/<cluster>/upgrade.json: the image it rolls
(its inputs digest), the steps done with their times, and the Slurm versions the cluster ran
before it began. Written whole and atomically (a temporary file renamed over it), so a killed
command leaves the last complete record. A record of another image is started over.

The record is a hint: a rerun asks the hosts which image they run (their RECORD) before it
skips a step."""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from slurmforge.state_dirs import state_root

FILE = "upgrade.json"


def progress_path(cluster: str, root: Path | None = None) -> Path:
    return (root or state_root()) / cluster / FILE


@dataclass
class Progress:
    image: str
    """The target image's inputs digest."""
    started: float = field(default_factory=time.time)
    done: dict[str, float] = field(default_factory=dict)
    """Step key -> when it finished (epoch seconds)."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Step key -> how long it took."""
    before: dict[str, dict[str, str]] = field(default_factory=dict)
    """The Slurm versions daemons ran when the upgrade began (daemon -> host -> version)."""
    dump: str = ""
    """The accounting database's dump this upgrade made."""

    def to_json(self) -> str:
        return json.dumps({"image": self.image, "started": self.started, "done": self.done,
                           "seconds": self.seconds, "before": self.before, "dump": self.dump},
                          indent=1, sort_keys=True) + "\n"


def load(path: Path, image: str) -> Progress:
    """The record for `image`: the saved one when it is for that image, else a new one (a
    different image starts over; an unreadable record is no hint)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return Progress(image)
    if not isinstance(data, dict) or data.get("image") != image:
        return Progress(image)
    before = data.get("before") or {}
    return Progress(image, float(data.get("started", time.time())),
                    {str(k): float(v) for k, v in (data.get("done") or {}).items()},
                    {str(k): float(v) for k, v in (data.get("seconds") or {}).items()},
                    {str(d): {str(h): str(v) for h, v in hosts.items()} for d, hosts in before.items()},
                    str(data.get("dump") or ""))


def save(path: Path, progress: Progress) -> None:
    """Atomically: a complete record or the previous one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".upgrade-", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(progress.to_json())
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def mark_done(path: Path, progress: Progress, key: str, seconds: float, now: float | None = None) -> None:
    progress.done[key] = time.time() if now is None else now
    progress.seconds[key] = seconds
    save(path, progress)
