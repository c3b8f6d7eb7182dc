"""The AWS target: the scheduler service's EC2 provider, the inventory made of the Pulumi
stack's outputs (the program itself is stacks/), and the release of pool machines before the
stack is destroyed."""
