"""Slurm's config files as data, and what a change to each costs the daemons (Slurm 24.11).

The plan compares three versions of each file: the one on the controller (deployed), what
this slurmforge renders from the deployed spec, and what it renders from the new spec. It
compares them as Slurm reads them: comments and blank lines do not count, a NodeName line
stands for every node of its hostlist, the first token of a line names what it configures.

What a daemon does with a change (checked against Slurm 24.11.5's manual pages and source):

- slurm.conf, gres.conf, cgroup.conf: "Changes to the configuration file take effect upon
  restart of Slurm daemons, daemon receipt of the SIGHUP signal, or execution of the
  command 'scontrol reconfigure' unless otherwise noted" (slurm.conf(5), cgroup.conf(5),
  gres.conf(5)). Since 23.11 `scontrol reconfigure` starts a new slurmctld on the new files
  and hands control over only when it comes up; it "will not be able to change the daemons'
  listening TCP port settings or authentication mechanism" (scontrol(1), reconfigure;
  src/slurmctld/controller.c `_try_to_reconfig` passes the listening sockets and the auth
  fd to the new process). Nodes are added and removed the same way ("Changes in node
  configuration (e.g. adding nodes, changing their processor count, etc.) require restarting
  or reconfiguring all slurmctld and slurmd daemons", slurm.conf(5), NODE CONFIGURATION).
  The rollout reconfigures the controller in control and restarts a standby backup
  (roles/slurm_controller/tasks/service.yml); slurmd gets the new config from slurmctld
  (configless: the reconfigure pushes it).
- Keys a reconfigure cannot apply (NOT_LIVE): AuthType ("All Slurm daemons and commands
  must be terminated prior to changing the value of AuthType and later restarted",
  slurm.conf(5)), AuthAltTypes with it, SlurmctldPort and SlurmdPort ("Changes to TCP
  listening settings will require a daemon restart"), StateSaveLocation (a new slurmctld
  reads its state from the new place: "RELOCATING CONTROLLERS" in slurm.conf(5) stops the
  daemons, copies the state and starts them again), SelectType and SwitchType ("When
  changed, all job information (running and pending) will be lost").
- job_submit.lua: slurmctld loads it again when its modification time changes
  (src/lua/slurm_lua.c, `slurm_lua_loadscript`); the rollout copies it with slurm.conf and
  reconfigures all the same.
- slurmdbd.conf: read at start or on SIGHUP (slurmdbd.conf(5)); the rollout restarts
  slurmdbd when it changes (roles/slurmdbd/handlers). slurmctld keeps its records for
  slurmdbd meanwhile.
- dma.conf: the mailer's, read at each message; no daemon.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from slurmforge.hostlists import expand

SLURM_CONF, GRES_CONF, CGROUP_CONF, SLURMDBD_CONF, MAIL_CONF = (
    "slurm.conf", "gres.conf", "cgroup.conf", "slurmdbd.conf", "dma.conf")
RECONFIGURED = ("slurm.conf", "gres.conf", "cgroup.conf", "job_submit.lua")
"""The files the rollout installs together and puts in force with `scontrol reconfigure`
(roles/slurm_controller/defaults: slurm_controller_config_files)."""

NOT_LIVE: Mapping[str, str] = {
    "AuthType": "every daemon stops and starts again: a reconfigure cannot change the authentication "
                "mechanism (man scontrol)",
    "AuthAltTypes": "every daemon stops and starts again: a reconfigure cannot change the authentication "
                    "mechanism (man scontrol)",
    "SlurmctldPort": "slurmctld restarts: a reconfigure keeps the listening ports (man scontrol)",
    "SlurmdPort": "every slurmd restarts: a reconfigure keeps the listening ports (man scontrol)",
    "StateSaveLocation": "stop slurmctld, move its state, start it (man slurm.conf, RELOCATING CONTROLLERS): "
                         "a reconfigure would start on an empty state",
    "SelectType": "Slurm loses every running and pending job (man slurm.conf, SelectType)",
    "SwitchType": "Slurm may lose the records of every job (man slurm.conf, SwitchType)",
}
"""slurm.conf keys whose change Slurm cannot put in force with a reconfigure, and why."""

HARDWARE_KEYS = ("CPUs", "Sockets", "CoresPerSocket", "ThreadsPerCore", "RealMemory", "Gres")
"""NodeName fields a node's machine must match: slurmctld aborts a running job whose nodes'
socket/core layout or GRES count changed (src/slurmctld/read_config.c, _sync_jobs_to_conf),
and a node that registers with less than its line says is set DOWN (man slurm.conf)."""

_TOKEN = re.compile(r'([^\s=]+)=("[^"]*"|\S*)')


def significant_lines(text: str, comment: str = "#") -> list[str]:
    """The lines Slurm reads: no blank lines, no comment lines."""
    return [s for s in (line.strip() for line in text.splitlines()) if s and not s.startswith(comment)]


def same_config(a: str | None, b: str | None, name: str) -> bool:
    """Do two versions of a config file say the same (comments aside)?"""
    if a is None or b is None:
        return a is b
    comment = "--" if name.endswith(".lua") else "#"
    return significant_lines(a, comment) == significant_lines(b, comment)


def fields(line: str) -> dict[str, str]:
    """`Key=Value Key2="a b"` -> {Key: Value, Key2: '"a b"'} (quotes kept: Slurm's text)."""
    return {key: value for key, value in _TOKEN.findall(line)}


@dataclass
class SlurmConf:
    """slurm.conf as Slurm reads it."""

    settings: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Cluster-wide keys; a key written on several lines (SlurmctldHost) keeps each value."""
    nodes: dict[str, dict[str, str]] = field(default_factory=dict)
    """Node name -> its NodeName line's fields (every node of a line shares one dict)."""
    partitions: dict[str, dict[str, str]] = field(default_factory=dict)
    """Partition name -> its PartitionName line's fields."""


def parse_slurm_conf(text: str) -> SlurmConf:
    conf = SlurmConf()
    defaults: dict[str, dict[str, str]] = {"NodeName": {}, "PartitionName": {}}
    for line in significant_lines(text):
        key, _, value = line.partition("=")
        if key in ("NodeName", "PartitionName"):
            items = fields(line)
            name = items.pop(key)
            if name == "DEFAULT":
                defaults[key] |= items
                continue
            merged = {**defaults[key], **items}
            if key == "PartitionName":
                conf.partitions[name] = merged
            else:
                for node in expand(name):
                    conf.nodes[node] = merged
        else:
            conf.settings[key] = (*conf.settings.get(key, ()), value.strip())
    return conf


def parse_settings(text: str, comment: str = "#") -> dict[str, tuple[str, ...]]:
    """A file of `Key=Value` lines (cgroup.conf, slurmdbd.conf; dma.conf's `KEY value`)."""
    out: dict[str, tuple[str, ...]] = {}
    for line in significant_lines(text, comment):
        key, sep, value = line.partition("=")
        if not sep:
            key, _, value = line.partition(" ")
        out[key.strip()] = (*out.get(key.strip(), ()), value.strip())
    return out


def parse_gres_conf(text: str) -> dict[str, dict[str, str]]:
    """gres.conf: cluster-wide keys under '' and each NodeName line's other fields by node."""
    out: dict[str, dict[str, str]] = {}
    for line in significant_lines(text):
        items = fields(line)
        names = items.pop("NodeName", None)
        if names is None:
            out.setdefault("", {}).update(items)
            continue
        for node in expand(names):
            out.setdefault(node, {}).update(items)
    return out


def changed_keys(old: Mapping[str, object], new: Mapping[str, object]) -> list[str]:
    """Keys whose value differs (or is only on one side), in the new file's order first."""
    keys = [*new, *(k for k in old if k not in new)]
    return [k for k in keys if old.get(k) != new.get(k)]


def shown(value: Iterable[str] | str | None) -> str:
    """A setting's value(s) as a plan line shows them; '(none)' for a key not written."""
    if value is None:
        return "(none)"
    if isinstance(value, str):
        return value
    return ", ".join(value) or "(none)"
