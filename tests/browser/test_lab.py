"""The browser tests' own guard: one kernel per notebook, or a failure that says so."""

from __future__ import annotations

import json
import urllib.request

import nbformat
import pytest
from lab import jupyterlab, kernels_of, one_kernel


def _api(url: str, token: str, path: str, method: str, body: dict) -> dict:
    request = urllib.request.Request(
        f"{url}/api/{path}?token={token}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method=method,
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        return json.load(reply)


def test_a_second_kernel_for_the_notebook_is_named(no_leftovers, tmp_path):
    nbformat.write(nbformat.v4.new_notebook(), tmp_path / "a.ipynb")
    kernel = {"type": "notebook", "kernel": {"name": "python3"}}
    with jupyterlab(tmp_path, "jupyterlab-guard.log") as (url, token):
        with pytest.raises(AssertionError, match=r"one kernel for a\.ipynb.*it runs 0 \(\[\]\)"):
            one_kernel(url, token, "a.ipynb", seconds=1)
        _api(url, token, "sessions", "POST", {"path": "a.ipynb", **kernel})
        one_kernel(url, token, "a.ipynb")
        # what a JupyterLab page does: a session under a path of its own, then renamed
        # to the notebook's, so the server holds two sessions (two kernels) for it
        page = _api(url, token, "sessions", "POST", {"path": "page-1234", **kernel})
        _api(url, token, f"sessions/{page['id']}", "PATCH", {"path": "a.ipynb"})
        assert len(kernels_of(url, token, "a.ipynb")) == 2
        with pytest.raises(AssertionError, match="one kernel for a.ipynb.*it runs 2"):
            one_kernel(url, token, "a.ipynb", seconds=1)
