"""Cloud specifics behind one small interface (`base.Provider`): `local` (podman) and `aws`."""
