"""What Stage 2's skills say, from committed experiment records: a rule Stage 1 taught, a control's wrong
rule, an echo of the analyzer's instruction, or something else, and whether the skill tells a won episode
from a lost one.

    python benchmarks/skill_kinds.py [RECORD ...] [--arms seed] [--examples 3]
    python benchmarks/skill_kinds.py --trajectories A.jsonl B.jsonl

Default: every record under ``docs/results/records/`` whose arms wrote skills. No model is loaded: the
record keeps each skill the teacher saw with its episode's outcome (``seed_train.records.unit_skills``).
With ``--trajectories``, the skills a Stage 1 policy wrote for its own fresh rollouts instead (the files
``benchmarks/skill_validity.py --trajectories`` writes), one row per file: e.g. two Stage 1 recipes, with and
without failure demos, on the same rollout tasks; and a second table of the lost episodes, each beside the rule
Stage 1's annotator gives it (``seed_train.skills.rule_based_skill``): whether the policy's skill after a loss
recites an avoidance rule, and whether it recites that episode's own.

Each skill is put in one class:

- ``workflow`` / ``avoid``: it recites one of the env's hindsight rules (``seed_envs.hindsight_rules_for``:
  the tables Stage 1's annotator writes from, a success's workflow or a failure's avoidance rule) nearly
  word for word (``difflib`` ratio >= ``--match``, 0.8 by default, on lower-cased text);
- ``wrong``: it recites the env's wrong-rule rewrite of one of them for a category the record has
  (``seed_envs.wrong_rule_for``: what the ``seed-wrong-rule`` control puts in the teacher's prompt);
- ``echo``: it repeats 4 or more consecutive words of the analyzer prompt's own instruction ("do not list
  this episode's actions"): a valid skill by DESIGN.md's format check that says nothing of the episode;
- ``other``: anything else (the policy's own wording: mostly a rule cut short or paraphrased).

Per arm and training seed it prints the shares, how many distinct texts there were, and how well the
class tells the episode's outcome: ``agree`` is the share of recited rules whose kind is the outcome's (a
workflow after a win, an avoidance rule after a loss), beside ``chance``, the agreement a skill chosen
without looking at the outcome would reach with the same shares; ``bits`` is the mutual information
between the skill's class and the outcome (0: the skill's class carries nothing about the episode), beside
the same with the unit's outcomes shuffled (200 seeded shuffles: what the estimate reads on a few dozen
skills when the class carries nothing) and ``outcome bits``, the outcome's own entropy (the most a skill
could carry). Means ± sd over seeds; a seed without a recited rule has no ``agree``. Arms with a fixed
library (``static``, ``empty``: texts the policy did not write) are left out.
"""
from __future__ import annotations

import argparse
import difflib
import functools
import math
import random
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

from seed_envs import hindsight_rules_for, wrong_rule_for
from seed_envs.hindsight import AVOID, WORKFLOW
from seed_train.records import read_record, unit_skills
from seed_train.skills import analyzer_prompt, rule_based_skill
from wrappers import Step, Trajectory, read_trajectories

WRONG = "wrong"
CLASSES = (WORKFLOW, AVOID, WRONG, "echo", "other")
#: Skill sources whose texts the policy did not write (a fixed library, or none): left out of the tables.
FIXED_SOURCES = ("static", "static_wrong", "empty", "none")
ECHO_WORDS = 4
SHUFFLES = 200
RECORDS = Path(__file__).resolve().parents[1] / "docs" / "results" / "records"


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


def instruction_text() -> str:
    """The analyzer prompt's own instruction lines (after the steps), for a won and a lost episode."""
    lines = []
    for success in (True, False):
        episode = Trajectory("e", "env", "t", "task", "c", "train", steps=[Step(0, "obs", "act", 0.0)],
                             success=success)
        prompt = analyzer_prompt(episode).splitlines()
        lines += prompt[[i for i, line in enumerate(prompt) if line.startswith("Step ")][-1] + 1:]
    return "\n".join(lines)


def echoes(text: str, instruction: str, run: int = ECHO_WORDS) -> bool:
    """Whether ``text`` repeats ``run`` or more consecutive words of ``instruction``."""
    source = _words(instruction)
    grams = {tuple(source[i:i + run]) for i in range(len(source) - run + 1)}
    words = _words(text)
    return any(tuple(words[i:i + run]) in grams for i in range(len(words) - run + 1))


def rules_with_wrong(rules: dict[str, str], env_id: str, categories: set[str]) -> dict[str, str]:
    """``rules`` and, under ``wrong/<kind>@<category>``, the env's wrong-rule rewrite of each for each of
    ``categories`` (none where the env declares no rewriter)."""
    rewrite = wrong_rule_for(env_id)
    if rewrite is None:
        return dict(rules)
    wrong = {f"{WRONG}/{kind}@{cat}": rewrite(rule, cat) for kind, rule in rules.items() for cat in sorted(categories)}
    return {**rules, **{k: v for k, v in wrong.items() if v not in rules.values()}}


@functools.lru_cache(maxsize=None)
def _ratio(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b).ratio()


def skill_class(text: str, rules: dict[str, str], instruction: str, match: float = 0.8) -> tuple[str, str | None]:
    """``(class, rule kind)``: the class of CLASSES and, for a recited rule, its kind (``workflow/...``,
    ``wrong/<kind>@<category>``)."""
    low = " ".join(text.lower().split())
    best, kind = 0.0, None
    for name, rule in rules.items():
        ratio = _ratio(low, " ".join(rule.lower().split()))
        if ratio > best:
            best, kind = ratio, name
    if kind is not None and best >= match:
        return kind.split("/", 1)[0], kind
    return ("echo" if echoes(text, instruction) else "other"), None


def mutual_information(pairs: Sequence[tuple[str, bool]]) -> float:
    """I(class; outcome) in bits over ``(class, success)`` pairs (plug-in estimate)."""
    n = len(pairs)
    if not n:
        return 0.0
    joint, classes, outcomes = Counter(pairs), Counter(c for c, _ in pairs), Counter(o for _, o in pairs)
    return sum(k / n * math.log2(k * n / (classes[c] * outcomes[o])) for (c, o), k in joint.items())


def entropy(p: float) -> float:
    """The entropy in bits of an outcome won with probability ``p``: what a skill could say of it at most."""
    return -sum(q * math.log2(q) for q in (p, 1 - p) if q > 0)


def unit_summary(skills: Sequence[Sequence], rules: dict[str, str], instruction: str,
                 match: float = 0.8) -> dict:
    """One unit's skills (``unit_skills`` rows: iteration, task, category, success, text or None): counts by
    class, agreement, bits; ``texts`` counts each (class, text) written."""
    written = [(skill_class(text, rules, instruction, match)[0], text, bool(success))
               for _, _, _, success, text in skills if text is not None]
    classes = [(c, success) for c, _, success in written]
    counts = Counter(c for c, _ in classes)
    recited = [(c, s) for c, s in classes if c in (WORKFLOW, AVOID)]
    agree = (sum((c == WORKFLOW) == s for c, s in recited) / len(recited)) if recited else None
    chance = None
    if recited:
        p_win = sum(s for _, s in recited) / len(recited)
        p_workflow = sum(c == WORKFLOW for c, _ in recited) / len(recited)
        chance = p_win * p_workflow + (1 - p_win) * (1 - p_workflow)
    wins = sum(s for _, _, s in written)
    # The plug-in estimate is biased up on a few dozen skills: the same with the outcomes shuffled (seeded) is
    # what it reads when the class says nothing of the outcome.
    rng = random.Random(0)
    shuffled = []
    for _ in range(SHUFFLES if classes else 0):
        outcomes = [o for _, o in classes]
        rng.shuffle(outcomes)
        shuffled.append(mutual_information([(c, o) for (c, _), o in zip(classes, outcomes)]))
    return {"episodes": len(skills), "skills": len(written), "counts": {c: counts.get(c, 0) for c in CLASSES},
            "distinct": len({t for _, t, _ in written}), "wins": wins,
            "agree": agree, "chance": chance, "bits": mutual_information(classes) if classes else None,
            "shuffled_bits": statistics.fmean(shuffled) if shuffled else None,
            "outcome_bits": entropy(wins / len(written)) if written else None,
            "texts": Counter((c, t) for c, t, _ in written)}


def _mean_sd(values: Sequence[float | None], digits: int = 2) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.fmean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def _table(title: str, per_arm: dict[str, dict[int, dict]], label: str = "arm") -> list[str]:
    """Markdown lines: one row per arm (or file) over its seeds' ``unit_summary`` results."""
    lines = [title, "",
             f"| {label} | seeds | skills / episodes | wins | " + " | ".join(CLASSES) + " | distinct texts | "
             "agree | chance | bits | bits, outcomes shuffled | outcome bits |",
             "|---|---:|---:|---:|" + "---:|" * len(CLASSES) + "---:|---:|---:|---:|---:|---:|"]
    for arm, seeds in per_arm.items():
        units = list(seeds.values())
        skills = sum(u["skills"] for u in units)
        share = {c: sum(u["counts"][c] for u in units) / max(1, skills) for c in CLASSES}
        lines.append(
            f"| {arm} | {len(units)} | {skills} / {sum(u['episodes'] for u in units)} | "
            f"{sum(u['wins'] for u in units) / max(1, skills):.0%} | "
            + " | ".join(f"{share[c]:.0%}" for c in CLASSES)
            + f" | {_mean_sd([u['distinct'] for u in units], 0)} | {_mean_sd([u['agree'] for u in units])} | "
              f"{_mean_sd([u['chance'] for u in units])} | {_mean_sd([u['bits'] for u in units], 3)} | "
              f"{_mean_sd([u['shuffled_bits'] for u in units], 3)} | "
              f"{_mean_sd([u['outcome_bits'] for u in units], 3)} |")
    return lines


def _examples(texts: dict[str, Counter], examples: int) -> list[str]:
    """Markdown lines: each arm's (or file's) ``examples`` most written texts with their class."""
    lines = []
    for arm in texts if examples else ():
        lines += ["", f"Most written by `{arm}`:"]
        for (cls, text), n in texts[arm].most_common(examples):
            lines.append(f"- {n} x ({cls}) {text[:160]}")
    return lines


def record_table(path: Path, arms: Sequence[str] | None = None, match: float = 0.8, examples: int = 0) -> str | None:
    """The markdown table of one record's arms that wrote skills (None: none did)."""
    record = read_record(path)
    env_id = record.header["env_id"]
    rules, instruction = hindsight_rules_for(env_id), instruction_text()
    categories = {row[2] for unit in record.units.values() for row in unit_skills(unit)}
    table = rules_with_wrong(rules, env_id, categories)
    per_arm: dict[str, dict[int, dict]] = defaultdict(dict)
    texts: dict[str, Counter] = defaultdict(Counter)
    fixed: set[str] = set()
    for (kind, seed, arm), unit in sorted(record.units.items(), key=lambda kv: (str(kv[0][2]), kv[0][1])):
        if kind != "arm" or (arms and arm not in arms):
            continue
        if (unit.get("overrides") or {}).get("skill_source") in FIXED_SOURCES:
            fixed.add(arm)
            continue
        skills = unit_skills(unit)
        if not any(row[4] is not None for row in skills):
            continue
        per_arm[arm][seed] = unit_summary(skills, table, instruction, match)
        texts[arm].update(per_arm[arm][seed]["texts"])
    if not per_arm:
        return None if not fixed else f"### {path.stem}: only fixed skill texts ({', '.join(sorted(fixed))})"
    lines = _table(f"### {path.stem} ({env_id}; {len(rules)} rules in the env's tables)", per_arm)
    if fixed:
        lines += ["", f"Left out (fixed skill texts, not the policy's): {', '.join(sorted(fixed))}."]
    return "\n".join(lines + _examples(texts, examples))


def trajectories_table(paths: Sequence[Path], match: float = 0.8, examples: int = 0) -> str:
    """The same table over trajectory files whose episodes keep their skill in ``meta['skill']`` (None where
    the analyzer's answer was invalid), as ``benchmarks/skill_validity.py --trajectories`` writes them: one
    row per file (one policy, one seed: e.g. a Stage 1 policy's fresh rollouts), all of one env."""
    per_file, rows_of, episodes_of = {}, {}, {}
    env_ids = set()
    for path in paths:
        episodes = list(read_trajectories(path))
        if not episodes:
            raise SystemExit(f"{path}: no episodes")
        if any("skill" not in t.meta for t in episodes):
            raise SystemExit(f"{path}: an episode without meta['skill'] (write it with skill_validity.py --trajectories)")
        env_ids |= {t.env_id for t in episodes}
        episodes_of[str(path)] = episodes
        rows_of[str(path)] = [(0, t.task_id, t.category, t.success, t.meta["skill"]) for t in episodes]
    if len(env_ids) != 1:
        raise SystemExit(f"the files are of {len(env_ids)} envs ({sorted(map(str, env_ids))}): give one env's files")
    env_id = env_ids.pop()
    rules, instruction = hindsight_rules_for(env_id), instruction_text()
    table = rules_with_wrong(rules, env_id, {row[2] for rows in rows_of.values() for row in rows})
    texts: dict[str, Counter] = defaultdict(Counter)
    for name, rows in rows_of.items():
        per_file[name] = {0: unit_summary(rows, table, instruction, match)}
        texts[name].update(per_file[name][0]["texts"])
    losses = {str(path): loss_summary(episodes_of[str(path)], table, instruction, match) for path in paths}
    return "\n".join(_table(f"### {env_id} ({len(rules)} rules in the env's tables)", per_file, label="file")
                     + _examples(texts, examples) + [""] + _loss_table(losses))


def loss_summary(episodes: Sequence[Trajectory], rules: dict[str, str], instruction: str,
                 match: float = 0.8) -> dict:
    """The lost episodes of one file: the rule Stage 1's annotator (``rule_based_skill``) gives each, beside
    the skill the policy wrote for it. ``avoid``: post-loss skills that recite any avoidance rule; ``own``:
    those that recite the rule the annotator gives that very episode (the content a hindsight skill should
    carry); ``given``: how often the annotator gives each rule."""
    lost = [(t.meta["skill"], rule_based_skill(t).text) for t in episodes if not t.success]
    written = [(text, rule) for text, rule in lost if text is not None]
    avoid = sum(skill_class(text, rules, instruction, match)[0] == AVOID for text, _ in written)
    # The same recital test as skill_class's, against this episode's own rule alone.
    own = sum(skill_class(text, {"own": rule}, instruction, match)[1] == "own" for text, rule in written)
    return {"lost": len(lost), "skills": len(written), "given": Counter(rule for _, rule in lost),
            "avoid": avoid, "own": own}


def _loss_table(losses: dict[str, dict]) -> list[str]:
    """Markdown lines: per file, the annotator's rules for the lost episodes and how the policy's skills meet
    them."""
    lines = ["Lost episodes: the rule Stage 1's annotator gives each (`rule_based_skill`) beside the policy's skill:",
             "", "| file | lost | skills written | annotator's rules (distinct) | most given | recite an avoidance rule "
             "| recite the episode's own rule |", "|---|---:|---:|---:|---|---:|---:|"]
    for name, s in losses.items():
        top = s["given"].most_common(1)
        most = f"{top[0][1]} x \"{top[0][0][:60]}\"" if top else "-"
        lines.append(f"| {name} | {s['lost']} | {s['skills']} | {len(s['given'])} | {most} | {s['avoid']} | "
                     f"{s['own']} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("records", nargs="*", type=Path, help="record files (default: docs/results/records/*.jsonl)")
    p.add_argument("--trajectories", nargs="+", type=Path, default=None, metavar="FILE",
                   help="classify these trajectory files' skills instead (skill_validity.py --trajectories writes "
                        "them: a Stage 1 policy's rollouts with the skill it wrote for each), one row per file")
    p.add_argument("--arms", nargs="+", default=None, help="only these arms (default: every arm that wrote skills)")
    p.add_argument("--match", type=float, default=0.8, help="difflib ratio at which a skill recites a rule")
    p.add_argument("--examples", type=int, default=3, help="most written texts shown per arm")
    args = p.parse_args(argv)
    if args.trajectories:
        print(trajectories_table(args.trajectories, args.match, args.examples))
        return 0
    paths = args.records or sorted(RECORDS.glob("*.jsonl"))
    for path in paths:
        table = record_table(path, args.arms, args.match, args.examples)
        if table:
            print(table, end="\n\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
