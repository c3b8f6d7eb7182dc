"""`slurmforge upgrade`: a new node image rolled through a running cluster in Slurm's order,
no job lost (docs/upgrade.md, "Patch day").

- versions: Slurm's version order, checked before every step (pure);
- plan: the steps, in order, with what each does to jobs (pure);
- progress: what is done, recorded in <state root>/<cluster>/upgrade.json (a hint: the hosts
  are asked);
- dump: the accounting database's backup;
- fleet: the steps on a cluster (head hosts upgraded in place, compute nodes replaced), local
  and AWS;
- engine: the order, the guard, resume; where it starts per target: slurmforge.upgrade_start.
"""
