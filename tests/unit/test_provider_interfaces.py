"""One provider interface per caller: the scheduler service sees `Machines` and nothing else,
the CLI's bring-up sees `Provisioner`; every provider implements the whole of the interfaces
it has, and no method of any provider exists only to raise."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

from slurmforge.aws.provider import AwsProvider
from slurmforge.local.provider import LocalProvider, PoolMachines
from slurmforge.provider import Machines, Provisioner

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PROVIDERS = [ROOT / "slurmforge" / "provider.py", *sorted(ROOT.glob("slurmforge/*/provider.py"))]
SERVICE = ROOT / "slurmforge" / "service"


def provider_classes() -> dict[type, set[type]]:
    """Every class of each target's provider (slurmforge.<target>.provider) that implements
    an interface -> the interfaces."""
    found: dict[type, set[type]] = {}
    for path in PROVIDERS[1:]:
        module = importlib.import_module(f"slurmforge.{path.parent.name}.provider")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and cls not in (Machines, Provisioner):
                interfaces = {i for i in (Machines, Provisioner) if issubclass(cls, i)}
                if interfaces:
                    found[cls] = interfaces
    return found


def test_each_target_implements_what_its_callers_need_and_nothing_else() -> None:
    assert provider_classes() == {AwsProvider: {Machines}, PoolMachines: {Machines}, LocalProvider: {Provisioner}}


@pytest.mark.parametrize("cls", [AwsProvider, PoolMachines, LocalProvider], ids=lambda c: c.__name__)
def test_each_provider_implements_its_interface_fully(cls: type) -> None:
    assert not inspect.isabstract(cls), f"{cls.__name__} leaves {sorted(cls.__abstractmethods__)} unimplemented"


def service_uses() -> set[str]:
    """What the scheduler service takes from its provider: `self.provider.x`,
    `self.ex.provider.x`, called there or handed on (`_ask(self.provider.list_instances, ...)`)."""
    used = set()
    for path in SERVICE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and (
                    (isinstance(node.value, ast.Attribute) and node.value.attr == "provider")
                    or (isinstance(node.value, ast.Name) and node.value.id == "provider")):
                used.add(node.attr)
    return used


def test_the_service_sees_only_what_it_calls() -> None:
    offered = {name for name, _ in inspect.getmembers(Machines, inspect.isfunction) if not name.startswith("_")}
    assert service_uses() == offered


def test_the_cli_side_makes_and_removes_hosts_only() -> None:
    assert sorted(Provisioner.__abstractmethods__) == ["delete", "hosts", "provision"]
    assert not hasattr(Machines, "provision") and not hasattr(Machines, "delete")


def only_raises(function: ast.FunctionDef) -> bool:
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]  # the docstring
    return len(body) == 1 and isinstance(body[0], ast.Raise)


def raising_methods(source: str) -> list[str]:
    """Methods whose whole body is one `raise`, and every NotImplementedError raised."""
    found = []
    for cls in [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef)]:
        found += [f"{cls.name}.{f.name}" for f in cls.body if isinstance(f, ast.FunctionDef) and only_raises(f)]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Raise) and node.exc is not None and "NotImplementedError" in ast.unparse(node.exc):
            found.append(f"raise {ast.unparse(node.exc)} (line {node.lineno})")
    return found


def test_no_provider_method_raises_by_design() -> None:
    found = {str(path.relative_to(ROOT)): raising_methods(path.read_text()) for path in PROVIDERS}
    assert set(found) >= {"slurmforge/aws/provider.py", "slurmforge/provider.py", "slurmforge/local/provider.py"}
    assert {name: methods for name, methods in found.items() if methods} == {}


def test_the_check_finds_a_method_that_only_raises() -> None:
    """What the providers had before they were split: the service's provider could not provision."""
    source = '''
class PoolMachines:
    def provision(self):
        """Not here."""
        raise ProvisionError("the service does not provision; run `slurmforge up --local` on the host")

    def stop(self, nodes):
        if not nodes:
            raise ValueError("no nodes")
        return None

    def logs(self, node):
        raise NotImplementedError
'''
    assert raising_methods(source) == ["PoolMachines.provision", "PoolMachines.logs",
                                       "raise NotImplementedError (line 13)"]
