"""The Kubernetes client library is optional: nothing imports it until an engine uses
the kubernetes runtime, and its absence says which extra to install."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pytest_llmslo.errors import EngineUnavailable


def test_the_package_does_not_import_the_client_library() -> None:
    code = (
        "import sys, pytest_llmslo.engines, pytest_llmslo.engines.runtimes.kubernetes\n"
        "print('kubernetes' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_missing_client_library_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_llmslo.engines.runtimes.k8s.kubeclient import kubernetes_module

    monkeypatch.setitem(sys.modules, "kubernetes", None)
    with pytest.raises(EngineUnavailable, match=r"pip install 'pytest-llmslo\[k8s\]'"):
        kubernetes_module()
