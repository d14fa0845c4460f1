"""report.html in a real headless browser (Debian's chromium and chromium-driver through Selenium): it
loads from disk with no console errors, every figure renders, a hover names the workload, tables sort
and filter, and a screenshot is not blank. About 5 s on a finished tiny sweep.

Skips where chromium is absent, unless NEURONSWEEP_REQUIRE_BROWSER is set (CI sets it).
"""

from __future__ import annotations

import os
import re
import shutil
import time

import pytest

CHROMIUM, DRIVER = shutil.which("chromium") or shutil.which("chromium-browser"), shutil.which("chromedriver")


def _browser():
    if not (CHROMIUM and DRIVER):
        if os.environ.get("NEURONSWEEP_REQUIRE_BROWSER"):
            pytest.fail(
                "chromium and chromedriver are required here (NEURONSWEEP_REQUIRE_BROWSER): "
                "apt-get install chromium chromium-driver"
            )
        pytest.skip("no chromium/chromedriver here (Debian: apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(DRIVER), options=options)


def _until(predicate, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    return predicate()


@pytest.fixture(scope="module")
def browser():
    driver = _browser()
    yield driver
    driver.quit()


@pytest.mark.workflow
def test_report_renders_hovers_sorts_and_filters(browser, finished_run, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    page = finished_run / "results" / "t" / "report.html"
    browser.get(page.as_uri())
    figures = browser.find_elements(By.CSS_SELECTOR, "[data-figure]")
    assert len(figures) >= 4
    rendered = _until(
        lambda: browser.execute_script(
            "return Array.from(document.querySelectorAll('[data-figure]')).every("
            "f => f.querySelector('.main-svg') && f.querySelector('.plot-container'))"
        )
    )
    assert rendered, "a figure did not render"
    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    assert errors == []

    # hover the roofline's points (a ridge marker may sit on one): a workload's label names it
    points = browser.find_elements(By.CSS_SELECTOR, "#fig-roofline .scatterlayer .trace .points path")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", points[0])
    labels = []
    for point in points:
        ActionChains(browser).move_to_element(point).perform()
        labels.append(
            _until(
                lambda: browser.execute_script(
                    "return document.querySelector('#fig-roofline .hoverlayer').textContent"
                ),
                timeout=2,
            )
        )
    assert any(re.search(r"matmul-m\d+-k\d+-n\d+-fp32.*FLOP/B.*GFLOP/s", text) for text in labels), labels

    # a table sorts on a header click (numbers as numbers) and filters as one types
    table = browser.find_element(By.CSS_SELECTOR, "table.t")
    headers = [th.text for th in table.find_elements(By.CSS_SELECTOR, "th")]
    col = headers.index("time_s")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", table)
    table.find_elements(By.CSS_SELECTOR, "th")[col].click()
    cells = [r.find_elements(By.TAG_NAME, "td")[col] for r in table.find_elements(By.CSS_SELECTOR, "tbody tr")]
    times = [float(c.get_attribute("data-v")) for c in cells]  # shown in human units, sorted on the value
    assert times == sorted(times) and len(times) >= 2
    assert all(re.fullmatch(r"[\d.]+ (ns|us|ms|s)", c.text) for c in cells), [c.text for c in cells]
    box = browser.find_element(By.CSS_SELECTOR, "input.filter")
    box.send_keys("m16-k16", Keys.TAB)
    visible = [r for r in table.find_elements(By.CSS_SELECTOR, "tbody tr") if r.is_displayed()]
    assert 0 < len(visible) < len(times) and all("m16-k16" in r.text for r in visible)

    # the screenshot (kept for a failed run to look at) is a drawn page, not a blank one
    browser.execute_script("window.scrollTo(0, 0)")
    shot = tmp_path / "report.png"
    browser.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 30_000


@pytest.mark.workflow
def test_the_headroom_section_renders_for_the_neuron_cases(browser, neuron_run):
    """The neuron stand-in's sweep: each case's time split into the gaps of its bounds, drawn, and the ranked
    table beside it."""
    from selenium.webdriver.common.by import By

    browser.get((neuron_run / "results" / "t" / "report.html").as_uri())
    rendered = _until(lambda: browser.execute_script("return !!document.querySelector('#fig-headroom .main-svg')"))
    assert rendered, "the headroom figure did not render"
    bars = browser.find_elements(By.CSS_SELECTOR, "#fig-headroom .barlayer .trace")
    assert len(bars) >= 2  # a trace per gap
    heading = next(h for h in browser.find_elements(By.TAG_NAME, "h2") if h.text == "Headroom")
    table = heading.find_element(By.XPATH, "following::table[1]")
    assert [th.text for th in table.find_elements(By.CSS_SELECTOR, "th")][:3] == [
        "scenario_id",
        "suite",
        "bottleneck_engine",
    ]
    assert len(table.find_elements(By.CSS_SELECTOR, "tbody tr")) == 2
    assert [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "ERROR")] == []
