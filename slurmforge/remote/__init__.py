"""Running commands and writing files on one machine: here (LocalExecutor) or on a node of a
cluster read from its inventory (NodeExecutor: podman exec or ssh). Used by the Lmod
publisher, bring-up, cost, the plan and teardown."""
