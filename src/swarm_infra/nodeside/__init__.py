"""Code that runs on the nodes, shipped by both engines and imported by the library.

``gpu``: the node-side GPU code (NVML or simulated), one self-contained file (standard
library plus pynvml) that Ansible ships as module_utils, pyinfra uploads and runs, and
verification calls. ``facts``: pure parsers of what nodes print (sysctl, wg, ip, tmpfiles).
Nothing here imports the rest of the package.
"""
