"""`lab load --web`: Locust's web UI in headless Chromium (Debian's chromium and
chromium-driver, `make browser`) starts a load from the page; Ctrl-C ends the run, which
is drained, checked and written like any other."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ready
from selenium.webdriver.support.ui import WebDriverWait

#: Chromium on a closed network: no background connections, no sandbox as root
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.fixture
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument("--window-size=1400,900")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    yield driver
    driver.quit()


def test_a_load_started_from_the_web_ui_is_recorded_and_checked(tmp_path, browser):
    port = free_port()
    run_dir = tmp_path / "run"
    lab = subprocess.Popen([sys.executable, "-m", "lab.cli", "load", "kestrel", "--web", "--web-port", str(port),
                            "--users", "4", "--out", str(run_dir)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    try:
        wait_for(f"http://127.0.0.1:{port}/", 30)
        browser.get(f"http://127.0.0.1:{port}/")
        users = WebDriverWait(browser, 10).until(ready.presence_of_element_located((By.NAME, "userCount")))
        assert users.get_attribute("value") == "4"  # the mix's size, as lab load gave it
        start = browser.find_element(By.CSS_SELECTOR, "button[type='submit']")
        assert start.text.upper() == "START"
        start.click()
        WebDriverWait(browser, 15).until(lambda d: "put q0" in d.find_element(By.TAG_NAME, "body").text)
        time.sleep(3)  # the load runs
        browser.save_screenshot(str(tmp_path / "locust.png"))
        page = browser.find_element(By.TAG_NAME, "body").text
        assert "put q0" in page and "get q0" in page  # the lab's requests in Locust's statistics table
        errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
        lab.send_signal(signal.SIGINT)  # Ctrl-C: Locust stops, the run drains and is checked
        out, err = lab.communicate(timeout=60)
    finally:
        if lab.poll() is None:
            lab.kill()
    assert lab.returncode == 0, err
    assert "checker: VALID" in out, out + err
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["verdict"]["enqueued"] > 100 and manifest["verdict"]["lost"] == 0
    assert manifest["workload"]["duration"] > 2  # as long as the page ran it
    assert (tmp_path / "locust.png").stat().st_size > 10_000
