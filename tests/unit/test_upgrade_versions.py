"""Slurm's version order at every upgrade step (slurmforge.upgrade.versions): every allowed and
refused pair - a slurmd never newer than its slurmctld, a slurmctld never newer than slurmdbd,
no move backwards, no jump wider than Slurm's compatibility window (upgrades.shtml)."""

from __future__ import annotations

import itertools

import pytest

from slurmforge.errors import VersionOrderRefused
from slurmforge.upgrade.versions import (
    CTLD,
    DBD,
    SACKD,
    SLURMD,
    Versions,
    check_move,
    release_index,
    releases_back,
    version_tuple,
    window,
)

pytestmark = pytest.mark.unit


def cluster(dbd: str = "24.11.5", ctld: str = "24.11.5", slurmd: str = "24.11.5", sackd: str = "24.11.5") -> Versions:
    return Versions({DBD: {"c": dbd}, CTLD: {"c": ctld, "b": ctld}, SLURMD: {"n1": slurmd, "n2": slurmd},
                     SACKD: {"l": sackd}})


def test_versions_read_debians_and_slurms_own_forms() -> None:
    assert version_tuple("24.11.5-1") == (24, 11, 5)
    assert version_tuple("slurm 24.11.6") == (24, 11, 6)
    assert version_tuple("slurm-wlm 24.11.5") == (24, 11, 5)  # Debian's `slurmdbd -V`
    assert version_tuple("24.11.5-4+deb13u1") == (24, 11, 5)  # dpkg-query
    assert version_tuple("24.11") == (24, 11, 0)
    with pytest.raises(VersionOrderRefused, match="not a Slurm version"):
        version_tuple("latest")


def test_release_sequence_follows_the_nine_then_six_month_cycle() -> None:
    names = ["20.02", "20.11", "21.08", "22.05", "23.02", "23.11", "24.05", "24.11", "25.05", "25.11", "26.05"]
    assert [release_index(n) for n in names] == list(range(len(names)))
    assert releases_back("23.02.7", "24.11.5") == 3
    with pytest.raises(VersionOrderRefused, match="not a Slurm major release"):
        release_index("24.08.1")


def test_the_window_is_two_releases_until_24_11_then_three() -> None:
    assert window("24.05.3") == 2 and window("23.11.1") == 2
    assert window("24.11.0") == 3 and window("25.05.1") == 3


ORDER = [(DBD, ["c"]), (CTLD, ["b"]), (CTLD, ["c"]), (SACKD, ["l"]), (SLURMD, ["n1"]), (SLURMD, ["n2"])]


@pytest.mark.parametrize("new", ["24.11.6", "25.05.1", "25.11.0"])
def test_slurms_order_passes_every_step(new: str) -> None:
    state = cluster()
    for daemon, hosts in ORDER:
        check_move(state, {daemon: hosts}, new)
        state = state.moved(daemon, hosts, new)


@pytest.mark.parametrize("daemon,hosts,why", [
    (CTLD, ["c"], "slurmctld on c would run Slurm 24.11.6, newer than slurmdbd on c"),
    (CTLD, ["b"], "slurmctld on b would run Slurm 24.11.6, newer than slurmdbd"),
    (SLURMD, ["n1"], "slurmd on n1 would run Slurm 24.11.6, newer than slurmctld on b"),
    (SACKD, ["l"], "sackd on l would run Slurm 24.11.6, newer than slurmctld on b"),
])
def test_a_step_out_of_order_is_refused_with_one_line(daemon: str, hosts: list[str], why: str) -> None:
    with pytest.raises(VersionOrderRefused) as exc:
        check_move(cluster(), {daemon: hosts}, "24.11.6")
    assert why in str(exc.value) and "\n" not in str(exc.value)


def test_slurmd_is_refused_while_one_controller_is_still_old() -> None:
    state = cluster().moved(DBD, ["c"], "24.11.6").moved(CTLD, ["b"], "24.11.6")
    with pytest.raises(VersionOrderRefused, match="newer than slurmctld on c"):
        check_move(state, {SLURMD: ["n1"]}, "24.11.6")


def test_every_pair_of_daemons_and_versions() -> None:
    """For every ordered daemon pair (client, server) and every pair of versions: refused
    exactly when the client would be newer than its server or beyond the server's window."""
    versions = ["22.05.9", "23.02.7", "23.11.10", "24.05.8", "24.11.5", "24.11.6", "25.05.1"]
    for (client, server), (a, b) in itertools.product([(CTLD, DBD), (SLURMD, CTLD), (SACKD, CTLD)],
                                                      itertools.product(versions, repeat=2)):
        ok = version_tuple(a) <= version_tuple(b) and releases_back(a, b) <= window(b)
        try:
            check_move(Versions({server: {"s": b}}), {client: ["k"]}, a)
        except VersionOrderRefused:
            assert not ok, (client, a, server, b)
        else:
            assert ok, (client, a, server, b)


def test_a_daemon_never_moves_back() -> None:
    with pytest.raises(VersionOrderRefused, match="never goes back"):
        check_move(cluster(dbd="24.11.6"), {DBD: ["c"]}, "24.11.5")


def test_a_jump_beyond_the_window_is_refused() -> None:
    old = cluster(dbd="22.05.9", ctld="22.05.9", slurmd="22.05.9", sackd="22.05.9")
    with pytest.raises(VersionOrderRefused, match="only from 3 major release"):
        check_move(old, {DBD: ["c"]}, "24.11.5")
    check_move(cluster(dbd="23.02.7", ctld="23.02.7", slurmd="23.02.7", sackd="23.02.7"), {DBD: ["c"]}, "24.11.5")


def test_the_same_version_again_passes() -> None:
    """A new image whose Slurm did not move (another package changed): every step passes."""
    for daemon, hosts in ORDER:
        check_move(cluster(), {daemon: hosts}, "24.11.5")
