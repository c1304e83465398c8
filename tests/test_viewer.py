"""The trajectory viewer: one self-contained HTML file, checked as text and in headless Chromium.

The browser tests need Debian's ``chromium`` and ``chromium-driver`` and the ``selenium`` package
(CI installs them); elsewhere they skip with the reason. Screenshots are written to the test's
tmp_path, and also to ``$SEEDGYM_TEST_ARTIFACTS`` when that is set.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from seed_agents.cli import main as seed_envs_main
from wrappers.viewer import PAGE_SIZE, embed_json, write_viewer
from wrappers import Step, Trajectory, TrajectoryWriter

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


def seed_style_trajectory(episode_id: str = "seed-ep", success: bool = True) -> Trajectory:
    """What the SEED trainer writes: token ids, log-probs, teacher log-probs, token pieces, a skill."""
    pieces = ["<think>", "add", " them", "</think>", HOSTILE, "<action>", "5", "</action>"]
    logprobs = [-0.5, -1.0, -2.0, -0.3, -4.0, -0.2, -1.5, -0.1]
    teacher = [-0.4, -0.2, -3.0, -0.3, -6.0, -0.2, -0.1, -0.1]
    step = Step(index=0, observation="Cards: 5 and 7. Formula: ", action="5", reward=0.0,
                response="".join(pieces), prompt="Task: make 12\n<b>not bold</b>", prompt_token_ids=[1, 2, 3],
                response_token_ids=list(range(100, 100 + len(pieces))), response_logprobs=logprobs,
                teacher_logprobs=teacher, response_tokens=pieces, info={"note": "</script><script>x()</script>"})
    t = Trajectory(episode_id=episode_id, env_id="seed/EZPoints-v0", task_id="ezpoints/t12/train/5H-7C",
                   task="Make 12 with <b>the</b> cards", category="sum", split="train", group_id="it3-g0",
                   steps=[step], meta={"iteration": 3, "skill": "Add the cards when their sum is the target.",
                                       "opd_beta": 5.0})
    return t.finish(success=success, score=float(success))


@pytest.fixture(scope="module")
def recorded_run(tmp_path_factory) -> Path:
    """A run folder with Sokoban (text+image), EZPoints (text) and a SEED-style training file."""
    run = tmp_path_factory.mktemp("run")
    assert seed_envs_main(["record", "seed/Sokoban-v0", "--split", "test", "--obs-mode", "text+image",
                           "--agent", "random", "--episodes", "3", "--out", str(run / "sokoban.jsonl")]) == 0
    assert seed_envs_main(["record", "seed/EZPoints-v0", "--split", "test", "--agent", "expert",
                           "--episodes", "3", "--out", str(run / "ezpoints.jsonl")]) == 0
    with TrajectoryWriter(run / "trajectories.jsonl") as w:
        w.write(seed_style_trajectory())
    (run / "metrics.jsonl").write_text('{"iteration": 0, "success": 0.5}\n')  # not a trajectory file
    return run


@pytest.fixture(scope="module")
def report(recorded_run, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("view") / "report.html"
    assert seed_envs_main(["view", str(recorded_run), "--out", str(out)]) == 0
    return out


def many_episodes(path: Path, n: int) -> None:
    with TrajectoryWriter(path, fsync=False) as w:
        for i in range(n):
            steps = [Step(index=k, observation=f"obs {k} of {i}", action="up", reward=-0.1, response="<action>up</action>",
                          prompt="Task: push the box\n" + "history line\n" * 5) for k in range(3)]
            w.write(Trajectory(episode_id=f"e{i:05d}", env_id=f"seed/Env{i % 2}-v0", task_id=f"task/{i}", task=f"task {i}",
                               category=("a", "b", "c")[i % 3], split="train", steps=steps,
                               meta={"iteration": i // 1000}).finish(success=i % 4 == 0, score=float(i % 4 == 0)))


# ---------------------------------------------------------------------------------- the file
def test_html_is_self_contained_and_data_cannot_break_out(report):
    html = report.read_text(encoding="utf-8")
    assert "window.__pwned" in html  # the hostile text is there, as escaped JSON ...
    assert "<script>window.__pwned" not in html and "</script><script>x()" not in html  # ... never as markup
    assert len(re.findall(r"<script", html)) == 2  # the data element and the page's own script
    assert "data:image/png;base64," in html  # Sokoban frames inlined
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)  # nothing fetched from anywhere
    assert "default-src 'none'" in html
    data = json.loads(re.search(r'<script type="application/json" id="data">(.*?)</script>', html, re.S).group(1))
    sources = {e["source"] for e in data["episodes"]}
    assert sources == {"sokoban.jsonl", "ezpoints.jsonl", "trajectories.jsonl"}
    seed = next(e for e in data["episodes"] if e["source"] == "trajectories.jsonl")
    assert seed["skill"].startswith("Add the cards") and seed["iteration"] == 3 and seed["steps"][0]["teacher"]
    assert json.loads(embed_json({"s": "</script><!--&"})) == {"s": "</script><!--&"}


def test_ten_thousand_episodes_write_fast_and_small(tmp_path):
    jsonl = tmp_path / "big.jsonl"
    many_episodes(jsonl, 10_000)
    t0 = time.perf_counter()
    out = write_viewer(jsonl, tmp_path / "big.html")
    elapsed = time.perf_counter() - t0
    size = out.stat().st_size
    assert elapsed < 20, elapsed
    assert size < 40e6, size  # ~3.3 KB an episode of 3 steps with prompts
    html = out.read_text(encoding="utf-8")
    assert html.count("<tr") == 1  # only the header row: the list is built by the script, page by page


def test_view_needs_trajectories(tmp_path, capsys):
    (tmp_path / "metrics.jsonl").write_text('{"iteration": 0}\n')
    assert seed_envs_main(["view", str(tmp_path), "--out", str(tmp_path / "x.html")]) == 2
    assert "no trajectory JSONL files" in capsys.readouterr().err


# ---------------------------------------------------------------------------------- in a browser
@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install selenium)")
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.skip("headless browser tests need Debian's chromium and chromium-driver "
                    "(apt-get install chromium chromium-driver)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1400,1000",
                 f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def open_page(driver, path: Path, timeout: float = 30.0) -> float:
    """Load a viewer file and wait until its script has rendered the first page; returns seconds taken."""
    from selenium.webdriver.support.ui import WebDriverWait

    t0 = time.perf_counter()
    driver.get(path.resolve().as_uri())
    WebDriverWait(driver, timeout).until(lambda d: d.execute_script("return document.body.dataset.ready === '1'"))
    return time.perf_counter() - t0


def console_errors(driver) -> list[dict]:
    return [entry for entry in driver.get_log("browser") if entry["level"] in ("SEVERE", "ERROR")]


def rows(driver) -> list:
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, "#rows tr")


def choose(driver, select_id: str, value: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element(By.ID, select_id)).select_by_value(value)


def save_screenshot(driver, tmp_path: Path, name: str) -> Path:
    shot = tmp_path / name
    assert driver.save_screenshot(str(shot))
    if os.environ.get("SEEDGYM_TEST_ARTIFACTS"):
        target = Path(os.environ["SEEDGYM_TEST_ARTIFACTS"])
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, target / name)
    return shot


def test_viewer_in_headless_chromium(browser, report, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    open_page(browser, report)
    assert len(rows(browser)) == 7
    assert browser.find_element(By.ID, "count").text == "7 of 7 episodes"
    # Filters change the visible episodes.
    choose(browser, "f-env", "seed/EZPoints-v0")
    assert len(rows(browser)) == 4
    choose(browser, "f-iteration", "3")
    assert len(rows(browser)) == 1
    choose(browser, "f-iteration", "")
    choose(browser, "f-env", "seed/Sokoban-v0")
    choose(browser, "f-success", "yes")
    sokoban_wins = len(rows(browser))
    choose(browser, "f-success", "no")
    assert sokoban_wins + len(rows(browser)) == 3
    choose(browser, "f-success", "")
    # A Sokoban episode: its frames are shown inline.
    rows(browser)[0].click()
    WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#episode .step img.frame"))
    assert browser.execute_script(
        "return [...document.querySelectorAll('img.frame')].every(i => i.complete && i.naturalWidth > 0)")
    save_screenshot(browser, tmp_path, "viewer_sokoban.png")
    # The SEED episode: model text shows as text, tokens coloured by gate, the skill is there.
    choose(browser, "f-env", "")
    browser.find_element(By.ID, "f-text").send_keys("the</b>")
    WebDriverWait(browser, 10).until(lambda d: len(rows(d)) == 1)
    rows(browser)[0].click()
    response = WebDriverWait(browser, 10).until(lambda d: d.find_element(By.CSS_SELECTOR, "#episode pre.response"))
    assert HOSTILE in response.get_attribute("textContent")
    assert browser.execute_script("return window.__pwned === undefined")
    assert len(browser.find_elements(By.TAG_NAME, "script")) == 2
    assert not browser.find_elements(By.CSS_SELECTOR, "#episode img:not(.frame), #episode b")
    tokens = browser.find_elements(By.CSS_SELECTOR, "#episode .tok")
    assert len(tokens) == 8 and tokens[4].get_attribute("textContent") == HOSTILE
    colours = {t.value_of_css_property("background-color") for t in tokens}
    assert len(colours) >= 3  # endorsed, neutral and rejected tokens differ
    assert "gate" in tokens[1].get_attribute("title")
    assert "Add the cards when their sum is the target." in browser.find_element(By.CSS_SELECTOR, "#episode .skill").text
    shot = save_screenshot(browser, tmp_path, "viewer.png")
    assert shot.stat().st_size > 10_000
    assert console_errors(browser) == []


def test_ten_thousand_episodes_open_in_seconds_and_render_lazily(browser, tmp_path):
    from selenium.webdriver.common.by import By

    jsonl = tmp_path / "big.jsonl"
    many_episodes(jsonl, 10_000)
    out = write_viewer(jsonl, tmp_path / "big.html")
    seconds = open_page(browser, out)
    assert seconds < 15, seconds
    assert len(rows(browser)) == PAGE_SIZE
    assert browser.find_elements(By.CSS_SELECTOR, ".step") == []  # no episode built until opened
    browser.find_element(By.ID, "next").click()
    assert rows(browser)[0].find_elements(By.TAG_NAME, "td")[0].text == str(PAGE_SIZE + 1)
    choose(browser, "f-category", "b")
    assert browser.find_element(By.ID, "count").text == "3333 of 10000 episodes"
    save_screenshot(browser, tmp_path, "viewer_10k.png")
    assert console_errors(browser) == []


# ---------------------------------------------------------------------------------- from the trainer
def test_trainer_records_teacher_logprobs_and_token_pieces(tmp_path):
    """A SEED iteration writes, per skill-scored step, teacher log-probs and token pieces the viewer colours."""
    import toy_env  # noqa: F401  (registers test/Echo-v0)

    from seed_train.config import SeedConfig
    from seed_train.samples import token_pieces
    from seed_train.tiny import cached_tiny_model
    from seed_train.trainer import load, train

    tiny = str(cached_tiny_model(seed=0))
    library = tmp_path / "skills.json"
    library.write_text(json.dumps({"default": "Read the word after Say and repeat it exactly."}))
    cfg = SeedConfig(env_id="test/Echo-v0", model=tiny, lora=False, action_format="plain", history=0, max_steps=2,
                     max_new_tokens=6, stage1_demos=0, iterations=1, tasks_per_iteration=2, group_size=2, kl_coef=0.0,
                     skill_source="static", static_skills=str(library), eval_before=False, eval_after=False,
                     save_final=False, output_dir=str(tmp_path / "run"))
    train(cfg, say=lambda _: None)
    from wrappers import read_trajectories

    steps = [s for t in read_trajectories(tmp_path / "run" / "trajectories.jsonl") for s in t.steps]
    assert steps and all(len(s.teacher_logprobs) == len(s.response_token_ids) == len(s.response_tokens) for s in steps)
    assert all(all(x <= 0 for x in s.teacher_logprobs) for s in steps)
    tokenizer = load(SeedConfig(model=tiny, lora=False)).codec.tokenizer
    for s in steps:
        assert "".join(s.response_tokens) == tokenizer.decode(s.response_token_ids, skip_special_tokens=False)
    assert "".join(token_pieces(tokenizer, tokenizer.encode("héllo wörld"))) == "héllo wörld"
    html = write_viewer(tmp_path / "run", tmp_path / "run.html").read_text(encoding="utf-8")
    assert '"teacher":[' in html and '"beta":5.0' in html
