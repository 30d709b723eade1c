"""The live dashboard in a real headless Chromium (Debian's chromium + chromium-driver, installed
here when missing; Selenium drives it): the page of a running training job loads and a live
actor's tick counter advances."""

import json
import shutil
import subprocess
import sys
import time
import urllib.request

import pytest

EXE = [sys.executable, "-m", "robo_async.cli"]


@pytest.fixture(scope="module")
def browser():
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        res = subprocess.run(
            ["apt-get", "install", "-y", "--no-install-recommends", "chromium", "chromium-driver"],
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert res.returncode == 0, f"installing chromium failed: {res.stderr[-2000:]}"
    try:
        from selenium import webdriver
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "selenium>=4.20"], check=True, timeout=600)
        from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium")
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        opts.add_argument(a)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=opts)
    yield driver
    driver.quit()


@pytest.mark.timeout(900)  # four waits of up to 120 s each on a slow machine
@pytest.mark.e2e
def test_the_dashboard_page_shows_a_live_actors_tick_counter_advancing(browser, tmp_path):
    from selenium.webdriver.common.by import By

    run_dir = tmp_path / "dash"
    proc = subprocess.Popen(
        EXE
        + [
            "train",
            f"run_dir={run_dir}",
            "task.realtime=true",
            "budget.seconds=900",
            "task.cameras=[front]",
            "task.image_size=48",  # frames recorded (the policy reads state)
            "algo.warmup_steps=200",
            "algo.batch_size=32",
            "policy.hidden=[32,32]",
            "algo.hidden=[32,32]",
            "stop_at_success=null",
            "eval_episodes=0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url_file = run_dir / "dashboard.url"
        deadline = time.monotonic() + 120
        while not url_file.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert url_file.exists(), proc.communicate(timeout=30)
        url = url_file.read_text()
        assert url.startswith("http://127.0.0.1:")  # loopback only
        state = json.loads(urllib.request.urlopen(url + "state", timeout=10).read())
        assert state["run"]["name"] == "dash"
        browser.get(url)

        def ticks() -> int | None:
            from selenium.common.exceptions import StaleElementReferenceException

            cells = browser.find_elements(By.ID, "actor-0-ticks")
            try:
                text = cells[0].text.replace(",", "") if cells else ""
            except StaleElementReferenceException:  # the page re-rendered the table between find and read
                return None
            return int(text) if text.isdigit() else None

        deadline = time.monotonic() + 120
        first = None
        while first is None and time.monotonic() < deadline:
            first = ticks()
            time.sleep(0.2)
        assert first is not None, browser.page_source[:2000]
        later = first
        while later <= first and time.monotonic() < deadline:
            time.sleep(0.3)
            later = ticks() or first
        assert later > first  # the page updates itself (server-sent events) as the actor runs
        assert "robo_async: dash" in browser.find_element(By.ID, "title").text

        def points(selector: str) -> int:  # data points of the curves the page drew (inline SVG)
            return browser.execute_script(
                "return [...document.querySelectorAll(arguments[0])]"
                ".reduce((n, e) => n + Number(e.dataset.points || 0), 0);",
                selector,
            )

        deadline = time.monotonic() + 120  # each condition its own wait (the run goes on until stopped)
        while (
            points("#chart-steps polyline") < 3 or points("#loss-charts polyline") < 3
        ) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert points("#chart-steps polyline") >= 3 and points("#chart-updates polyline") >= 1
        assert points("#loss-charts polyline") >= 3  # a chart per loss, once the learner updates
        history = json.loads(urllib.request.urlopen(url + "history", timeout=10).read())["points"]
        assert len(history) >= 3 and all(p["t"] >= 0 for p in history)

        def frame_loaded() -> bool:  # the actor's latest camera frame, decoded by the browser
            return bool(
                browser.execute_script(
                    "const i = document.getElementById('actor-0-frame-front');"
                    "return i !== null && i.complete && i.naturalWidth === 48;"
                )
            )

        deadline = time.monotonic() + 120
        while not frame_loaded() and time.monotonic() < deadline:
            time.sleep(0.3)
        assert frame_loaded()
        # the actor's tick-lateness and inference-latency histograms: bars holding its recent ticks
        counted = browser.execute_script(
            "const n = s => [...document.querySelectorAll(s + ' rect')]"
            ".reduce((t, r) => t + Number(r.dataset.count), 0);"
            "return [n('#actor-0-late-hist'), n('#actor-0-infer-hist')];"
        )
        assert counted[0] > 0 and counted[1] > 0, counted
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
