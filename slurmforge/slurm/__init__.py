"""Slurm as slurmforge reads and drives it: the client (argument lists, JSON answers) and what
a node's reason says about whose it is. Below every user: the scheduler service, the plan,
the safe apply's drain and the live-cluster validation."""
