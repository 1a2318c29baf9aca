"""The parts of the kubernetes runtime (``runtimes/kubernetes.py``): ``settings`` (the
engine config's ``kubernetes`` table), ``manifests`` (the objects, as dicts), ``render``
(them as YAML), ``client`` (the connection; the only module that imports the client
library), ``apply`` (create or apply, delete), ``session`` (the session's ConfigMap that
owns the rest, and the reaper), ``failures`` (what a pod's status and events say about a
start that cannot succeed), ``phases`` (a pod's cold start and stage), ``forward`` (the
port-forward access path), ``role`` (the least privilege it needs)."""
