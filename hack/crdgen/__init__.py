"""The CRD generator: ``python -m hack.crdgen`` writes ``crds/`` and the Helm chart's copies
from kdra's models (``__main__`` the command, ``render`` the documents and files, ``openapi``
models as schemas, ``v1alpha3`` the derived version, ``kinds`` what a CRD says besides its
schema). Dev-only: not in the wheel or the image."""
