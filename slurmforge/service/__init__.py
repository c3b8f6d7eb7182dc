"""The scheduler service: Slurm's power-saving programs hand work to a daemon on the
controller that classifies (Slurm state, cloud state, service state, now) into actions
and carries them out through a Slurm client and a provider.

Importing this package must stay cheap: the hand-off programs run inside slurmctld's
power-save thread and must return in well under a second.
"""
