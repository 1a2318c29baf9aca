"""The parts of the kubernetes runtime (``runtimes/kubernetes.py``): ``settings`` (the
engine config's ``kubernetes`` table), ``manifests`` (the objects, as dicts), ``client``
(the connection; the only module that imports the client library), ``failures`` (what a
pod's status and events say about a start that cannot succeed)."""
