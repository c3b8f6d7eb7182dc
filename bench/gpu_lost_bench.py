"""A GPU lost under a GPU job on the local cluster: `rm /dev/nvidia1` in the static GPU node's
machine while a `--gres=gpu:1` job runs there, then each step's time from the break - the node
drained by its health check, a new machine under the node's name, the requeued job running
again (on the new machine), the node back in service - and whether the job completed there,
requeued once. Median of --runs (3); --quick: one run.

The GPU node's new machine joins with its devices because they are the join program's gpus
step (issue 41): before, its slurmd stopped on `fatal: can't stat gres.conf file /dev/nvidia0`
and the GPU job waited for ever.

    sudo .venv/bin/python bench/gpu_lost_bench.py [--quick] [--node dev-gpu-01] [--partition ml-gpu]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.harness

from slurmforge.errors import SlurmforgeError  # noqa: E402
from tests.harness.faults import repeat, target  # noqa: E402
from tests.harness.sickness import GpuLost, gpu_lost  # noqa: E402

STEPS = ("drained", "new_machine", "running_again", "back")


def row(r: GpuLost) -> str:
    times = "  ".join(f"{getattr(r, s):7.1f}" if getattr(r, s) is not None else "      -" for s in STEPS)
    return f"{times}   restarts {r.restarts}  {r.final_state or '-':<10} {r.gres}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", help="the local cluster (default: the only one)")
    parser.add_argument("--node", default="dev-gpu-01", help="the static GPU node")
    parser.add_argument("--partition", default="ml-gpu")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one run")
    args = parser.parse_args(argv)
    runs = 1 if args.quick else args.runs
    try:
        spec, _, live = target(args.cluster, None)
    except SlurmforgeError as exc:
        print(f"gpu_lost_bench: {exc}", file=sys.stderr)
        return 2
    print(f"cluster {spec.name}: a GPU job on {args.node}, then rm /dev/nvidia1 there; seconds from the break\n"
          f"{'run':>5} {'drained':>8} {'new mach':>8} {'running':>8} {'back':>8}", flush=True)
    results = repeat(runs, lambda: gpu_lost(live, args.node, args.partition), row)
    done = [r for r in results if isinstance(r, GpuLost)]
    for step in STEPS:
        values = [v for r in done if (v := getattr(r, step)) is not None]
        print(f"median {step:<14} {statistics.median(values):6.1f} s ({len(values)}/{runs})" if values
              else f"median {step:<14}      - (0/{runs})")
    ok = len(done) == runs and all(r.final_state == "COMPLETED" and r.restarts == 1 for r in done)
    print("every GPU job completed on the new machine, requeued once" if ok else "FAILED: see the rows above")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
