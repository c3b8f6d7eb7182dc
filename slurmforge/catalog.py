"""The instance catalog: hardware facts for the AWS types ML teams use.

Node lines and validation read hardware from here (or from a pool's explicit
hardware), never from whichever host Ansible gathered facts on.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources

import yaml


@dataclass(frozen=True)
class InstanceType:
    name: str
    vcpus: int
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    memory_mib: int
    accelerators: int = 0
    accelerator_model: str | None = None
    accelerator_kind: str | None = None
    efa: bool = False

    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]


@cache
def load_catalog() -> dict[str, InstanceType]:
    text = resources.files("slurmforge").joinpath("data/instance_types.yaml").read_text()
    raw: dict[str, dict[str, object]] = yaml.safe_load(text)
    return {name: InstanceType(name=name, **fields) for name, fields in raw.items()}  # type: ignore[arg-type]


def lookup(name: str) -> InstanceType | None:
    return load_catalog().get(name)
