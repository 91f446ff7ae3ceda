"""Notebook 04 in a real JupyterLab, driven by headless Chromium.

The test starts JupyterLab on 127.0.0.1 with a token, opens a copy of
``notebooks/04_sampler.ipynb``, runs every cell, then types into the sampler
explorer's world-size and epoch boxes and checks that the partition drawn in
the page is the one the real ``DistributedSampler`` gives for the new
settings. A screenshot of the explorer is saved in ``tests/artifacts/``.

Chromium comes from Debian's ``chromium`` package (Playwright cannot download
its own browser on the machines that test this course). Without it the test
is skipped, except under CI (``CI=true``), where it fails: ``.ci/run``
installs it.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import psutil
import pytest

from ddp_lesson import data

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("DDP_LESSON_ARTIFACTS", ROOT / "tests" / "artifacts"))
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: Seconds for JupyterLab to start, and for the whole notebook to run.
SERVER_START_S, RUN_ALL_S = 90, 300


def _chromium() -> str:
    found = os.environ.get("DDP_LESSON_CHROMIUM") or shutil.which("chromium")
    if found:
        return found
    reason = (
        "no Chromium found: install Debian's package (sudo apt-get install chromium) "
        "or set DDP_LESSON_CHROMIUM to a Chromium binary"
    )
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def lab(tmp_path):
    """A JupyterLab server on 127.0.0.1 serving a copy of notebook 04; yields (url, token)."""
    (tmp_path / "workers").mkdir()
    notebook = nbformat.read(ROOT / "notebooks" / "04_sampler.ipynb", as_version=4)
    for cell in notebook.cells:  # everything the page shows must come from this run
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    notebook.metadata.pop("widgets", None)
    nbformat.write(notebook, tmp_path / "04_sampler.ipynb")
    shutil.copy(ROOT / "notebooks" / "workers" / "__init__.py", tmp_path / "workers")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    # no "would you like news?" prompt over the page
    settings = tmp_path / ".settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(
        '{"fetchNews": "false", "checkForUpdates": false}'
    )
    port, token = _free_port(), secrets.token_hex(16)
    env = {
        **os.environ,
        # a clean, private Jupyter state for this test only
        "JUPYTER_CONFIG_DIR": str(tmp_path / ".config"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / ".runtime"),
        "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / ".workspaces"),
    }
    command = [
        sys.executable, "-m", "jupyterlab", "--no-browser",
        "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
        f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={tmp_path}",
        "--LabApp.news_url=None", f"--LabApp.user_settings_dir={tmp_path / '.settings'}",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]  # fmt: skip
    if os.getuid() == 0:
        command.append("--allow-root")
    log = open(tmp_path / "jupyterlab.log", "wb")
    server = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        "JupyterLab did not start:\n" + (tmp_path / "jupyterlab.log").read_text()
                    ) from None
                time.sleep(0.5)
        yield url, token
    finally:
        shutil.copy(tmp_path / "jupyterlab.log", ARTIFACTS / "jupyterlab.log")
        family = [server.pid] + [p.pid for p in psutil.Process(server.pid).children(True)]
        server.terminate()  # JupyterLab shuts its kernels down on SIGTERM
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        for pid in family:  # anything that outlived its server
            try:
                psutil.Process(pid).kill()
            except psutil.NoSuchProcess:
                pass
        log.close()


def _start_kernel(url: str, token: str) -> None:
    """Start the notebook's kernel through JupyterLab's REST API before the page opens.

    A page that finds a running session for its notebook connects to it;
    without one, JupyterLab may first ask which kernel to start.
    """
    request = urllib.request.Request(
        f"{url}/api/sessions?token={token}",
        data=json.dumps(
            {"path": "04_sampler.ipynb", "type": "notebook", "kernel": {"name": "python3"}}
        ).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    urllib.request.urlopen(request, timeout=60).close()


def _wait_for_kernel(page) -> None:
    """Wait until the kernel is idle and no dialog is open (accepting "Select Kernel")."""
    accept = page.locator(".jp-Dialog .jp-mod-accept")
    idle = page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")
    settled_since = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if accept.count():
            accept.first.click()  # "Select Kernel": the default, Python 3 (ipykernel)
            settled_since = None
        elif idle.count():
            settled_since = settled_since or time.monotonic()
            if time.monotonic() - settled_since > 3:  # a dialog can open a moment late
                return
        time.sleep(0.5)
    raise AssertionError("the notebook's kernel did not become idle within 60 s")


def _run_all(page) -> None:
    """Run > Run All Cells, again if the first code cell has not started within 30 s."""
    started = page.locator(".jp-InputPrompt", has_text=re.compile(r"\[(\*|\d+)\]"))
    for _ in range(3):
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator("[data-command='runmenu:run-all']").click()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if started.count():
                return
            time.sleep(0.5)
    raise AssertionError("Run All Cells did not start the notebook's cells")


def _rendered(page) -> list[str]:
    return page.locator(".ddp-partition .ddp-rank-list").all_inner_texts()


def _expect_partition(page, partition: list[list[int]]) -> None:
    expected = [f"rank {rank}: {indices}" for rank, indices in enumerate(partition)]
    deadline = time.monotonic() + 30
    while _rendered(page) != expected:
        if time.monotonic() > deadline:
            raise AssertionError(f"page shows {_rendered(page)}, expected {expected}")
        time.sleep(0.2)


def _type(page, control: str, value: str) -> None:
    box = page.locator(f".ddp-sampler-explorer .{control} input")
    box.fill(value)
    box.press("Enter")  # the boxes act on Enter, not on every keystroke


def test_explorer_follows_controls_in_jupyterlab(no_leftovers, lab):
    sync_api = pytest.importorskip("playwright.sync_api")
    chromium = _chromium()
    url, token = lab
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            _start_kernel(url, token)
            page.goto(f"{url}/lab/tree/04_sampler.ipynb?token={token}")
            page.locator(".jp-Notebook").first.wait_for(timeout=60_000)
            _wait_for_kernel(page)
            _run_all(page)
            # the last lesson cell launches real ranks to verify the explorer
            verified = page.locator(".ddp-verified")
            verified.wait_for(timeout=RUN_ALL_S * 1000)
            assert "Verified by a real launch" in verified.inner_text()

            explorer = page.locator(".ddp-sampler-explorer")
            explorer.scroll_into_view_if_needed()
            _expect_partition(page, data.sampler_partition(11, 2, epoch=1))

            _type(page, "ddp-world-size", "3")
            _expect_partition(page, data.sampler_partition(11, 3, epoch=1))
            _type(page, "ddp-epoch", "2")
            after = data.sampler_partition(11, 3, epoch=2)
            _expect_partition(page, after)
            marks = page.locator(".ddp-partition .ddp-marks").inner_text()
            assert f"repeated as padding: {data.padding_of(after, 11)['repeated']}" in marks

            page.locator(".ddp-partition").first.scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / "partition-explorer.png"))
            # the button's whole label shows beside the controls, not "verify with a real l..."
            button = page.locator(".ddp-sampler-explorer .ddp-verify")
            assert button.evaluate("b => b.scrollWidth <= b.clientWidth"), "label cut off"

            # bad input: a message in the widget, and the drawing stays as it was
            _type(page, "ddp-world-size", "0")
            message = page.locator(".ddp-sampler-explorer .ddp-message")
            message.get_by_text("world size must be >= 1").wait_for(timeout=30_000)
            _expect_partition(page, after)
        except Exception:
            # what the page showed when it went wrong, for the CI log and artifacts
            page.screenshot(path=str(ARTIFACTS / "failure.png"), full_page=True)
            errors = page.locator("[data-mime-type='application/vnd.jupyter.stderr']")
            print("stderr outputs in the page:", errors.all_inner_texts())
            raise
        finally:
            browser.close()
