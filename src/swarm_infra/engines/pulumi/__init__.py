"""Pulumi engine: the cluster layer's objects as ComponentResources (``components``), one
resource per object (``resources``), the stack's typed config (``config``) and the program
``stacks/__main__.py`` runs (``program``)."""
