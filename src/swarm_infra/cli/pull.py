"""``swarm agent run`` (one pull agent run: the node's timer starts it) and ``swarm node
bootstrap`` (a provider prepares a new machine for pull convergence)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from ..agent import bootstrap as B
from ..agent.config import ConfigInvalid, Paths, load_config
from ..agent.run import run_once
from ..resolve.layout import node_layout
from .common import EXIT_FAILURE, EXIT_INVALID, EXIT_OK, emit

# Results a run may end with and still exit 0: nothing is wrong (yet).
_QUIET = ("applied", "waiting", "paused")


def cmd_agent_run(args: argparse.Namespace) -> int:
    try:
        config = load_config(Path(args.config))
    except ConfigInvalid as exc:
        print(f"swarm agent run: {exc}; nothing was run", file=sys.stderr)
        return EXIT_INVALID
    status = run_once(config, Paths.node(Path(args.root)))
    emit(f"swarm agent: {status.result}: {status.reason}")
    return EXIT_OK if status.result in _QUIET else EXIT_FAILURE


def cmd_node_bootstrap(args: argparse.Namespace) -> int:
    root = Path(args.root)
    req = B.Request(
        node=args.node,
        site=args.site,
        address=args.address,
        roles=tuple(args.role or ("gpu-worker",)),
        nat=args.nat,
        fleet=args.fleet,
        remote=args.remote,
        ref=args.ref,
        allowed_signers=Path(args.allowed_signers),
        deploy_key=Path(args.deploy_key) if args.deploy_key else None,
        known_hosts=Path(args.known_hosts) if args.known_hosts else None,
        status_port=args.status_port,
        interface=args.interface,
    )
    try:
        signers = B.check(req)
    except B.BootstrapError as exc:
        print(f"swarm node bootstrap: {exc}; nothing was written", file=sys.stderr)
        return EXIT_INVALID
    if root == Path("/") and os.geteuid() != 0:
        print("swarm node bootstrap: run it as root (it writes /etc and systemd units); nothing was written",
              file=sys.stderr)  # fmt: skip
        return EXIT_INVALID
    layout = node_layout(req.interface)
    try:
        B.install(req, signers, root)
        key, made = B.wireguard_key(root / layout["files"]["wireguard_key"]["path"].lstrip("/"))
    except B.BootstrapError as exc:
        print(f"swarm node bootstrap: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except OSError as exc:
        print(f"swarm node bootstrap: {exc.filename or ''}: {exc.strerror}", file=sys.stderr)
        return EXIT_FAILURE
    try:
        meminfo = Path("/proc/meminfo").read_text()
    except OSError:
        meminfo = ""
    document = B.node_document(req, key, os.cpu_count() or 1, B.memory_gib(meminfo))
    if root == Path("/") and not args.no_start:
        timer = layout["units"]["agent_timer"]
        for argv in (["systemctl", "daemon-reload"], ["systemctl", "enable", "--now", timer]):
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                print(
                    f"swarm node bootstrap: {' '.join(argv)} failed: {done.stderr.strip()}", file=sys.stderr
                )
                return EXIT_FAILURE
    emit(f"WireGuard public key ({'made now' if made else 'kept'}): {key}")
    emit(
        f"\nPropose this Node document to the fleet repository (inventory/{req.fleet}/, e.g. "
        f"inventory/{req.fleet}/nodes/{req.node}.yaml), reviewed and signed; add hardware.gpus "
        "and nvme as the fleet's GPU catalog names them. Until it is merged this node only "
        "pulls and applies nothing:\n"
    )
    emit(document.rstrip("\n"))
    return EXIT_OK


def _group(sub: argparse._SubParsersAction, name: str, help: str) -> argparse._SubParsersAction:
    """``swarm NAME COMMAND``: the group's parser, whose COMMAND is required; ``help`` is
    its line in ``swarm --help`` and its own ``--help``'s description."""
    group = sub.add_parser(name, help=help, description=help[0].upper() + help[1:] + ".")
    return group.add_subparsers(dest=f"{name}_command", required=True, metavar="COMMAND")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    run = _group(sub, "agent", "the pull agent (run on a node by its timer)").add_parser(
        "run",
        help="one pull run: fetch, verify the signature, apply this node's state, report",
        description="Fetch the fleet's ref, verify the commit's SSH signature against the "
        "node's allowed signers, check that it descends from the last good commit, resolve "
        "this node's state and, once the earlier rollout batches report the commit applied, "
        "apply it with ansible-playbook -c local. Writes the status file and the "
        "node_exporter textfile. The node's swarm-agent.timer runs it.",
        epilog="Exit codes: 0 applied, waiting for earlier batches, or paused; 1 refused, "
        "failed, halted, fetch failed or invalid fleet (the last good state is kept); 2 the "
        "settings file is invalid (nothing run).",
    )
    run.add_argument("--config", default=node_layout()["files"]["agent_config"]["path"], help="settings file")
    run.add_argument("--root", default="/", help=argparse.SUPPRESS)
    run.set_defaults(func=cmd_agent_run)

    boot = _group(sub, "node", "prepare a node (run on the node)").add_parser(
        "bootstrap",
        help="install the pull agent, make the WireGuard key, print the change to propose",
        description="Run once, as root, on a new machine: writes the pull agent's settings, "
        "the allowed signers you got from the fleet's operator (the node's root of trust: "
        "take them over a channel you trust), an ssh remote's deploy key (0600), starts the "
        "agent's timer, makes the node's WireGuard key (0600; an existing one is kept) and "
        "prints its public key and the Node document to propose. Until that change is merged "
        "the node only pulls.",
        epilog="Example: swarm node bootstrap --node acme-gpu-7 --site acme-1 --address "
        "192.168.10.7 --nat --fleet prod --remote https://git.example.org/swarm/fleet.git "
        "--ref main --allowed-signers ./allowed_signers. Exit codes: 0 done, 1 writing or "
        "starting failed, 2 invalid arguments or not root (nothing written).",
    )
    boot.add_argument("--node", required=True, help="the node's name in the fleet")
    boot.add_argument("--site", required=True, help="the Site it is in")
    boot.add_argument("--address", required=True, help="its underlay IPv4 address")
    boot.add_argument("--role", action="append", help="a role (repeatable; default gpu-worker)")
    boot.add_argument("--nat", action="store_true", help="the node is behind NAT")
    boot.add_argument("--fleet", required=True, help="the fleet's name (inventory/NAME)")
    boot.add_argument("--remote", required=True, help="the fleet repository: https://, ssh:// or file:// URL")
    boot.add_argument("--ref", default="main", help="the branch to track (default: %(default)s)")
    boot.add_argument("--allowed-signers", required=True, help="allowed signers file from the operator")
    boot.add_argument("--deploy-key", help="private key for an ssh:// remote (copied, 0600)")
    boot.add_argument("--known-hosts", help="the Git server's host key, known_hosts format (ssh://)")
    boot.add_argument(
        "--status-port", type=int, default=9100, help="node_exporter's port (default: %(default)s)"
    )
    boot.add_argument("--interface", default="wg0", help="the mesh interface (default: %(default)s)")
    boot.add_argument("--no-start", action="store_true", help="write the files, do not start the timer")
    boot.add_argument("--root", default="/", help=argparse.SUPPRESS)
    boot.set_defaults(func=cmd_node_bootstrap)
