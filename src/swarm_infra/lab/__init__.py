"""The local lab: real test nodes (system containers) on one machine. See ``swarm lab --help``."""
