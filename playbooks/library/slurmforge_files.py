#!/usr/bin/python3
"""Several small files and directories in one module run.

The rollout is CPU-bound: every task costs a Python start on every node, and most of
the roles' configure steps are "this text in that file". One run of this module writes
them all: a file is replaced atomically (temp file + rename) only when its bytes differ,
its parent directory is made when missing, and mode/owner/group are set when they
differ. `changed_paths` says which entries changed, for handlers and `when:`s.
"""

from __future__ import annotations

import base64
import grp
import os
import pwd
import tempfile
from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: slurmforge_files
short_description: Write several files / directories in one run (only what differs)
options:
  entries:
    description: What to make; each entry has path, state (file, directory, absent),
      content or content_b64 (file; base64 for binary data such as a key), mode (octal
      string), owner, group.
    type: list
    elements: dict
    required: true
"""


def _ids(owner: str | None, group: str | None) -> tuple[int, int]:
    uid = pwd.getpwnam(owner).pw_uid if owner else -1
    gid = grp.getgrnam(group).gr_gid if group else -1
    return uid, gid


def _attributes(path: str, mode: str | None, owner: str | None, group: str | None, check: bool) -> bool:
    st = os.lstat(path)
    changed = False
    if mode is not None and (st.st_mode & 0o7777) != int(mode, 8):
        changed = True
        if not check:
            os.chmod(path, int(mode, 8))
    uid, gid = _ids(owner, group)
    if (uid != -1 and st.st_uid != uid) or (gid != -1 and st.st_gid != gid):
        changed = True
        if not check:
            os.chown(path, uid, gid)
    return changed


def _directory(path: str, check: bool) -> bool:
    if os.path.isdir(path):
        return False
    if not check:
        os.makedirs(path, mode=0o755, exist_ok=True)
    return True


def _file(path: str, content: bytes, mode: str | None, owner: str | None, group: str | None, check: bool) -> bool:
    try:
        with open(path, "rb") as f:
            if f.read() == content:
                return False
    except FileNotFoundError:
        pass
    if check:
        return True
    parent = os.path.dirname(path) or "/"
    os.makedirs(parent, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=parent, prefix=".slurmforge-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(content)
        uid, gid = _ids(owner, group)
        os.chown(tmp, uid, gid)
        os.chmod(tmp, int(mode or "0644", 8))
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return True


def apply(entries: list[dict[str, Any]], check: bool = False) -> list[str]:
    """Make every entry so; the paths that changed, in order."""
    changed = []
    for entry in entries:
        path, state = entry["path"], entry.get("state") or "file"
        mode, owner, group = entry.get("mode"), entry.get("owner"), entry.get("group")
        if state == "absent":
            hit = os.path.lexists(path)
            if hit and not check:
                os.unlink(path)
        elif state == "directory":
            hit = _directory(path, check)
            if os.path.isdir(path):
                hit = _attributes(path, mode, owner, group, check) or hit
        elif state == "file":
            content = (base64.b64decode(entry["content_b64"]) if entry.get("content_b64") is not None
                       else str(entry.get("content") or "").encode())
            hit = _file(path, content, mode, owner, group, check)
            if os.path.exists(path):
                hit = _attributes(path, mode, owner, group, check) or hit
        else:
            raise ValueError(f"{path}: state must be file, directory or absent (got {state!r})")
        if hit:
            changed.append(path)
    return changed


def main() -> None:
    module = AnsibleModule(argument_spec={"entries": {"type": "list", "elements": "dict", "required": True}},
                           supports_check_mode=True)
    try:
        changed = apply(module.params["entries"], module.check_mode)
    except (OSError, KeyError, ValueError) as exc:
        module.fail_json(msg=f"slurmforge_files: {exc}")
    module.exit_json(changed=bool(changed), changed_paths=changed)


if __name__ == "__main__":
    main()
