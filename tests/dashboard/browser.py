"""Headless Chromium driven over the Chrome DevTools Protocol (a websocket, `websocket-client`):
enough to open a page, gather its console errors and uncaught exceptions, evaluate JavaScript and
take a screenshot. The system's `chromium` (Debian's package; .ci/run installs it), never a
downloaded browser: `find_chromium()` is None where there is none, and the tests skip."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

NAMES = ("chromium", "chromium-browser", "google-chrome")


def find_chromium() -> str | None:
    return next((found for name in NAMES if (found := shutil.which(name))), None)


def chromium_or_skip() -> str:
    """The system's chromium, or the test skipped saying why (no chromium, no websocket-client)."""
    import pytest

    chromium = find_chromium()
    if chromium is None:
        pytest.skip("no chromium here (Debian's `chromium` package; .ci/run installs it): the page is not "
                    "tested in a browser")
    pytest.importorskip("websocket", reason="websocket-client (the test extra) is not installed")
    return chromium


class Browser:
    """One headless Chromium with one page (`with Browser(path) as page: ...`)."""

    def __init__(self, executable: str, width: int = 1400, height: int = 1000) -> None:
        self.executable = executable
        self.size = (width, height)
        self.profile = tempfile.TemporaryDirectory(prefix="poolwise-chromium-")
        self.proc: subprocess.Popen[bytes] | None = None
        self.ws: Any = None
        self.next_id = 0
        self.errors: list[str] = []  # console errors, uncaught exceptions, failed loads

    def __enter__(self) -> Browser:
        import websocket  # websocket-client (the test extra)

        self.log = (Path(self.profile.name) / "chromium.log").open("wb")  # (a pipe would fill up and stop it)
        self.proc = subprocess.Popen(
            [self.executable, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--no-default-browser-check", "--remote-debugging-port=0",
             f"--user-data-dir={self.profile.name}", f"--window-size={self.size[0]},{self.size[1]}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.log)
        port = self._port()
        pages = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10).read())
        page = next(p for p in pages if p.get("type") == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=10, suppress_origin=True)
        for domain in ("Runtime", "Log", "Page", "Network"):
            self.call(f"{domain}.enable")
        return self

    def _port(self) -> int:
        """The DevTools port chromium chose (it writes it into its profile's DevToolsActivePort)."""
        assert self.proc is not None
        written = Path(self.profile.name) / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self.proc.poll() is None:
            lines = written.read_text().split() if written.exists() else []
            if lines and lines[0].isdigit():
                return int(lines[0])
            time.sleep(0.05)
        said = (Path(self.profile.name) / "chromium.log").read_text(errors="replace")[-2000:]
        raise AssertionError(f"chromium did not open its DevTools port (exit {self.proc.poll()}): {said}")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command and wait for its answer (noting the events that come meanwhile)."""
        self.next_id += 1
        ask = self.next_id
        self.ws.send(json.dumps({"id": ask, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == ask:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result
            self._note(message)

    def _note(self, message: dict[str, Any]) -> None:
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            said = " ".join(str(a.get("value", a.get("description"))) for a in params["args"])
            self.errors.append(f"console: {said}")
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            self.errors.append("exception: " + str(details.get("exception", {}).get("description", details["text"])))
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            self.errors.append(f"log: {params['entry']['text']} ({params['entry'].get('url', '')})")
        elif method == "Network.loadingFailed" and not params.get("canceled"):
            self.errors.append(f"network: {params.get('errorText')}")

    def open(self, url: str) -> None:
        """Go to `url` and wait until it has loaded."""
        self.call("Page.navigate", url=url)
        self.wait_for(f"location.href === {json.dumps(url)} && document.readyState === 'complete'", f"{url} loaded")

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, what: str, timeout: float = 30.0) -> Any:
        """Evaluate `expression` until it is truthy (its value), or fail naming `what`."""
        deadline = time.monotonic() + timeout
        value = None
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(f"the page did not show {what} within {timeout:g} s (last: {value!r})")

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self.ws is not None:
            self.ws.close()
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
            self.log.close()
        # chromium's own children (crashpad, a renderer) may write in the profile a moment after
        # the browser is gone: "Directory not empty" then, seen in CI. Removed again a few times.
        for _ in range(10):
            try:
                self.profile.cleanup()
                return
            except OSError:
                time.sleep(0.3)
        shutil.rmtree(self.profile.name, ignore_errors=True)
