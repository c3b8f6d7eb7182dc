"""slurmforge: one cluster.yaml to a working Slurm cluster for ML teams."""

__version__ = "0.1.0"
