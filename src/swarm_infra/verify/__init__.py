"""Check: what verification checks on each node (``checks``, derived from NodeState), how
each actual value is read through testinfra (``readers``), and ``swarm verify``'s run, table
and drift report (``report``)."""
