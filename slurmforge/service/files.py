"""Files the service publishes for others to read: Prometheus' scrape targets
(service.targets) and the node kit's pool hosts (service.pool_hosts).

Each is replaced atomically (a temporary file beside it, renamed over it), so a reader sees
the old file or the new one, never half of one; and only when its content changes, so an
unchanged file keeps its modification time and nobody re-reads it in vain.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)


def replace_if_changed(path: Path, text: str, what: str) -> bool:
    """True when written. A failure is logged, not raised: the next loop tries again."""
    try:
        if path.exists() and path.read_text() == text:
            return False
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text)
        os.chmod(tmp, 0o644)
        tmp.replace(path)
    except OSError as exc:
        log.warning("%s %s: %s", what, path, exc)
        return False
    return True
