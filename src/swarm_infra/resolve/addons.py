"""The namespaces of the add-ons the stack installs: one decision, read by the validator
(no tenant, system or GPU namespace may be one), the cluster layer and the Pulumi program.

- :data:`KUEUE_NAMESPACE`: Kueue's Helm release (``engines/pulumi/components.py``
  ``Operators``), and the namespace Kueue's Configuration must never manage
  (``cluster/rules.py`` ``kueue_configuration_violations``);
- :data:`KUBERAY_NAMESPACE`: the KubeRay operator's Helm release;
- :data:`LOCAL_PATH_NAMESPACE`: rancher/local-path-provisioner, rendered by the cluster
  layer when scratch is declared (``cluster.core.local_path_provisioner``; the namespace of
  upstream ``deploy/local-path-storage.yaml`` at v0.0.37).

The csi-driver-nfs chart goes to ``kube-system`` (its documented namespace), which Kubernetes
reserves already (``kube-*``).
"""

from __future__ import annotations

KUEUE_NAMESPACE = "kueue-system"
KUBERAY_NAMESPACE = "ray-system"
LOCAL_PATH_NAMESPACE = "local-path-storage"
ADDON_NAMESPACES = (KUEUE_NAMESPACE, KUBERAY_NAMESPACE, LOCAL_PATH_NAMESPACE)
