"""The storage provisioners the stack installs, and what their classes need.

A StorageClass whose provisioner nothing installs never binds: an ``Immediate`` claim stays
``Pending`` and ``pulumi up`` waits on it until it times out. So a Storage policy may only
name a provisioner listed here (``storage.provisioner-not-installed``), and the cluster layer
installs each one it names:

- ``nfs.csi.k8s.io``: the NFS CSI driver (kubernetes-csi/csi-driver-nfs), Helm chart
  ``csi-driver-nfs`` pinned in ``engines/pulumi/config.py`` (``CSI_NFS_VERSION``), released
  by the Pulumi ``Storage`` component; a GitOps install must install that chart too. Its
  volumes are network shares, reachable from every node: any binding mode works.
- ``rancher.io/local-path``: rancher/local-path-provisioner, rendered by the cluster layer
  itself (``cluster.core.local_path_provisioner``) when ``Storage.scratch`` is declared,
  storing volumes under each node's scratch mount. Its volumes live on one node, so its
  class must bind ``WaitForFirstConsumer`` (upstream provisioner.go v0.0.37,
  ``provisionFor``: a claim with no selected node is refused), and it is the scratch class
  (``scratch.storage_class``), not one of ``classes``.

What access modes a claim may ask for (``access_modes``; ``storage.access-mode-unsupported``):

- csi-driver-nfs (v4.13.1): every mode of a filesystem volume. Its controller refuses only
  block volumes (``pkg/nfs/controllerserver.go`` ``isValidVolumeCapabilities``) and the
  driver advertises ``SINGLE_NODE_MULTI_WRITER`` (``pkg/nfs/nfs.go`` ``NewDriver``), which
  Kubernetes needs to pass ``ReadWriteOncePod`` on to a CSI driver.
- local-path-provisioner (v0.0.37): ``ReadWriteOnce`` and ``ReadWriteOncePod`` only, on
  node paths (``provisioner.go`` ``provisionFor``: any other mode fails provisioning with
  "NodePath only supports ReadWriteOnce and ReadWriteOncePod (1.22+) access modes", so the
  claim stays ``Pending``).
"""

from __future__ import annotations

from dataclasses import dataclass

NFS_CSI = "nfs.csi.k8s.io"
LOCAL_PATH = "rancher.io/local-path"


@dataclass(frozen=True)
class Provisioner:
    name: str  # the StorageClass provisioner
    installed_by: str  # what installs it, in words (for messages and docs)
    node_local: bool  # volumes live on one node: the class must bind WaitForFirstConsumer
    declarable: bool  # may be named in Storage.classes (False: only the scratch class uses it)
    access_modes: tuple[str, ...]  # the PVC access modes its volumes can be provisioned with


PROVISIONERS: dict[str, Provisioner] = {
    NFS_CSI: Provisioner(
        NFS_CSI,
        "the csi-driver-nfs Helm chart",
        node_local=False,
        declarable=True,
        access_modes=("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"),
    ),
    LOCAL_PATH: Provisioner(
        LOCAL_PATH,
        "the local-path provisioner on scratch (Storage.scratch)",
        node_local=True,
        declarable=False,
        access_modes=("ReadWriteOnce", "ReadWriteOncePod"),
    ),
}
