"""Headless Chromium (Debian's chromium + chromium-driver) driven by selenium, for the viewer tests.

Nothing is downloaded: selenium is pointed at /usr/bin/chromium and /usr/bin/chromedriver, and
Chromium runs with its network-facing background services off. WebGL runs on the CPU
(SwiftShader).
"""

from __future__ import annotations

import io
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import pytest

CHROMIUM = os.environ.get("SPLATTRAIN_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("SPLATTRAIN_CHROMEDRIVER", "/usr/bin/chromedriver")
FLAGS = [
    "--headless=new", "--no-sandbox", "--use-angle=swiftshader", "--enable-unsafe-swiftshader", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-dev-shm-usage",
]


def browser_missing() -> Optional[str]:
    """Why no browser can run here (None when one can)."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            return f"{path} not found (apt-get install chromium chromium-driver; .ci/run does)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    return None


def require_browser() -> None:
    """Skip with the reason where no browser can run; CI (CI=true) must have one, so it fails instead."""
    reason = browser_missing()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"the browser tests must run in CI: {reason}")
        pytest.skip(reason)


class Browser:
    """One headless Chromium with a fixed viewport."""

    def __init__(self, width: int = 1000, height: int = 600) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        self.profile = tempfile.mkdtemp(prefix="splattrain-chromium-")
        for flag in FLAGS + [f"--user-data-dir={self.profile}", f"--window-size={width},{height}"]:
            options.add_argument(flag)
        self.driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                                    {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        self.size = (width, height)

    def open(self, url: str) -> None:
        self.driver.get(url)

    def text(self) -> str:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.TAG_NAME, "body").text

    def step(self) -> Optional[int]:
        """The step the stats panel shows."""
        match = re.search(r"step (\d+) / \d+", self.text())
        return int(match.group(1)) if match else None

    def click(self, label: str) -> None:
        from selenium.webdriver.common.by import By

        button = self.driver.find_element(By.XPATH, f"//button[normalize-space()='{label}']")
        button.click()

    def screenshot(self) -> np.ndarray:
        """The viewport as uint8 [H, W, 3]."""
        from PIL import Image

        png = self.driver.get_screenshot_as_png()
        return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))

    def new_tab(self, url: str) -> str:
        first = self.driver.current_window_handle
        self.driver.switch_to.new_window("tab")
        self.driver.get(url)
        return first

    def cpu_seconds(self) -> float:
        """CPU seconds (user + system) used so far by the browser's processes (Linux /proc)."""
        children: dict = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:  # the process ended meanwhile
                continue
            children.setdefault(int(fields[1]), []).append((int(stat.parent.name), int(fields[11]) + int(fields[12])))
        ticks, todo = 0, [self.driver.service.process.pid]
        while todo:
            for pid, used in children.get(todo.pop(), []):
                ticks += used
                todo.append(pid)
        return ticks / os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        try:
            self.driver.quit()
        finally:
            shutil.rmtree(self.profile, ignore_errors=True)


def wait_until(condition: Callable[[], object], timeout: float = 90.0, what: str = "condition") -> object:
    """Poll ``condition`` until it returns something truthy (``timeout``: a guard against a hang,
    long enough for a loaded machine)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if isinstance(value, np.ndarray) or value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation of two images' grey levels."""
    x = a.astype(np.float64).mean(axis=2).ravel()
    y = b.astype(np.float64).mean(axis=2).ravel()
    x -= x.mean()
    y -= y.mean()
    return float((x * y).sum() / np.sqrt((x * x).sum() * (y * y).sum() + 1e-12))
