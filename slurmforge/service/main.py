"""`slurmforge-service`: the daemon's entry point (run by systemd on the controller).

    slurmforge-service --spec /etc/slurmforge/cluster.yaml \\
        --provider-config /etc/slurmforge/provider.json --listen 0.0.0.0:9110

The provider config is JSON the rollout writes: for AWS the stack's outputs
(`pulumi stack output --json`; the provider reads launch_templates, private_subnets and
spot_queue_url), for other targets what their `service_provider` asks for. Clients are
built here, never at import.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import signal
import socket
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from slurmforge.errors import ProvisionError, SlurmforgeError
from slurmforge.monitoring import SERVICE_PORT
from slurmforge.providers.base import Machines
from slurmforge.render import controller_names
from slurmforge.service import handoff, web
from slurmforge.service.daemon import LOOP_INTERVAL, Daemon, DaemonConfig
from slurmforge.service.leader import Leadership
from slurmforge.service.slurm import SlurmClient
from slurmforge.service.state import Store
from slurmforge.spec.models import Cluster

log = logging.getLogger(__name__)

STATE_DIR = Path("/var/lib/slurmforge/service")
DEFAULT_PORT = SERVICE_PORT  # Prometheus' scrape config names the same port


def build_provider(spec: Cluster, options: Mapping[str, Any]) -> Machines:
    """aws: the EC2 provider here; any other target: `slurmforge.providers.<kind>` must
    offer `service_provider(spec, options) -> Machines`."""
    kind = spec.target.kind
    if kind == "aws":
        from slurmforge.providers.aws import AwsProvider

        return AwsProvider.from_options(spec, options)
    try:
        module = importlib.import_module(f"slurmforge.providers.{kind}")
    except ImportError as exc:
        raise ProvisionError(f"no '{kind}' provider for the scheduler service: {exc}") from exc
    factory = getattr(module, "service_provider", None)
    if factory is None:
        raise ProvisionError(f"slurmforge.providers.{kind} has no service_provider(spec, options)")
    return cast(Machines, factory(spec, options))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="slurmforge-service", description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, required=True, help="the cluster spec (re-read every loop)")
    parser.add_argument("--provider-config", type=Path, help="JSON options for the provider")
    parser.add_argument("--state-dir", type=Path, default=STATE_DIR, help="this host's own files (heartbeat)")
    parser.add_argument("--shared-dir", type=Path, help="the launch records and the leader lock, on storage "
                        "every controller mounts (default: the state dir)")
    parser.add_argument("--host", default=socket.gethostname(), help="this controller's name, as SlurmctldHost has it")
    parser.add_argument("--spool", type=Path, default=handoff.spool_dir())
    parser.add_argument("--listen", default=f"127.0.0.1:{DEFAULT_PORT}", help="host:port of /metrics and the "
                        "pool page; empty to disable")
    parser.add_argument("--interval", type=float, default=LOOP_INTERVAL)
    parser.add_argument("--targets-file", type=Path, help="write the dynamic nodes' node exporter targets here "
                        "(Prometheus file_sd), every loop")
    parser.add_argument("--slurm-bin", default="", help="directory of sinfo/scontrol (default: PATH)")
    parser.add_argument("--once", action="store_true", help="run one loop and exit")
    parser.add_argument("--verbose", "-v", action="store_true")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from slurmforge.spec import load_spec

    try:
        spec = load_spec(args.spec)
        options = json.loads(args.provider_config.read_text()) if args.provider_config else {}
        provider = build_provider(spec, options)
    except (SlurmforgeError, OSError, ValueError) as exc:
        print(f"slurmforge-service: {exc}", file=sys.stderr)
        return getattr(exc, "exit_code", 1)
    config = DaemonConfig(spec_path=args.spec, spool=args.spool, heartbeat=args.state_dir / "heartbeat",
                          interval=args.interval, targets_file=args.targets_file)
    shared = args.shared_dir or args.state_dir
    slurm = SlurmClient(bin_dir=args.slurm_bin)
    controllers = controller_names(spec)
    leadership = Leadership(args.host, controllers, shared, slurm.ping) if len(controllers) > 1 else None
    # with two controllers the store lives on shared storage, one host at a time (the lock):
    # a rollback journal, not WAL, whose index is shared memory of one host
    store = Store(shared / "state.db", wal=leadership is None)
    daemon = Daemon(config, slurm, provider, store, load_spec, leadership=leadership)
    server = None
    if args.listen:
        host, _, port = args.listen.rpartition(":")
        server = web.serve(lambda: daemon.snapshot, host or "127.0.0.1", int(port))
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        if args.once:
            daemon.loop_once()
        else:
            daemon.run(stop)
    finally:
        if server is not None:
            server.shutdown()
    return 0
