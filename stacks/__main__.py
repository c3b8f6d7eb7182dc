"""`pulumi up`: read the spec path from stack config (`slurmforge:spec`), validate the
spec, build the cluster, export the outputs `slurmforge inventory --from-stack-outputs`
reads (the spec path among them, as the config names it).

Pulumi runs this file with stacks/ as the working directory; a relative spec path is
taken relative to the project root (where Pulumi.yaml is).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# Pulumi runs this directory with stacks/ first on sys.path: take it off (its modules
# would shadow top-level ones) and put the repo root there, so the components import
# as the `stacks` package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import pulumi  # noqa: E402

from slurmforge.aws_inventory import OUT_SPEC  # noqa: E402
from slurmforge.errors import SpecError  # noqa: E402
from slurmforge.spec import Cluster, load_spec  # noqa: E402
from stacks.cluster import aws_target, build_cluster  # noqa: E402

CONFIG_NAMESPACE = "slurmforge"
SPEC_KEY = "spec"


def spec_path(value: str, root: Path = ROOT) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else root / path


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
    for key, value in build_cluster(spec, ROOT, source=path.name).items():
        pulumi.export(key, value)
    pulumi.export(OUT_SPEC, config.require(SPEC_KEY))  # what `slurmforge inventory` reads the spec from


if __name__ == "__main__":  # Pulumi runs this file as __main__; tests import it
    main()
