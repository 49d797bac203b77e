"""Apply: adapters that converge nodes to their NodeState (``ansible``; pyinfra and Pulumi
come next). They only apply decisions made in :mod:`swarm_infra.resolve`."""
