"""What the real-browser tests share: Chromium, and a JupyterLab server of their own.

Each test starts JupyterLab on 127.0.0.1 with a token in a temporary folder,
with a private Jupyter state, opens a notebook there in headless Chromium
(Debian's ``chromium``, driven by Playwright through ``executable_path``)
and drives it as a learner would. Without Chromium the tests skip, except
under CI (``CI=true``), where they fail: ``.ci/run`` installs it.
"""

from __future__ import annotations

import contextlib
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
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from waiting import wait_until

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


def chromium() -> str:
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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def jupyterlab(folder: Path, log_name: str) -> Iterator[tuple[str, str]]:
    """JupyterLab serving ``folder`` on 127.0.0.1; yields (url, token), then stops it all.

    Its log is copied to ``tests/artifacts/<log_name>``; the server and
    every process it started (kernels, their ranks) are gone afterwards.
    """
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    # no "would you like news?" prompt over the page
    settings = folder / ".settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(
        '{"fetchNews": "false", "checkForUpdates": false}'
    )
    # no "Select Kernel" dialog: it can open late, on a busy machine after the
    # cells have started, and choosing a kernel then swaps the one they run in
    tracker = folder / ".settings" / "@jupyterlab" / "notebook-extension"
    tracker.mkdir(parents=True)
    (tracker / "tracker.jupyterlab-settings").write_text('{"autoStartDefaultKernel": true}')
    port, token = free_port(), secrets.token_hex(16)
    env = {
        **os.environ,
        # a clean, private Jupyter state for this test only
        "JUPYTER_CONFIG_DIR": str(folder / ".config"),
        "JUPYTER_RUNTIME_DIR": str(folder / ".runtime"),
        "JUPYTERLAB_WORKSPACES_DIR": str(folder / ".workspaces"),
    }
    command = [
        sys.executable, "-m", "jupyterlab", "--no-browser",
        "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
        f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={folder}",
        "--LabApp.news_url=None", f"--LabApp.user_settings_dir={folder / '.settings'}",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]  # fmt: skip
    if os.getuid() == 0:
        command.append("--allow-root")
    log = open(folder / "jupyterlab.log", "wb")
    server = subprocess.Popen(command, cwd=folder, env=env, stdout=log, stderr=log)
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
                        "JupyterLab did not start:\n" + (folder / "jupyterlab.log").read_text()
                    ) from None
                time.sleep(0.5)
        yield url, token
    finally:
        shutil.copy(folder / "jupyterlab.log", ARTIFACTS / log_name)
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


def kernels_of(url: str, token: str, notebook: str) -> list[str]:
    """The ids of the kernels the server at ``url`` runs for ``notebook`` (one per session)."""
    with urllib.request.urlopen(f"{url}/api/sessions?token={token}", timeout=60) as reply:
        sessions = json.load(reply)
    return [s["kernel"]["id"] for s in sessions if s["path"] == notebook]


def one_kernel(url: str, token: str, notebook: str, seconds: float = 30) -> None:
    """Wait until the server runs exactly one kernel for ``notebook``; fail naming them if not.

    The page starts its notebook's kernel itself. A second session for the
    same notebook (one started through the REST API, say) is a kernel the
    page does not show, and JupyterLab can swap one for the other under
    running cells on a busy machine. The wait is a margin for the page's
    own session, which it may still be naming after the notebook.
    """
    kernels: list[str] = []

    def single() -> bool:
        kernels[:] = kernels_of(url, token, notebook)
        return len(kernels) == 1

    try:
        wait_until(single, seconds, f"JupyterLab to run one kernel for {notebook}")
    except AssertionError as error:
        raise AssertionError(
            f"{error}: it runs {len(kernels)} ({kernels}); "
            "the page must be the only one to start its notebook's kernel"
        ) from None


def wait_for_kernel(page) -> None:
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


def accept_dialogs(page) -> bool:
    """Accept any dialog JupyterLab has open ("Select Kernel" can open late); True if one was."""
    accept = page.locator(".jp-Dialog .jp-mod-accept")
    found = False
    while accept.count():
        accept.first.click()
        found = True
        time.sleep(0.5)
    return found


def run_all(page) -> None:
    """Run > Run All Cells, again if the first code cell has not started within 30 s.

    On a busy machine the "Select Kernel" dialog can open after the kernel
    looked settled, and it takes the clicks meant for the menu: each try
    accepts any open dialog first, and a click that a dialog blocked is tried
    again rather than failing the test.
    """
    started = page.locator(".jp-InputPrompt", has_text=re.compile(r"\[(\*|\d+)\]"))
    for _ in range(3):
        if accept_dialogs(page):
            wait_for_kernel(page)  # the kernel a dialog chose, idle, before any cell runs
        try:
            page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click(timeout=30_000)
            page.locator("[data-command='runmenu:run-all']").click(timeout=30_000)
        except Exception as error:  # playwright's TimeoutError: a dialog took the click
            if "Timeout" not in type(error).__name__:
                raise
            continue
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if started.count():
                return
            if accept_dialogs(page):
                wait_for_kernel(page)
                break  # the dialog may have swallowed the command: run all again
            time.sleep(0.5)
    raise AssertionError("Run All Cells did not start the notebook's cells in 3 tries of 30 s")


@contextlib.contextmanager
def running_notebook(
    url: str, token: str, name: str, *, height: int = 1000, failure: str = "failure.png"
) -> Iterator:
    """Open notebook ``name`` of the server at ``url`` in Chromium and run all its cells.

    Yields the page while the cells run. When the test fails, a screenshot
    of the whole page goes to ``tests/artifacts/<failure>`` and the stderr
    outputs in the page are printed; the browser is closed either way.
    The page starts the notebook's kernel (JupyterLab's autoStartDefaultKernel);
    the cells run once it is idle and the only kernel of that notebook.
    """
    sync_api = pytest.importorskip("playwright.sync_api")
    browser_path = chromium()
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=browser_path, args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": height})
        try:
            page.goto(f"{url}/lab/tree/{name}?token={token}")
            page.locator(".jp-Notebook").first.wait_for(timeout=60_000)
            wait_for_kernel(page)
            one_kernel(url, token, name)
            run_all(page)
            yield page
        except Exception:
            # what the page showed when it went wrong, for the CI log and artifacts
            page.screenshot(path=str(ARTIFACTS / failure), full_page=True)
            errors = page.locator("[data-mime-type='application/vnd.jupyter.stderr']")
            print("stderr outputs in the page:", errors.all_inner_texts())
            raise
        finally:
            browser.close()
