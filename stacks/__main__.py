"""Pulumi entry point (Pulumi.yaml: main: stacks/). Thin: the stack's config in, the
package's program out. See stacks/README.md."""

from pathlib import Path

from swarm_infra.engines.pulumi.config import StackConfig
from swarm_infra.engines.pulumi.program import export, run

export(run(StackConfig.from_pulumi(), Path(__file__).resolve().parents[1]))
