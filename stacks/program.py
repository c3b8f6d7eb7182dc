"""`pulumi up`: read the spec path from stack config (`slurmforge:spec`), validate the
spec, build the cluster, export the outputs `slurmforge inventory --from-stack-outputs`
reads (the spec path among them, as the config names it).

A relative spec path is taken from the Pulumi project's directory (where Pulumi.yaml is).
The project runs `main()`: in a clone through stacks/__main__.py (Pulumi.yaml's `main:
stacks/`), from an installed slurmforge through a one-line __main__.py of its own
(docs/aws.md).
"""

from __future__ import annotations

from pathlib import Path

import pulumi

from slurmforge.aws.inventory import OUT_SPEC
from slurmforge.errors import SpecError
from slurmforge.spec import Cluster, load_spec

from .cluster import aws_target, build_cluster

CONFIG_NAMESPACE = "slurmforge"
SPEC_KEY = "spec"


def project_dir() -> Path:
    """Where Pulumi.yaml is, as Pulumi tells the program (under test mocks, which tell none:
    the current directory)."""
    told = pulumi.get_root_directory()
    return Path(told) if told and Path(told).is_dir() else Path.cwd()


def spec_path(value: str, root: Path | None = None) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else (root or project_dir()) / path


def spec_error(exc: SpecError) -> pulumi.RunError:
    """One line per problem, as `slurmforge validate` prints them; no traceback."""
    lines = [f"{exc.source}: {p.line()}" for p in exc.problems]
    return pulumi.RunError("invalid cluster spec:\n" + "\n".join(lines))


def load(config: pulumi.Config, aws_config: pulumi.Config) -> tuple[Cluster, Path]:
    path = spec_path(config.require(SPEC_KEY))
    try:
        spec = load_spec(path)
        region = aws_target(spec).region
    except SpecError as exc:
        raise spec_error(exc) from None
    configured = aws_config.get("region")
    if configured and configured != region:
        raise pulumi.RunError(f"aws:region is {configured} but {path.name} says target.region: {region}; "
                              f"run `pulumi config set aws:region {region}`")
    return spec, path


def main() -> None:
    config = pulumi.Config(CONFIG_NAMESPACE)
    spec, path = load(config, pulumi.Config("aws"))
    for key, value in build_cluster(spec, source=path.name).items():
        pulumi.export(key, value)
    pulumi.export(OUT_SPEC, config.require(SPEC_KEY))  # what `slurmforge inventory` reads the spec from
