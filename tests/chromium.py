"""Real Chromium, headless, driven over the DevTools protocol on a pipe
(`--remote-debugging-pipe`: JSON messages ending in a NUL byte, commands on fd 3, answers
on fd 4; what Puppeteer's `pipe: true` does). A test loads a page and reads what a person
would see: `document.body.innerText` after layout and styles, and a screenshot.
Standard library only; Debian's chromium (/usr/bin/chromium).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

TIMEOUT = 60.0


class Chromium:
    def __init__(self, browser: str | None = None) -> None:
        path = browser or shutil.which("chromium")
        if path is None:
            raise RuntimeError("chromium is not installed (apt-get install chromium)")
        self._profile = tempfile.mkdtemp(prefix="slurmforge-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def pipes() -> None:  # in the child: the protocol's fds 3 and 4, inheritable
            read, write = os.dup(to_browser_r), os.dup(from_browser_w)  # neither is 3 or 4 then
            os.dup2(read, 3)
            os.dup2(write, 4)

        self.proc = subprocess.Popen(
            [path, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--no-first-run", "--disable-extensions", "--remote-debugging-pipe",
             f"--user-data-dir={self._profile}", "--window-size=1400,1000", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=pipes, close_fds=False)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next = 0
        self._session = ""

    def send(self, method: str, params: dict[str, Any] | None = None, session: bool = True) -> dict[str, Any]:
        """One command; its result (events in between are skipped)."""
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session and self._session:
            message["sessionId"] = self._session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            answer = self._read()
            if answer.get("id") == self._next:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return dict(answer.get("result") or {})
        raise TimeoutError(method)

    def _read(self) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError(f"chromium exited ({self.proc.poll()})")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return dict(json.loads(message))

    def open(self, url: str) -> None:
        """A new tab on url, waited for until the document has loaded."""
        target = self.send("Target.createTarget", {"url": url}, session=False)["targetId"]
        self._session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True},
                                  session=False)["sessionId"]
        deadline = time.monotonic() + TIMEOUT
        while self.evaluate("document.readyState") != "complete" or self.evaluate("location.href") != url:
            if time.monotonic() > deadline:
                raise TimeoutError(f"loading {url}")
            time.sleep(0.1)

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        return result.get("result", {}).get("value")

    def text(self, selector: str = "body") -> str:
        """What the element shows, as a person reads it (innerText: rendered, styled)."""
        return str(self.evaluate(f"document.querySelector({json.dumps(selector)}).innerText"))

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, TimeoutError, OSError):
            self.send("Browser.close", session=False)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=15)
        for fd in (self._to_browser, self._from_browser):
            with contextlib.suppress(OSError):
                os.close(fd)
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
