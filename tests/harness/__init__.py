"""What the tests and the benches use to act on a running cluster (faults, live probes) and
the AWS rehearsal: test code, not part of the installed product."""
