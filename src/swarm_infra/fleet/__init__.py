"""Declare: what the operator's files say. Finding the fleet's files (``sources``), parsing
YAML fast with positions on demand (``loader``, ``marks``), JSON Schema per document kind
(``schemas``), the typed, immutable model with the schemas' defaults applied (``model``),
and the one shape of every finding (``diagnostics``). Nothing here decides what a node
should look like; that is :mod:`swarm_infra.resolve`."""
