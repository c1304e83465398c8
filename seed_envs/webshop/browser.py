"""Headless Chromium, driven by selenium, shopping on the running web shop (``mode="browser"``).

Selenium is given the installed driver and browser (Debian's ``chromium`` and ``chromium-driver``
at ``/usr/bin``, or ``$SEEDGYM_CHROMIUM`` / ``$SEEDGYM_CHROMEDRIVER``), so Selenium Manager never
runs and nothing is downloaded; Chromium starts with the flags that keep it off the network.

:class:`BrowserPage` does what a person at the browser does: reads the page, types into the search
box and presses Search, clicks a button, product link or option. After each click it waits until the
browser shows the page the server rendered for the session's new state (pages carry the session's
version number), so an observation is never read from a page that is still loading.
"""
from __future__ import annotations

import atexit
import io
import os
import shutil
import tempfile
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from seed_envs.webshop.shop import html_to_text, normalize_target

if TYPE_CHECKING:
    from seed_envs.webshop.shop import ShopSession

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--no-proxy-server",
                  "--disable-dev-shm-usage", "--hide-scrollbars")
NAVIGATION_TIMEOUT_S = 30.0

# One round trip: the page's version when it is fully loaded, and then what it shows.
_SNAPSHOT_JS = """
const version = document.readyState === 'complete' && document.body ? (document.body.dataset.version || null) : null;
if (version === null || version === arguments[0]) { return [version]; }
const els = Array.from(document.querySelectorAll('.btn, .product-link, .option'));
return [version, document.documentElement.outerHTML, els, els.map(e => e.textContent),
        document.getElementById('search_input') !== null];
"""
_SET_QUERY_JS = """
const input = document.getElementById('search_input');
input.value = arguments[0];
return document.getElementById('search_button');
"""


def chromium_paths() -> tuple[str, str]:
    """(browser binary, chromedriver) paths: ``$SEEDGYM_CHROMIUM`` / ``$SEEDGYM_CHROMEDRIVER`` or Debian's."""
    return (os.environ.get("SEEDGYM_CHROMIUM", "/usr/bin/chromium"),
            os.environ.get("SEEDGYM_CHROMEDRIVER", "/usr/bin/chromedriver"))


def browser_unavailable_reason() -> str | None:
    """Why ``mode="browser"`` cannot run here, or None when it can."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install 'seed-gym[webshop]')"
    for path, package, var in zip(chromium_paths(), ("chromium", "chromium-driver"), ("SEEDGYM_CHROMIUM", "SEEDGYM_CHROMEDRIVER")):
        if not Path(path).is_file():
            return (f"{path} not found: install Debian's chromium and chromium-driver "
                    f"(apt-get install chromium chromium-driver) or set ${var} to the {package} binary")
    return None


def start_chromium(window_size: tuple[int, int] = (800, 600), profile_dir: str | os.PathLike | None = None) -> Any:
    """A headless Chromium WebDriver (``window_size`` = (width, height)); the caller quits it."""
    reason = browser_unavailable_reason()
    if reason:
        raise RuntimeError(f"mode='browser': {reason}")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, chromedriver = chromium_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--window-size={int(window_size[0])},{int(window_size[1])}")
    if profile_dir is not None:
        options.add_argument(f"--user-data-dir={profile_dir}")
    driver = webdriver.Chrome(service=Service(chromedriver), options=options)
    driver.set_page_load_timeout(NAVIGATION_TIMEOUT_S)
    return driver


@dataclass
class Snapshot:
    """What the browser shows: the page's HTML, its clickable elements by target, and the search box."""

    html: str
    clickables: dict[str, Any]  # target -> WebElement, page order (a repeated text keeps the last)
    has_search_bar: bool
    version: str | None

    @property
    def text(self) -> str:
        return html_to_text(self.html)


class BrowserPage:
    """One WebDriver on one session's pages; see the module docstring."""

    def __init__(self, driver: Any, image_shape: tuple[int, int]):
        self.driver = driver
        self.image_shape = image_shape
        self.snapshot: Snapshot | None = None
        self._image: tuple[str | None, np.ndarray] | None = None

    def open(self, url: str, session: ShopSession) -> Snapshot:
        self.driver.get(url)
        return self._wait_for(session, None)

    def _wait_for(self, session: ShopSession, old: str | None) -> Snapshot:
        """Until the browser shows a fully loaded page of the session's current version (not ``old``);
        returns what that page shows."""
        deadline = time.monotonic() + NAVIGATION_TIMEOUT_S
        while True:
            reply = self.driver.execute_script(_SNAPSHOT_JS, old)
            shown = reply[0]
            if shown is not None and shown != old and shown == str(session.version):
                _, page, elements, texts, has_search = reply
                clickables = {normalize_target(t): e for e, t in zip(elements, texts)}
                self.snapshot = Snapshot(page, clickables, bool(has_search), shown)
                return self.snapshot
            if time.monotonic() > deadline:
                raise TimeoutError(f"webshop browser: the page did not reach session version {session.version} "
                                   f"within {NAVIGATION_TIMEOUT_S:.0f} s (showing {shown!r})")
            time.sleep(0.005)

    def click(self, target: str, session: ShopSession) -> Snapshot:
        assert self.snapshot is not None
        old = self.snapshot.version
        self.snapshot.clickables[target].click()
        return self._wait_for(session, old)

    def search(self, query: str, session: ShopSession) -> Snapshot:
        assert self.snapshot is not None
        old = self.snapshot.version
        # The value is set by script (send_keys cannot type every character), the button is clicked.
        button = self.driver.execute_script(_SET_QUERY_JS, query)
        button.click()
        return self._wait_for(session, old)

    def screenshot(self) -> np.ndarray:
        """The page as uint8 HxWx3 (resized to ``image_shape`` if the window's size differs)."""
        version = self.snapshot.version if self.snapshot is not None else None
        if self._image is not None and self._image[0] == version:
            return self._image[1].copy()  # the page has not changed; every observation gets its own array
        from PIL import Image

        image = Image.open(io.BytesIO(self.driver.get_screenshot_as_png())).convert("RGB")
        h, w = self.image_shape
        if image.size != (w, h):
            image = image.resize((w, h), Image.BILINEAR)
        array = np.asarray(image, dtype=np.uint8)
        self._image = (version, array)
        return array.copy()


class BrowserResources:
    """What ``mode="browser"`` starts (server, Chromium, its profile folder), closed once, also at exit."""

    def __init__(self) -> None:
        self.server: Any = None
        self.driver: Any = None
        self.owns_driver = False
        self.profile_dir: str | None = None

    def make_profile_dir(self) -> str:
        self.profile_dir = tempfile.mkdtemp(prefix="seedgym-chromium-")
        return self.profile_dir

    def close(self) -> None:
        driver, self.driver = self.driver, None
        if driver is not None and self.owns_driver:
            try:
                driver.quit()
            except Exception:  # noqa: BLE001 - a browser that already died needs no quitting
                pass
        server, self.server = self.server, None
        if server is not None:
            server.stop()
        if self.profile_dir is not None:
            shutil.rmtree(self.profile_dir, ignore_errors=True)
            self.profile_dir = None


def _close_shared(ref: weakref.ref) -> None:
    browser = ref()
    if browser is not None:
        browser.close()


class SharedBrowser:
    """One headless Chromium for several envs of one process (a test suite, a ``SyncVectorEnv``).

    Pass it as ``gym.make("seed/WebShop-v0", mode="browser", browser=shared)``: gym.make copies its
    keyword arguments, and a copy of this handle is the handle itself. Chromium starts on first use;
    ``close()``, the end of a ``with`` block or the end of the interpreter quits it. Envs sharing it
    take turns (the same driver shows one page at a time), so do not step them from several threads.
    """

    def __init__(self, window_size: tuple[int, int] = (800, 600)):
        self.window_size = (int(window_size[0]), int(window_size[1]))
        self._driver: Any = None
        self._profile_dir: str | None = None
        atexit.register(_close_shared, weakref.ref(self))

    @property
    def driver(self) -> Any:
        if self._driver is None:
            self._profile_dir = tempfile.mkdtemp(prefix="seedgym-chromium-")
            self._driver = start_chromium(self.window_size, self._profile_dir)
        return self._driver

    def close(self) -> None:
        driver, self._driver = self._driver, None
        if driver is not None:
            try:
                driver.quit()
            except Exception:  # noqa: BLE001 - a browser that already died needs no quitting
                pass
        if self._profile_dir is not None:
            shutil.rmtree(self._profile_dir, ignore_errors=True)
            self._profile_dir = None

    def __copy__(self) -> SharedBrowser:
        return self

    def __deepcopy__(self, memo: dict) -> SharedBrowser:
        return self

    def __reduce__(self):
        raise TypeError("SharedBrowser holds a browser of this process; it cannot be pickled into another "
                        "(use one env per process with mode='browser', each starting its own Chromium)")

    def __enter__(self) -> SharedBrowser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
