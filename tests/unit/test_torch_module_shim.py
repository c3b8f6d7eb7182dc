"""The shim libs/python/torch/2.6.0-r3-python-3.13 ships (modules/, write_files): its code run
against a stand-in TCPStore that refuses libuv exactly as TCPStore.cpp does in a build without
it (the first thing the constructor checks, before any socket), and against one that has libuv.
The real thing, on the node image's PyTorch: tests/unit/test_ml_launch.py."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from slurmforge.lmod.catalog import load_catalog
from slurmforge.lmod.definition import DebianModule

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
TORCH = "libs/python/torch/2.6.0-r3-python-3.13"
SHIM = "usr/lib/python3/dist-packages/slurmforge_tcpstore.py"
ENTRY = "usr/lib/python3/dist-packages/slurmforge_tcpstore-1.0.dist-info/entry_points.txt"
REFUSAL = "use_libuv was requested but PyTorch was build without libuv support"


def definition() -> DebianModule:
    d = load_catalog(ROOT / "modules").get(TORCH)
    assert isinstance(d, DebianModule)
    return d


def store_class(has_libuv: bool) -> type:
    class TCPStore:
        made: ClassVar[list[dict[str, Any]]] = []

        def __init__(self, host_name: str, port: int, world_size: int | None = None, is_master: bool = False,
                     timeout: float = 300, wait_for_workers: bool = True, multi_tenant: bool = False,
                     master_listen_fd: int | None = None, use_libuv: bool = True) -> None:
            if use_libuv and not has_libuv:
                raise RuntimeError(REFUSAL)
            if port < 0:
                raise RuntimeError("The server socket has failed to listen on any local network address.")
            TCPStore.made.append({"host": host_name, "port": port, "use_libuv": use_libuv})

    return TCPStore


@pytest.fixture
def load(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Runs the shim's autoload with a stand-in torch.distributed; returns the TCPStore class."""
    def go(has_libuv: bool) -> type:
        store = store_class(has_libuv)
        dist = types.ModuleType("torch.distributed")
        dist.TCPStore = store  # type: ignore[attr-defined]
        dist.is_available = lambda: True  # type: ignore[attr-defined]
        torch = types.ModuleType("torch")
        torch.distributed = dist  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "torch", torch)
        monkeypatch.setitem(sys.modules, "torch.distributed", dist)
        shim: dict[str, Any] = {}
        exec(compile(definition().write_files[SHIM], SHIM, "exec"), shim)
        shim["autoload"]()
        shim["autoload"]()  # twice (two entry point scans): wrapped once
        return store
    yield go


def test_the_module_ships_the_shim_as_a_torch_extension_and_sets_use_libuv() -> None:
    d = definition()
    assert d.setenv["USE_LIBUV"] == "0"
    entry = ["[torch.backends]", "slurmforge_tcpstore", "=", "slurmforge_tcpstore:autoload"]
    assert d.write_files[ENTRY].split() == entry
    assert "slurmforge_tcpstore" in d.imports  # the build imports it with torch: a broken shim is not published


def test_a_store_made_without_use_libuv_falls_back_where_the_build_has_none(load: Any) -> None:
    store = load(has_libuv=False)
    store("node-1", 29400, is_master=True, multi_tenant=True)  # c10d_rendezvous_backend's call
    store("node-1", 29500, 2, False, 300)  # positional, as static_tcp_rendezvous passes them
    assert [m["use_libuv"] for m in store.made] == [False, False]


def test_a_build_with_libuv_is_left_alone(load: Any) -> None:
    store = load(has_libuv=True)
    store("node-1", 29400, is_master=True)
    assert store.made == [{"host": "node-1", "port": 29400, "use_libuv": True}]


def test_what_the_caller_chose_and_other_errors_stay_as_upstream(load: Any) -> None:
    store = load(has_libuv=False)
    with pytest.raises(RuntimeError, match="without libuv support"):
        store("node-1", 29400, use_libuv=True)
    with pytest.raises(RuntimeError, match="without libuv support"):
        store("node-1", 29400, None, True, 300, True, True, None, True)
    with pytest.raises(RuntimeError, match="failed to listen"):
        store("node-1", -1)
    store("node-1", 29400, use_libuv=False)
    assert [m["use_libuv"] for m in store.made] == [False]
