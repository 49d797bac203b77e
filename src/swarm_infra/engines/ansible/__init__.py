"""The Ansible engine: inventory contents (hosts, groups, host variables), running the
layer playbooks through ansible-runner, and their live progress and summary."""
