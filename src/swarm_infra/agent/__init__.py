"""The pull agent: a node converges itself from the fleet repository's signed commit.

:mod:`.decide` holds its decisions (pure); :mod:`.git` fetches and verifies with the real
git; :mod:`.engine` applies the node's state with ``ansible-playbook -c local``;
:mod:`.report` writes reports and is the one reader of a node's report page (the gate's
and ``swarm status``'); :mod:`.status` judges reports for ``swarm status``; :mod:`.plan`
resolves a verified commit's fleet with that commit's library; :mod:`.run` is one run
(``swarm agent run``); :mod:`.bootstrap` prepares a new node (``swarm node bootstrap``).
"""
