"""Open a page in headless Chromium over the DevTools protocol (through a pipe,
no extra packages), record every request it makes, check its images, and
take full-page screenshots.

    python -m tests.browser report.html docs/report.png   # a screenshot

Chromium comes from the Debian package `chromium` (installed by .ci/run).
"""

from __future__ import annotations

import base64
import fcntl
import itertools
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--no-default-browser-check",
         "--disable-sync", "--hide-scrollbars", "--mute-audio", "--remote-debugging-pipe"]
TIMEOUT_S = 60


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


class Browser:
    """One Chromium process; commands go to its fd 3, answers come from its fd 4."""

    def __init__(self, executable: str, width: int = 1200, height: int = 900):
        self._profile = tempfile.TemporaryDirectory(prefix="noisescope-chromium-")
        to_child, self._to_browser = os.pipe()
        self._from_browser, from_child = os.pipe()

        def wire_pipes() -> None:  # runs in the child: commands on fd 3, answers on fd 4
            # move both out of the way first: either may already be fd 3 or 4
            commands = fcntl.fcntl(to_child, fcntl.F_DUPFD, 10)
            answers = fcntl.fcntl(from_child, fcntl.F_DUPFD, 10)
            os.dup2(commands, 3)  # dup2 onto another fd leaves it open across exec
            os.dup2(answers, 4)

        self._process = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={self._profile.name}",
             f"--window-size={width},{height}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=wire_pipes, close_fds=False)
        os.close(to_child)
        os.close(from_child)
        self._ids = itertools.count(1)
        self._buffer = b""
        self.events: list[dict] = []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Network.enable", session=True)
        self.call("Page.enable", session=True)

    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_browser], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer")
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError("Chromium closed its DevTools pipe")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    def call(self, method: str, session: bool = False, **params) -> dict:
        ident = next(self._ids)
        message = {"id": ident, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            answer = self._read_message(deadline)
            if answer.get("id") == ident:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer.get("result", {})
            self.events.append(answer)

    def wait_for(self, method: str) -> dict:
        deadline = time.monotonic() + TIMEOUT_S
        for event in self.events:
            if event.get("method") == method:
                return event
        while True:
            event = self._read_message(deadline)
            self.events.append(event)
            if event.get("method") == method:
                return event

    def open(self, url: str) -> None:
        self.call("Page.navigate", session=True, url=url)
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", session=True, expression=expression,
                           returnByValue=True, awaitPromise=True)
        return result["result"].get("value")

    @property
    def requested_urls(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events
                if e.get("method") == "Network.requestWillBeSent"]

    def images(self) -> list[dict]:
        return self.evaluate("[...document.images].map(i => ({src: i.src.slice(0, 40), "
                             "complete: i.complete, width: i.naturalWidth, "
                             "height: i.naturalHeight}))")

    def screenshot(self, path: Path) -> None:
        size = self.call("Page.getLayoutMetrics", session=True)["cssContentSize"]
        shot = self.call("Page.captureScreenshot", session=True, format="png",
                         captureBeyondViewport=True,
                         clip={"x": 0, "y": 0, "width": size["width"], "height": size["height"],
                               "scale": 1})
        Path(path).write_bytes(base64.b64decode(shot["data"]))

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)
        self._profile.cleanup()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


if __name__ == "__main__":
    page, output = Path(sys.argv[1]).resolve(), Path(sys.argv[2])
    with Browser(chromium_path() or "chromium", width=int(os.environ.get("WIDTH", "1200"))) as b:
        b.open(page.as_uri())
        b.screenshot(output)
    print(f"wrote {output}")
