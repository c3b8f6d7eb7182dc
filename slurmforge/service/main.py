"""`slurmforge-service`: the daemon's entry point (run by systemd on the controller).

    slurmforge-service --spec /etc/slurmforge/cluster.yaml \\
        --provider-settings /etc/slurmforge/provider.json --listen 10.0.0.2:9110

The provider settings are JSON the rollout writes from the inventory
(`slurmforge_service_provider_settings`): the target's dataclass in slurmforge.contract,
whose keys the inventory writer and this loader share (AWS: region, launch templates,
private subnets and the spot queue, from the stack's outputs). Clients are built here,
never at import.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import socket
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from slurmforge.contract import SERVICE_PORT, SERVICE_STATE_DIR
from slurmforge.errors import ProvisionError, SlurmforgeError
from slurmforge.hosts import controller_names
from slurmforge.provider import Machines, build_provider
from slurmforge.service import handoff, web
from slurmforge.service.daemon import LOOP_INTERVAL, Daemon, DaemonConfig
from slurmforge.service.leader import Leadership
from slurmforge.service.state import Store
from slurmforge.slurm.client import SlurmClient
from slurmforge.spec.models import Cluster

log = logging.getLogger(__name__)

STATE_DIR = Path(SERVICE_STATE_DIR)
DEFAULT_PORT = SERVICE_PORT  # Prometheus' scrape config names the same port


def load_provider(spec: Cluster, settings_file: Path | None) -> Machines:
    """The provider the daemon runs with: the settings file the rollout wrote (none: empty
    settings), handed to `build_provider`."""
    settings = json.loads(settings_file.read_text()) if settings_file else {}
    if not isinstance(settings, dict):
        raise ProvisionError(f"{settings_file}: provider settings must be a JSON object")
    return build_provider(spec, settings)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="slurmforge-service", description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, required=True, help="the cluster spec (re-read every loop)")
    parser.add_argument("--provider-settings", type=Path, help="the provider's settings (JSON)")
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
    parser.add_argument("--pool-hosts", type=Path, help="write the pool nodes' addresses and names here (the node "
                        "kit's pool hosts, which every node adds to /etc/hosts)")
    parser.add_argument("--slurmd-failures", type=Path, help="read the nodes' slurmd failures here every loop (the "
                        "node kit's, written by the join program)")
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
        provider = load_provider(spec, args.provider_settings)
    except (SlurmforgeError, OSError, ValueError) as exc:
        print(f"slurmforge-service: {exc}", file=sys.stderr)
        return getattr(exc, "exit_code", 1)
    config = DaemonConfig(spec_path=args.spec, spool=args.spool, heartbeat=args.state_dir / "heartbeat",
                          interval=args.interval, targets_file=args.targets_file,
                          pool_hosts_file=args.pool_hosts, slurmd_failures_dir=args.slurmd_failures)
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
