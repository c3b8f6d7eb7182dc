"""The node agent: the one program every host of a cluster runs to become a node of it
(templates/node/), rendered once per cluster, and the node kit it reads from the NAS."""
