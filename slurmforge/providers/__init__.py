"""Target specifics behind one small interface per caller (`base.Machines` for the scheduler
service, `base.Provisioner` for the CLI): `local` (podman) and `aws`."""
