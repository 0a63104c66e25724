"""The playground page in headless Chromium (Debian's chromium + chromium-driver, driven by Selenium): pick an
example, click, and read the label, the probability bar and the model card the page renders."""

import shutil
import socket

import httpx
import pytest

from npuport.serve.app import ServeConfig

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="needs Debian's chromium and chromium-driver (.ci/run installs them)")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1100,900"):
        opts.add_argument(flag)
    drv = webdriver.Chrome(service=Service(DRIVER), options=opts)
    yield drv
    drv.quit()


def test_playground_round_trip(artifacts, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import Select, WebDriverWait
    from test_serve import Server

    with Server(ServeConfig(artifact_dir=str(artifacts), port=_free_port())) as s:
        browser.get(s.url + "/")
        wait = WebDriverWait(browser, 30)
        wait.until(EC.text_to_be_present_in_element((By.ID, "cardlist"), "onnxruntime"))
        card = browser.find_element(By.ID, "cardlist").text
        assert "proof: trace" in card and "0 (exact)" in card and "16, 32, 64" in card
        Select(browser.find_element(By.ID, "example")).select_by_index(1)
        reply = browser.find_element(By.ID, "reply").get_attribute("value")
        browser.find_element(By.ID, "go").click()
        wait.until(EC.text_to_be_present_in_element((By.ID, "detail"), "P(deviation)"))
        label = browser.find_element(By.ID, "label").text
        detail = browser.find_element(By.ID, "detail").text
        width = browser.execute_script("return document.getElementById('fill').style.width")
        # the page shows exactly what the API says for the same input
        persona = browser.find_element(By.ID, "persona").get_attribute("value")
        user = browser.find_element(By.ID, "user").get_attribute("value")
        api = httpx.post(s.url + "/v1/detect", json={"persona": persona, "user": user, "reply": reply}).json()
        assert f"P(deviation) = {api['deviation_probability']:.3f}" in detail
        assert width.endswith("%") and abs(float(width[:-1]) - round(100 * api["deviation_probability"], 1)) < 1e-9
        assert label == ("Deviation — broke persona" if api["label"] == "deviation" else "In persona")
        browser.save_screenshot(str(tmp_path / "playground.png"))
        assert (tmp_path / "playground.png").stat().st_size > 5000
