"""The AWS rehearsal: the AWS path run on this machine, without an AWS account
(docs/rehearsal.md).

- a moto server stands in for AWS's APIs (`stand_in.StandIn`), on an address the
  machines reach;
- `imds.Imds` stands in for the instance metadata service of every instance in it;
- `machines.Machines` makes every EC2 instance a podman container that boots systemd from
  the podman image its AMI maps to, reaches the metadata service at EC2's address and runs
  its own user data with Debian's cloud-init (`parent.py`: the stand-in for Debian's AMI);
- `image_phase.py`: the stack's golden image (stacks/image.py `bake`) built by a real
  build instance, and a machine booted from the AMI it made.
"""
