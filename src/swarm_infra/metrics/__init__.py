"""Fleet measurements: parsers of iperf3, fio and ping output into Measurement records.

A consumer of the desired state (like verify and review): it reads what tools print on nodes
and never decides what a node should look like.
"""
