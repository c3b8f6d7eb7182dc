"""`slurmforge plan`: what applying a spec does to a running cluster, before anything changes.

- deployed.py reads what runs (the controller's files, Slurm's and slurmdbd's state) in one
  round trip (gather.py runs on the controller);
- configs.py reads Slurm's config files as Slurm does and knows what each change costs the
  daemons;
- engine.py compares deployed, deployed-as-rendered-here and new, and lists every change
  with its effect on daemons and jobs;
- show.py makes the table (slurmforge.tables) the command prints.
"""
