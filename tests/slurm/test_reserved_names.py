"""The users and groups the spec refuses are the ones every node already has: the node
image's own /etc/passwd and /etc/group (and the scheduler service's account, which the
rollout adds) are read in a judge container, and the spec refuses each of their names as
a user or a group (useradd/groupadd would fail on the node), and each of their ids from
1000 up as a uid or gid.
"""

from __future__ import annotations

from typing import Any

import pytest

from slurmforge.contract import SERVICE_GID, SERVICE_UID, SERVICE_USER
from slurmforge.errors import SpecError
from slurmforge.spec import validate_data
from tests.judge import Judge, node_image
from tests.slurm.specs import local_data

pytestmark = [pytest.mark.slurm]


def image_accounts() -> list[tuple[str, int]]:
    """(name, id) of every user and group in the node image."""
    with Judge(node_image()) as judge:
        text = judge.run(["cat", "/etc/passwd", "/etc/group"], check=True).stdout
    fields = [line.split(":") for line in text.splitlines() if line.strip()]
    return [(f[0], int(f[2])) for f in fields]


def refused(data: dict[str, Any]) -> set[str]:
    try:
        validate_data(data, "names")
    except SpecError as exc:
        return {p.path for p in exc.problems}
    return set()


def test_every_account_the_nodes_have_is_refused() -> None:
    accounts = [*image_accounts(), (SERVICE_USER, SERVICE_UID), (SERVICE_USER, SERVICE_GID)]
    assert ("slurm", 64030) in accounts and len(accounts) > 40
    for name, _ in accounts:
        data = local_data()
        data["groups"].append({"name": name, "gid": 7000})
        data["users"].append({"name": name, "uid": 7001})
        assert {"groups[2].name", "users[3].name"} <= refused(data), name
    for number in sorted({n for _, n in accounts if n >= 1000}):
        data = local_data()
        data["groups"].append({"name": "newgroup", "gid": number})
        data["users"].append({"name": "newuser", "uid": number})
        assert {"groups[2].gid", "users[3].uid"} <= refused(data), number
