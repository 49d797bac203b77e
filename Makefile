# `make demo`: the main job on this machine (Debian 12, as root), from a clean clone.
# Installs what it needs, starts the 3-node lab, validates the fleet, converges every node
# with Ansible (Ray over the mesh included), verifies them with testinfra and prints the
# summary. The lab stays up.
SWARM := .venv/bin/swarm

.PHONY: demo install test down

demo: install
	$(SWARM) validate --fleet lab
	$(SWARM) lab up --fleet lab
	$(SWARM) converge --fleet lab
	$(SWARM) verify --fleet lab
	@echo
	@echo "The lab is still up. Look around:"
	@echo "  $(SWARM) lab status"
	@echo "  $(SWARM) lab ssh lab-gpu-1 -- wg show"
	@echo "  $(SWARM) plan --fleet lab --limit lab-gpu-1"
	@echo "  $(SWARM) converge --check --diff      # nothing to change"
	@echo "  README, 'Ray over the mesh': submit jobs/mesh_proof.py to the lab's Ray cluster over wg0"
	@echo "Tear it down: $(SWARM) lab down   (or: make down)"

install:
	bash scripts/install.sh

# What CI runs: lint, then every test (needs root for the lab).
test:
	bash .ci/run

down:
	$(SWARM) lab down
