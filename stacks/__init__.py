"""The Pulumi program that builds a slurmforge cluster on AWS.

`program` reads the spec path from stack config and calls `cluster.build_cluster`;
every other module is one ComponentResource (one concern) plus the pure functions it
is made of (policy documents, security-group rules, user data).
"""
