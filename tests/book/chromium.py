"""A headless Chromium driven over the DevTools protocol on a pipe (standard library only).

Chromium's ``--remote-debugging-pipe`` reads JSON commands from file descriptor 3
and writes replies and events to descriptor 4, each message ending in a NUL byte.
That is all a test needs to open a page, run JavaScript in it, take a
screenshot and hear what the page logged as an error, without Selenium,
Playwright or a WebSocket client.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["Browser", "BrowserError", "find_chromium"]

# Debian's /usr/bin/chromium is a shell wrapper; the real binary sits beside its libraries.
CANDIDATES = ("/usr/lib/chromium/chromium", "chromium", "chromium-browser", "google-chrome")


class BrowserError(RuntimeError):
    """Chromium failed to start, closed the pipe, or reported an error."""


def find_chromium() -> str | None:
    """Return the path of a Chromium binary, or None if there is none."""
    for candidate in CANDIDATES:
        path = candidate if os.path.isabs(candidate) else shutil.which(candidate)
        if path and os.access(path, os.X_OK):
            return path
    return None


class Browser:
    """One headless Chromium with one page, closed on exit from a ``with`` block."""

    def __init__(self, binary: str, width: int = 1280, height: int = 900) -> None:
        command_read, self._command_write = os.pipe()
        self._reply_read, reply_write = os.pipe()

        def wire_pipes() -> None:  # runs in the child, before exec
            os.dup2(command_read, 3)
            os.dup2(reply_write, 4)
            os.set_inheritable(3, True)
            os.set_inheritable(4, True)

        self._profile = tempfile.mkdtemp(prefix="memtheory-chromium-")
        self._process = subprocess.Popen(
            [
                binary,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-quic",
                "--remote-debugging-pipe",
                f"--user-data-dir={self._profile}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            preexec_fn=wire_pipes,
            close_fds=False,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(command_read)
        os.close(reply_write)
        self._buffer = b""
        self._next_id = 0
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        attached = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})
        self._session = attached["sessionId"]
        self.console_errors: list[str] = []
        """Errors the page reported since it was opened: exceptions, console.error, failed loads."""
        self.call("Page.enable", session=True)
        self.call("Runtime.enable", session=True)
        self.call("Log.enable", session=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop Chromium and remove its temporary profile."""
        self._process.kill()
        self._process.wait(timeout=10)
        for fd in (self._command_write, self._reply_read):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self._profile, ignore_errors=True)

    def call(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        session: bool = False,
        timeout: float = 30,
    ) -> dict[str, Any]:
        """Send one DevTools command and return its result, skipping events."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self._session
        try:
            os.write(self._command_write, json.dumps(message).encode() + b"\0")
        except BrokenPipeError:
            raise BrowserError(f"Chromium exited (code {self._process.poll()})") from None
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" not in self._buffer:
                if time.monotonic() > deadline:
                    raise BrowserError(f"no reply to {method} within {timeout} s")
                chunk = os.read(self._reply_read, 1 << 20)
                if not chunk:
                    raise BrowserError("Chromium closed the DevTools pipe")
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\0", 1)
            reply = json.loads(raw)
            if "id" not in reply:
                self._note_event(reply)
            elif reply["id"] == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply["result"]

    def _note_event(self, event: dict[str, Any]) -> None:
        """Keep an event that reports an error in the page.

        That is an uncaught exception (a script that does not parse included), a call of
        ``console.error``, or a resource that failed to load.
        """
        params = event.get("params", {})
        method = event.get("method")
        if method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            text = details.get("exception", {}).get("description") or details.get("text", "")
            self.console_errors.append(f"exception: {text.splitlines()[0] if text else details}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            args = " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"])
            self.console_errors.append(f"console.error: {args}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            where = entry.get("url", "")
            self.console_errors.append(f"{entry.get('source')}: {entry.get('text')} {where}")

    def evaluate(self, expression: str, *, timeout: float = 30) -> Any:
        """Evaluate JavaScript in the page (awaiting a promise) and return its JSON value."""
        result = self.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            session=True,
            timeout=timeout,
        )
        if "exceptionDetails" in result:
            raise BrowserError(f"JavaScript failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def open(self, path: Path, *, timeout: float = 30) -> None:
        """Load a local HTML file and wait until it and its images have loaded.

        :attr:`console_errors` then holds what this page reported, and only that.
        """
        self.console_errors = []
        self.call("Page.navigate", {"url": path.resolve().as_uri()}, session=True)
        deadline = time.monotonic() + timeout
        while self.evaluate("document.readyState") != "complete":
            if time.monotonic() > deadline:
                raise BrowserError(f"{path} did not finish loading within {timeout} s")
            time.sleep(0.1)
        self.evaluate(
            "Promise.all([...document.images].map(i => i.complete ? 0 :"
            " new Promise(done => { i.onload = i.onerror = done; })))"
        )

    def set_viewport(self, width: int, height: int, *, mobile: bool = False) -> None:
        """Lay pages out for a screen of ``width`` x ``height`` CSS pixels (a phone: ``mobile``)."""
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile},
            session=True,
        )

    def screenshot(self, destination: Path) -> Path:
        """Save a PNG of the page as it is shown."""
        data = self.call("Page.captureScreenshot", {"format": "png"}, session=True)["data"]
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_bytes(base64.b64decode(data))
        return destination
