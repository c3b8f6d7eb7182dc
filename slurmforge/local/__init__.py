"""The local target: the whole cluster as podman containers on this machine."""
