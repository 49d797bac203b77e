"""The e2e test uses the lab fixtures of tests/lab (root: namespaces, mounts, cgroups)."""

from tests.lab.conftest import lab  # noqa: F401  (the module-scoped 3-node lab)
