"""benchmarks/skill_kinds.py: what Stage 2's skills say (a taught rule, a control's wrong rule, an echo of
the analyzer's instruction, other) and how much their class says of the episode's outcome."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
from script_loader import load_script

from seed_envs import hindsight_rules_for
from seed_envs.webshop.hindsight import FAILURE_RULES, SUCCESS_RULES, WRONG_RULE
from seed_train.records import read_record, unit_skills

WEBSHOP = "seed/WebShop-v0"
SOKOBAN_RECORD = Path(__file__).resolve().parents[1] / "docs" / "results" / "records" / "sokoban-cpu.jsonl"


@pytest.fixture(scope="module")
def bench():
    return load_script("benchmarks/skill_kinds.py")


def test_a_skill_is_a_taught_rule_a_wrong_rule_an_echo_or_other(bench):
    rules = bench.rules_with_wrong(hindsight_rules_for(WEBSHOP), WEBSHOP, {"fashion"})
    instruction = bench.instruction_text()
    assert "do not list this episode's actions" in instruction and "avoidance rule" in instruction

    def cls(text):
        return bench.skill_class(text, rules, instruction)

    assert cls(SUCCESS_RULES["options"]) == ("workflow", "workflow/options")
    assert cls(FAILURE_RULES["price"].upper()) == ("avoid", "avoid/price")  # case does not matter
    # Written by the policy in a WebShop arm: the workflow with a word changed still recites it.
    assert cls("Search the product type and key attributes, ensure each match, then click each named option, "
               "then buy now.")[0] == "workflow"
    assert cls(WRONG_RULE)[0] == "wrong"  # what seed-wrong-rule puts in the teacher's prompt
    assert cls("Do not list this episode's actions as the mistake was eventually fixed.") == ("echo", None)
    assert cls("Keep it simple, simple ever.") == ("other", None)  # 3 words of the instruction: not an echo
    assert cls("Bought the right item at the right time.") == ("other", None)


def test_mutual_information_and_entropy_in_bits(bench):
    assert bench.mutual_information([("a", True), ("a", False), ("b", True), ("b", False)]) == 0.0
    assert bench.mutual_information([("a", True), ("b", False)] * 5) == pytest.approx(1.0)
    # One class of two determines a third of four outcomes: H(O) - H(O|C) by hand.
    pairs = [("a", True), ("b", True), ("b", False), ("b", False)]
    h_o = 1.0
    h_o_given_c = 0.75 * -(1 / 3 * math.log2(1 / 3) + 2 / 3 * math.log2(2 / 3))
    assert bench.mutual_information(pairs) == pytest.approx(h_o - h_o_given_c)
    assert bench.entropy(0.5) == 1.0 and bench.entropy(1.0) == 0.0 and bench.entropy(0.0) == 0.0


def test_unit_summary_counts_agreement_and_chance(bench):
    rules, instruction = hindsight_rules_for(WEBSHOP), bench.instruction_text()
    rows = [[0, "t1", "c", 1, SUCCESS_RULES["options"]], [0, "t2", "c", 1, SUCCESS_RULES["no_options"]],
            [1, "t3", "c", 0, FAILURE_RULES["price"]], [1, "t4", "c", 0, SUCCESS_RULES["options"]],
            [1, "t5", "c", 0, "Do not list this episode's actions."], [1, "t6", "c", 0, None]]
    got = bench.unit_summary(rows, rules, instruction)
    assert (got["episodes"], got["skills"], got["wins"], got["distinct"]) == (6, 5, 2, 4)
    assert got["counts"] == {"workflow": 3, "avoid": 1, "wrong": 0, "echo": 1, "other": 0}
    # Recited: 2 wins with a workflow, a loss with an avoidance rule (agree), a loss with a workflow (not).
    assert got["agree"] == 0.75
    assert got["chance"] == pytest.approx(0.5 * 0.75 + 0.5 * 0.25)
    assert got["outcome_bits"] == pytest.approx(bench.entropy(2 / 5))
    assert 0 < got["shuffled_bits"] < got["outcome_bits"]
    assert got["texts"] == {("workflow", SUCCESS_RULES["options"]): 2, ("workflow", SUCCESS_RULES["no_options"]): 1,
                            ("avoid", FAILURE_RULES["price"]): 1, ("echo", "Do not list this episode's actions."): 1}
    assert bench.unit_summary(rows, rules, instruction) == got  # seeded shuffles


@pytest.mark.skipif(not SOKOBAN_RECORD.is_file(), reason="the committed Sokoban record is absent")
def test_record_table_counts_every_skill_the_record_holds(bench):
    """On the committed Sokoban record: the seed arm's row counts the skills read from the record directly,
    its class shares add up to 100%, and the outcome's entropy is computed over the same skills."""
    table = bench.record_table(SOKOBAN_RECORD, arms=["seed"])
    row = next(line for line in table.splitlines() if line.startswith("| seed |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    record = read_record(SOKOBAN_RECORD)
    units = [u for (kind, _, arm), u in record.units.items() if kind == "arm" and arm == "seed"]
    rows = [r for u in units for r in unit_skills(u)]
    written = [r for r in rows if r[4] is not None]
    assert cells[1] == str(len(units)) and cells[2] == f"{len(written)} / {len(rows)}"
    assert cells[3] == f"{sum(r[3] for r in written) / len(written):.0%}"
    shares = [int(c.rstrip("%")) for c in cells[4:9]]
    assert abs(sum(shares) - 100) <= 2  # rounding
    assert "seed-wrong-rule" not in table  # --arms


def test_fixed_skill_libraries_are_left_out(bench, tmp_path):
    """A record whose arms only read a fixed library (CodeLock's static controls) has nothing of the policy's."""
    record = Path(__file__).resolve().parents[1] / "docs" / "results" / "records" / "codelock-positive-control.jsonl"
    if not record.is_file():
        pytest.skip("the committed CodeLock record is absent")
    assert bench.record_table(record).startswith("### codelock-positive-control: only fixed skill texts")


def _episode(i: int, success: bool, skill: str | None, env_id: str = WEBSHOP):
    from wrappers import Step, Trajectory
    episode = Trajectory(f"e{i}", env_id, f"t{i}", "task", "fashion", "train", steps=[Step(0, "obs", "act", 0.0)])
    episode.finish(success=success, score=float(success))
    episode.meta["skill"] = skill
    return episode


def test_trajectory_files_from_skill_validity_are_classified_one_row_each(bench, tmp_path):
    """``--trajectories``: the skills a Stage 1 policy wrote for its own rollouts (meta['skill'], None where the
    analyzer's answer was invalid), one row per file, the same classes as a record's arms."""
    from wrappers import TrajectoryWriter
    with_failures, without = tmp_path / "with.jsonl", tmp_path / "without.jsonl"
    with TrajectoryWriter(with_failures) as w:
        for i, (won, skill) in enumerate([(True, SUCCESS_RULES["options"]), (False, FAILURE_RULES["price"]),
                                          (False, FAILURE_RULES["no_purchase"]), (False, None)]):
            w.write(_episode(i, won, skill))
    with TrajectoryWriter(without) as w:
        for i, (won, skill) in enumerate([(True, SUCCESS_RULES["options"]), (False, SUCCESS_RULES["options"]),
                                          (False, "Bought the right item at the right time.")]):
            w.write(_episode(i, won, skill))
    table = bench.trajectories_table([with_failures, without], examples=1)
    classes, losses = table.split("Lost episodes:")

    def rows_of(text):
        return {cells[0]: cells for cells in ([c.strip() for c in line.strip("|").split("|")]
                                              for line in text.splitlines() if line.startswith("| /"))}

    rows = rows_of(classes)
    first, second = rows[str(with_failures)], rows[str(without)]
    # with: 3 skills of 4 episodes, 1 won; workflow 1, avoid 2; every recital fits its outcome.
    assert first[1:9] == ["1", "3 / 4", "33%", "33%", "67%", "0%", "0%", "0%"]
    assert first[10] == "1.00"
    # without: 3 of 3, 1 won; a workflow after a loss; the third other.
    assert second[1:9] == ["1", "3 / 3", "33%", "67%", "0%", "0%", "0%", "33%"]
    assert second[10] == "0.50"
    assert f"Most written by `{with_failures}`:" in table
    # The lost episodes beside the annotator's rule: each of these made no purchase, so the annotator gives
    # every one the no-purchase rule. with: 3 lost, 2 skills, both avoidance rules, one of them that rule;
    # without: 2 lost, 2 skills, neither an avoidance rule.
    lost = rows_of(losses)
    no_purchase = f'3 x "{FAILURE_RULES["no_purchase"][:60]}"'
    assert lost[str(with_failures)][1:] == ["3", "2", "1", no_purchase, "2", "1"]
    assert lost[str(without)][1:] == ["2", "2", "1", no_purchase.replace("3 x", "2 x"), "0", "0"]
    assert bench.main(["--trajectories", str(with_failures)]) == 0
    # Not a skill_validity file, or two envs: a clear error.
    bare = tmp_path / "bare.jsonl"
    with TrajectoryWriter(bare) as w:
        episode = _episode(0, True, None)
        del episode.meta["skill"]
        w.write(episode)
    with pytest.raises(SystemExit, match="without meta\\['skill'\\]"):
        bench.trajectories_table([bare])
    other = tmp_path / "other.jsonl"
    with TrajectoryWriter(other) as w:
        w.write(_episode(0, True, None, env_id="seed/Sokoban-v0"))
    with pytest.raises(SystemExit, match="of 2 envs"):
        bench.trajectories_table([with_failures, other])
