"""``seed-train experiment``: arms x training seeds on one env, paired and resumable.

    seed-train experiment --env-id seed/EZPoints-v0 --arms grpo sft-grpo seed seed-shuffled \\
        --seeds 0 1 2 --output-dir runs/exp --iterations 4 --group-size 4

Every flag but ``--arms``, ``--seeds`` and ``--splits`` sets the base config; an arm is a named set of
overrides of it (:data:`ARMS`). The work is cut into units, each with its own folder under the
experiment folder:

    seed<S>/before/     the base model evaluated (shared by the seed's arms)
    seed<S>/stage1/     Stage 1 once (a trainer run with 0 iterations) and its evaluation: the Stage 2
                        start of every arm of the seed that uses Stage 1 (``stage1_from``)
    seed<S>/<arm>/      Stage 2 from that start (``grpo``: from the base model) and its evaluation

A unit's ``results.json`` is written last, so a unit with one is finished and a rerun skips it; an
interrupted arm resumes from its last checkpoint (``run/checkpoints/iterNNNN``), an interrupted Stage 1
restarts. Every evaluation plays the full (or ``eval_limit``) panel of each split, greedy or (``eval_temperature``
> 0) ``eval_samples`` sampled episodes per task with noise drawn from the seed, task and sample index alone
(common random numbers across arms), from the saved policy folder, with transformers generate whatever the
training backend, so all units are evaluated alike.

Pairing: the arms of one seed train on the same tasks with the same rollout seeds (both come from
``cfg.seed`` and the iteration alone) and are evaluated on the same panels, so per-task outcomes pair by
(seed, task_id); the report pools these pairs over seeds in an exact McNemar test
(:func:`seed_train.evaluate.mcnemar_exact`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args, get_type_hints

from seed_train.config import SeedConfig, field_default
from seed_train.logs import read_metrics
from seed_train.preflight import check_skill_source
from seed_train.progress import clock
from seed_train.seed_statistics import COMPARISON_HEADER, READING_NOTE, comparison_row, sample_sd

# name -> (config overrides, what the arm is). Values other engineers' fields need ("shuffled_tasks",
# "empty", opd_gate) are validated by SeedConfig when the experiment is planned.
ARM_TABLE: dict[str, tuple[dict[str, Any], str]] = {
    "grpo": ({"stage1_demos": 0, "opd_coef": 0.0}, "the paper's GRPO: no Stage 1, no OPD term"),
    "sft-grpo": ({"opd_coef": 0.0}, "Stage 1, then GRPO (no OPD term)"),
    "seed": ({"skill_source": "on_policy"}, "SEED: Stage 1, then GRPO + OPD with the policy's own skills"),
    "seed-shuffled": ({"skill_source": "shuffled"}, "SEED with skills permuted within each group (control)"),
    "seed-shuffled-tasks": ({"skill_source": "shuffled_tasks"}, "SEED with skills permuted across tasks (control)"),
    "seed-shuffled-categories": ({"skill_source": "shuffled_categories"},
                                 "SEED with each episode given a skill written for another task category (content "
                                 "control; needs --stage2-balance-categories)"),
    "seed-wrong-rule": ({"skill_source": "wrong_rule"},
                        "SEED with the policy's own skills rewritten to a rule wrong for the category (content control)"),
    "seed-static-wrong": ({"skill_source": "static_wrong"},
                          "SEED with the static library rewritten to a rule wrong for the category (content control; "
                          "needs --static-skills)"),
    "seed-empty": ({"skill_source": "empty"}, "SEED with an empty skill block (control)"),
    "seed-constant-gate": ({"opd_gate": "constant"}, "SEED with the gate fixed at g = 1 (control)"),
    "seed-static": ({"skill_source": "static"}, "SEED with a static skill library (needs --static-skills)"),
    "seed-frozen": ({"skill_source": "frozen"}, "SEED with the analyzer frozen at the Stage 2 start"),
}
ARMS: dict[str, dict[str, Any]] = {name: overrides for name, (overrides, _) in ARM_TABLE.items()}
DEFAULT_ARMS = ("grpo", "sft-grpo", "seed", "seed-shuffled")
DEFAULT_SPLITS = ("unseen", "test")
#: How an evaluation's progress lines name the policy (the unit's own line names the seed and the arm).
EVAL_LABELS = {"before": "before training", "after_stage1": "after Stage 1", "after": "after Stage 2"}

# Fields the experiment sets per unit (the base config's values are ignored).
MANAGED_FIELDS = ("seed", "output_dir", "eval_before", "eval_after", "eval_after_stage1", "save_final", "resume",
                  "stage1_from")
# Fields that may change between a run and its rerun: they do not change what a unit computes (threads and
# micro-batches change float rounding only: the update is the minibatch's, tests/test_micro_batches.py; a unit's own
# config.json keeps the value it ran with). Micro-batches are how a recipe that ran out of memory goes on in
# its folder (searchqa-cpu's one-pass update: docs/results.md).
OPERATIONAL_FIELDS = ("threads", "micro_batch_size", "checkpoint_every", "env_backend", "env_urls",
                      "env_step_timeout_s", "env_episode_timeout_s")


def mixing_changes(before: dict[str, Any], now: dict[str, Any], evaluated: Sequence[str]) -> list[str]:
    """The config fields whose change from ``before`` (a folder's or a record's base config; a field it
    predates reads as its default: what the older version did) to ``now`` would make finished units and new ones
    mix configs: every field but the operational ones, and ``panels`` unless only added
    (:func:`panels_only_added`; ``evaluated``: the splits the folder or record has evaluated)."""
    before = {**{f.name: field_default(f.name) for f in dataclasses.fields(SeedConfig)
                 if f.name not in MANAGED_FIELDS}, **before}
    return sorted(k for k in set(before) | set(now)
                  if k not in OPERATIONAL_FIELDS and before.get(k) != now.get(k)
                  and not (k == "panels" and panels_only_added(before.get(k), now.get(k), evaluated)))


def panels_only_added(before: Any, now: Any, evaluated: Sequence[str] = ()) -> bool:
    """Whether config field ``panels`` went from ``before`` to ``now`` by adding panels only, none under a name
    the folder (or record) has ``evaluated`` already (a panel named ``unseen`` would change what the finished
    units' ``unseen`` evaluations mean): a folder may gain a panel, whose evaluations a rerun adds to the
    finished units; a panel that changed would mix two panels under one name."""
    before, now = before or {}, now or {}
    return (all(name in now and now[name] == panel for name, panel in before.items())
            and not any(name in evaluated for name in now if name not in before))


# Metrics drawn per arm over iterations when a run logs them (others' diagnostics included as they appear).
CURVE_KEYS = ("success", "skill_valid_rate", "opd_grad_share", "gate_adv_cov", "gate_adv_cov_context",
              "gate_adv_cov_pooled")


def arms_markdown() -> str:
    """The arms table (docs/trainer.md embeds it): name, overrides, meaning."""
    rows = ["| arm | overrides of the base config | what it is |", "|---|---|---|"]
    for name, (overrides, meaning) in ARM_TABLE.items():
        flags = " ".join(f"`--{k.replace('_', '-')} {v}`" for k, v in overrides.items())
        rows.append(f"| `{name}` | {flags} | {meaning} |")
    return "\n".join(rows)


def arm_overrides(arm: str) -> dict[str, Any]:
    """The config overrides of ``arm``: a named arm of :data:`ARMS`, optionally followed by ``@`` and
    ``field=value`` pairs joined by commas that add to (or replace) its overrides, e.g. ``sft-grpo@lr=1e-4``:
    SFT+GRPO at another learning rate, the matched-step-size control. Raises ValueError naming the arm or
    field."""
    name, _, extra = arm.partition("@")
    if name not in ARMS:
        raise ValueError(f"unknown arm {name!r}; known: {list(ARMS)} (an arm may add field=value pairs after '@')")
    out = dict(ARMS[name])
    hints = get_type_hints(SeedConfig)
    for item in filter(None, extra.split(",")):
        field, sep, value = item.partition("=")
        field = field.strip().replace("-", "_")
        if not sep or field not in hints:
            raise ValueError(f"arm {arm!r}: {item!r} is not field=value with a config field")
        if field in MANAGED_FIELDS:
            raise ValueError(f"arm {arm!r}: config field '{field}' is set by the experiment per unit")
        out[field] = _field_value(hints[field], value.strip(), f"arm {arm!r}: config field '{field}'")
    return out


def is_arm(arm: str) -> bool:
    try:
        arm_overrides(arm)
    except ValueError:
        return False
    return True


def _field_value(hint: Any, text: str, where: str) -> Any:
    """``text`` as a value of a config field of type ``hint`` (bool, int, float, str, or None-able)."""
    if text.lower() in ("none", "null") and type(None) in get_args(hint):
        return None
    kinds = [k for k in (get_args(hint) or (hint,)) if k is not type(None)]
    try:
        if bool in kinds:
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError(text)
            return text.lower() in ("true", "1")
        if int in kinds:
            return int(text)
        if float in kinds:
            return float(text)
    except ValueError:
        raise ValueError(f"{where}: {text!r} is not a {kinds[0].__name__}") from None
    return text


def uses_stage1(base: SeedConfig, arm: str) -> bool:
    return arm_overrides(arm).get("stage1_demos", base.stage1_demos) > 0


def uses_opd(base: SeedConfig, arm: str) -> bool:
    return arm_overrides(arm).get("opd_coef", base.opd_coef) > 0


def read_json_file(path: Path, what: str = "") -> Any:
    """A JSON file of an experiment folder; a damaged one is a ValueError naming the file and the fix."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        reason = e.msg if isinstance(e, json.JSONDecodeError) else "not UTF-8 text"
        raise ValueError(f"{path}: damaged ({reason}){' ' + what if what else ''}; restore it or delete it (a "
                         "unit's results.json: delete that unit's folder to run the unit again)") from None


@contextlib.contextmanager
def unit_lock(folder: Path, on_wait: Callable[[str], None] | None) -> Iterator[bool]:
    """Hold ``folder/.unit.lock`` (an exclusive ``flock``) while one process runs the unit: a second process
    on the same experiment (another ``--seeds`` list that overlaps, or the same command twice) waits for it
    instead of deleting its run folder or appending to its logs; ``on_wait`` is told who holds it. With
    ``on_wait=None`` nothing waits: the body runs with False when another process holds the unit (a parallel
    worker then takes another unit), True when this one got it. The lock goes with the process, so one
    killed mid-unit leaves nothing to clean up."""
    import fcntl

    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".unit.lock", "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is None:
                yield False
                return
            handle.seek(0)
            on_wait(handle.read().strip() or "a process")
            fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class WorkerFailed(RuntimeError):
    """A parallel worker of ``seed-train experiment --jobs`` ended with an error (its lines say which unit)."""


@dataclass(frozen=True)
class Unit:
    """One piece of work with its own folder: ``kind`` before / stage1 / arm."""

    kind: str
    seed: int
    folder: Path
    arm: str | None = None

    @property
    def label(self) -> str:
        return f"seed {self.seed} " + {"before": "before training", "stage1": "Stage 1"}.get(self.kind, f"arm {self.arm}")

    @property
    def results_path(self) -> Path:
        return self.folder / "results.json"

    @property
    def run_dir(self) -> Path:
        """The trainer's run folder (Stage 1 and arms)."""
        return self.folder / "run"

    @property
    def lock_path(self) -> Path:
        """The unit's ``flock`` file (:func:`unit_lock`): names the pid that last held it."""
        return self.folder / ".unit.lock"

    def done(self) -> bool:
        return self.results_path.is_file()


@dataclass
class Experiment:
    base: SeedConfig
    arms: tuple[str, ...]
    seeds: tuple[int, ...]
    out: Path
    splits: tuple[str, ...] = DEFAULT_SPLITS
    command: tuple[str, ...] = ()  # the command line that ran it, kept in the manifest and the record
    # Run each seed's base-model evaluation and Stage 1 only (``--baselines-only``): the table's first rows on an
    # env whose arms take hours; the arms stay in the manifest and the report (unfinished) for a later rerun.
    baselines_only: bool = False
    # Unit times of an earlier run of the env (``--times-from RECORD``: records.recorded_times), for the ETA
    # where this run has not timed a unit of that arm or kind yet; not part of the experiment's identity.
    prior_times: dict[str, list[tuple[float, float]]] = dataclasses.field(default_factory=dict)

    # ------------------------------------------------------------------------------ planning
    @classmethod
    def plan(cls, base: SeedConfig, arms: Sequence[str], seeds: Sequence[int], out_dir: str | Path,
             splits: Sequence[str] = DEFAULT_SPLITS) -> Experiment:
        """Check everything that can be checked before any work; raises ValueError naming the arm or field."""
        arms, seeds, splits = tuple(dict.fromkeys(arms)), tuple(dict.fromkeys(seeds)), tuple(dict.fromkeys(splits))
        if not arms or not seeds or not splits:
            raise ValueError("an experiment needs at least one arm, one seed and one split")
        for arm in arms:
            arm_overrides(arm)  # raises ValueError naming an unknown arm or field
        for name in ("resume", "stage1_from"):
            if getattr(base, name):
                raise ValueError(f"config field '{name}': the experiment manages it per unit (rerun to resume)")
        experiment = cls(base, arms, seeds, Path(out_dir), splits)
        for arm in arms:
            if "stage1_demos" not in arm_overrides(arm) and base.stage1_demos == 0:
                raise ValueError(f"arm {arm!r} starts from Stage 1: config field 'stage1_demos' must be > 0")
            if "opd_coef" not in arm_overrides(arm) and not uses_opd(base, arm):
                raise ValueError(f"arm {arm!r} uses the OPD term: config field 'opd_coef' must be > 0")
            try:
                check_skill_source(experiment.arm_config(arm, seeds[0]))
            except ValueError as e:  # e.g. a skill source or field this version of SeedConfig lacks
                raise ValueError(f"arm {arm!r}: {e}") from None
        experiment.check_manifest()
        return experiment

    def common_config(self) -> dict[str, Any]:
        """The base config less the per-unit fields: what every unit of the experiment shares."""
        return {k: v for k, v in self.base.to_dict().items() if k not in MANAGED_FIELDS}

    def check_manifest(self) -> None:
        """A rerun must use the base config the folder was started with (arms and seeds may be added)."""
        path = self.out / "experiment.json"
        if not path.is_file():
            return
        # (A field this version added after the folder was started reads as its default, so upgrading
        # mid-experiment does not orphan the folder.)
        manifest = read_json_file(path)
        changed = mixing_changes(manifest["config"], self.common_config(), manifest.get("splits", []))
        if changed:
            raise ValueError(f"{self.out} was started with other values of {changed}; finished units would mix "
                             "configs: use those values or a new --output-dir")

    def write_manifest(self) -> None:
        """Add this process's arms, seeds and command to the folder's ``experiment.json``: read, merged and
        replaced under a lock, so processes started side by side on one folder (``--seeds 2 5`` and
        ``--seeds 6 7``) each keep the other's seeds."""
        import fcntl

        path = self.out / "experiment.json"
        self.out.mkdir(parents=True, exist_ok=True)
        with open(self.out / ".experiment.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                self._merge_manifest(path)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _merge_manifest(self, path: Path) -> None:
        old = read_json_file(path) if path.is_file() else {"arms": [], "seeds": []}
        tmp = path.with_name(f"experiment.json.tmp{os.getpid()}")
        tmp.write_text(json.dumps({
            "config": self.common_config(), "splits": list(dict.fromkeys([*old.get("splits", []), *self.splits])),
            "arms": list(dict.fromkeys([*old["arms"], *self.arms])),
            "seeds": list(dict.fromkeys([*old["seeds"], *self.seeds])),
            "overrides": {a: arm_overrides(a) for a in dict.fromkeys([*old["arms"], *self.arms]) if is_arm(a)},
            "commands": [*old.get("commands", []), *([list(self.command)] if self.command else [])],
        }, indent=1))
        tmp.replace(path)

    def whole_folder(self) -> Experiment:
        """This experiment widened to every arm and seed the folder's manifest records: processes that run
        seeds of one folder side by side (``--seeds 0``, ``--seeds 1``, ...) each end with a report over all of
        them, the units still running listed as unfinished, so the last one to finish writes the whole report."""
        path = self.out / "experiment.json"
        manifest = read_json_file(path) if path.is_file() else {"arms": [], "seeds": []}
        arms = tuple(a for a in dict.fromkeys([*manifest["arms"], *self.arms]) if is_arm(a))
        seeds = tuple(sorted(dict.fromkeys([*manifest["seeds"], *self.seeds])))
        splits = tuple(dict.fromkeys([*manifest.get("splits", []), *self.splits]))
        return dataclasses.replace(self, arms=arms, seeds=seeds, splits=splits)

    def units(self) -> list[Unit]:
        """Per seed: the base model's evaluation, Stage 1 (when an arm uses it), then the arms in order."""
        out: list[Unit] = []
        for seed in self.seeds:
            folder = self.out / f"seed{seed}"
            out.append(Unit("before", seed, folder / "before"))
            if any(uses_stage1(self.base, a) for a in self.arms):
                out.append(Unit("stage1", seed, folder / "stage1"))
            out += [Unit("arm", seed, folder / arm, arm) for arm in self.arms]
        return out

    def missing_splits(self, unit: Unit) -> tuple[str, ...]:
        """The splits (or panels) of this run a unit has not been evaluated on: all of them for an unfinished
        unit; for a finished one, those added to the folder after it ran (a new ``panels`` entry in
        ``--splits``), which a rerun evaluates from the unit's saved policy without training again."""
        if not unit.done():
            return self.splits
        evals = read_json_file(unit.results_path).get("evals", {})
        return tuple(s for s in self.splits if s not in evals)

    def pending(self, unit: Unit) -> bool:
        """Whether this run has work on ``unit``: the unit itself, or an evaluation of a panel it lacks."""
        return bool(self.missing_splits(unit))

    def work(self) -> list[Unit]:
        """The units this run runs: :meth:`units`, less the arms with ``baselines_only``."""
        return [u for u in self.units() if not (self.baselines_only and u.kind == "arm")]

    def stage1_file(self, seed: int) -> Path:
        return self.out / f"seed{seed}" / "stage1" / "run" / "checkpoints" / "stage1.safetensors"

    def _unit_config(self, overrides: dict[str, Any], seed: int, run_dir: Path) -> SeedConfig:
        data = {**self.base.to_dict(), **overrides, "seed": seed, "output_dir": str(run_dir), "eval_before": False,
                "eval_after": False, "eval_after_stage1": False, "save_final": True, "resume": None,
                "stage1_from": None}
        return SeedConfig.from_dict(data)

    def arm_config(self, arm: str, seed: int, *, stage1_from: str | None = None,
                   resume: str | None = None) -> SeedConfig:
        """The trainer config of (seed, arm): base + the arm's overrides, Stage 2 from the seed's Stage 1."""
        cfg = self._unit_config(arm_overrides(arm), seed, self.out / f"seed{seed}" / arm / "run")
        return dataclasses.replace(cfg, stage1_from=stage1_from, resume=resume) if (stage1_from or resume) else cfg

    def stage1_config(self, seed: int) -> SeedConfig:
        """Stage 1 alone: a trainer run with no Stage 2 iterations (Stage 1 reads none of the arms' overrides)."""
        return self._unit_config({"iterations": 0}, seed, self.out / f"seed{seed}" / "stage1" / "run")

    def eval_config(self, model: str | Path, seed: int) -> SeedConfig:
        """Evaluation of a saved policy folder: the base config's env, prompt and decoding settings."""
        return dataclasses.replace(self._unit_config({}, seed, self.out), model=str(model), lora=False,
                                   generation_backend="hf")

    # ------------------------------------------------------------------------------ running
    def run(self, say: Callable[[str], None] = print, jobs: int = 1) -> dict[str, Any]:
        """Every unfinished unit (progress and ETA per unit), then the report. Returns the report. ``jobs`` > 1
        runs the units in that many worker processes (:meth:`run_parallel`)."""
        from seed_train.threads import torch_threads

        if jobs > 1:
            return self.run_parallel(jobs, say)
        self.write_manifest()
        units = self.work()
        started = time.perf_counter()
        unfinished = len([u for u in units if self.pending(u)])
        if unfinished and (eta := self.eta_seconds(self.unit_times(), jobs=1)) is not None:
            say(f"{unfinished} unfinished units, {self._eta_source(eta, 1)}")
        with torch_threads(self.base.threads):
            for k, unit in enumerate(units, 1):
                head = f"[{k}/{len(units)}] {unit.label}"
                with unit_lock(unit.folder, lambda holder: say(f"{head}: another process is running it "
                                                               f"({holder}); waiting")):
                    if not self.pending(unit):  # (finished earlier, or by the process this one waited for)
                        say(f"{head}: finished earlier, skipped")
                        continue
                    say(f"{head}: {self._what(unit)}")
                    t0 = time.perf_counter()
                    self.run_unit(unit, say=lambda line: say(f"    {line}"))
                eta = self.eta_seconds(self.unit_times(), jobs=1)
                say(f"{head}: done in {clock(time.perf_counter() - t0)}; elapsed "
                    f"{clock(time.perf_counter() - started)}, {_eta_text(eta, 1)}")
        return self.report()

    # ------------------------------------------------------------------------------ parallel workers
    def claim_order(self) -> list[Unit]:
        """The order in which free workers take units: per seed, Stage 1 first (the seed's arms wait for it),
        then the base model's evaluation, then the arms in ``--arms`` order. (Longest arm first was tried on
        paper against search QA seed 6's measured times and would have ended that seed 2 minutes later: the
        worker freed first by the base model's evaluation has a head start that favours a short arm.)"""
        first = {"stage1": 0, "before": 1}  # then the arms, in their order
        return sorted(self.work(), key=lambda u: (self.seeds.index(u.seed), first.get(u.kind, 2)))

    def ready(self, unit: Unit) -> bool:
        """Whether ``unit`` can start now: an arm from Stage 1 once its seed's Stage 1 training has finished
        (its run's results.json, written after the weights; Stage 1's evaluation may still be running)."""
        if unit.kind != "arm" or not uses_stage1(self.base, unit.arm):
            return True
        return (self.out / f"seed{unit.seed}" / "stage1" / "run" / "results.json").is_file()

    def run_worker(self, say: Callable[[str], None] = print, stop: Callable[[], bool] = lambda: False,
                   poll_s: float = 5.0, jobs: int = 1) -> int:
        """One worker of :meth:`run_parallel`: take the first unit in :meth:`claim_order` that is unfinished,
        ready and held by no other process, run it, and again, until every unit is finished (or ``stop()``
        says so between units); while every unfinished unit is held elsewhere or waits for its Stage 1, look
        again every ``poll_s`` seconds. Returns the number of units this worker ran."""
        from seed_train.threads import torch_threads

        ran = 0
        with torch_threads(self.base.threads):
            while not stop():
                pending = [u for u in self.claim_order() if self.pending(u)]
                if not pending:
                    return ran
                if not any(self._run_if_free(u, say, jobs) for u in pending if self.ready(u)):
                    time.sleep(poll_s)
                    continue
                ran += 1
        return ran

    def _run_if_free(self, unit: Unit, say: Callable[[str], None], jobs: int) -> bool:
        with unit_lock(unit.folder, None) as held:
            if not held or not self.pending(unit):
                return False
            say(f"{unit.label}: {self._what(unit)}")
            t0 = time.perf_counter()
            self.run_unit(unit, say=lambda line: say(f"    {line}"))
        units = self.work()
        finished = [u for u in units if not self.pending(u)]
        say(f"{unit.label}: done in {clock(time.perf_counter() - t0)}; {len(finished)}/{len(units)} units "
            f"finished, {_eta_text(self.eta_seconds(self.unit_times(), jobs), jobs)}")
        return True

    def unit_times(self) -> dict[str, list[tuple[float, float]]]:
        """The ETA's unit times (:func:`_durations`): this folder's finished units, and for an arm or kind it
        has not timed yet, those of ``prior_times`` (``--times-from``)."""
        return {**self.prior_times, **_durations([u for u in self.units() if u.done()])}

    def _eta_source(self, eta: float, jobs: int) -> str:
        """The ETA, and where its unit times come from while the folder has timed none."""
        timed_here = any(u.done() for u in self.units())
        return _eta_text(eta, jobs) + ("" if timed_here or not self.prior_times
                                       else " (from the unit times of --times-from)")

    def eta_seconds(self, durations: dict[str, list[tuple[float, float]]], jobs: int) -> float | None:
        """Seconds until this run's units are finished, for a worker that is free now (of ``jobs``; 1: the
        run one unit after another, which waits on units other processes hold): the units held by
        other processes end after their mean time (key: the arm, else the kind; :func:`_durations`) less the
        time they have run (their lock's age), and the rest go, in :meth:`claim_order`, to whichever worker
        is free first, an arm from Stage 1 not before its seed's Stage 1 has trained (the mean share of a
        Stage 1 unit's time spent training): :func:`schedule_end` on these estimates (None until a unit of
        each kind left has finished). A finished unit that lacks an added panel counts as the evaluation of it
        (:func:`panel_work`), at the time such evaluations took (of the unit's kind, else of any)."""
        now = time.time()
        pending = [u if not u.done() else panel_work(u) for u in self.claim_order() if self.pending(u)]
        running = {u: now - u.lock_path.stat().st_mtime for u in pending if _held_elsewhere(u)}
        # Seeds whose Stage 1 has trained: finished ones (not pending) too, or their arms would never be ready.
        trained = {u.seed for u in self.units() if u.kind == "stage1" and (u.run_dir / "results.json").is_file()}
        return schedule_end([u for u in pending if u not in running], running, durations, jobs, trained,
                            needs_stage1=lambda u: u.kind == "arm" and uses_stage1(self.base, u.arm))

    def run_parallel(self, jobs: int, say: Callable[[str], None] = print, poll_s: float = 5.0) -> dict[str, Any]:
        """The units in ``jobs`` worker processes (each with ``threads`` torch threads): a seed's arms run side
        by side once its Stage 1 has trained, and the seeds' units fill the workers. Each line is prefixed with
        its worker (``w1`` ...). A worker that fails stops the others after their current unit (an interrupted
        unit resumes on a rerun) and raises :class:`WorkerFailed`; otherwise the report, as :meth:`run`."""
        import multiprocessing
        import multiprocessing.connection

        self.write_manifest()
        context = multiprocessing.get_context("spawn")  # a fresh interpreter each: no forked torch thread pools
        stop = context.Event()
        workers = [context.Process(target=_worker_main, args=(self, f"w{k}", stop, poll_s, jobs, _env_registration(
            self.base.env_id)), name=f"w{k}") for k in range(1, jobs + 1)]
        eta = self.eta_seconds(self.unit_times(), jobs)
        say(f"{len([u for u in self.work() if self.pending(u)])} unfinished units over {jobs} worker processes "
            f"({self.base.threads or 'auto'} torch thread(s) each)" + ("" if eta is None else
                                                                       f", {self._eta_source(eta, jobs)}"))
        for worker in workers:
            worker.start()
        failed: list[str] = []
        alive = list(workers)
        while alive:
            multiprocessing.connection.wait([w.sentinel for w in alive])  # until one of them ends
            for worker in [w for w in alive if not w.is_alive()]:
                worker.join()
                alive.remove(worker)
                if worker.exitcode != 0:
                    failed.append(worker.name)
                    stop.set()
                    say(f"{worker.name} failed (exit code {worker.exitcode}); the other workers stop after their "
                        "current unit")
        if failed:
            raise WorkerFailed(f"worker(s) {', '.join(failed)} failed: their lines above name the unit and the "
                               "error; rerun the same command to resume")
        return self.report()

    def _what(self, unit: Unit) -> str:
        if unit.done():
            return f"finished earlier; evaluating on the added panel(s) {', '.join(self.missing_splits(unit))}"
        if unit.kind == "before":
            return f"evaluating the base model on {', '.join(self.splits)}"
        if unit.kind == "stage1":
            return "Stage 1, then its evaluation"
        resume = latest_checkpoint(unit.run_dir)
        start = "Stage 1" if uses_stage1(self.base, unit.arm) else "the base model"
        if (unit.run_dir / "results.json").is_file():
            return "trained earlier; evaluating"
        return f"Stage 2 from {start}" + (f", resuming from {resume.name}" if resume else "")

    def run_unit(self, unit: Unit, say: Callable[[str], None] = print) -> dict[str, Any]:
        from seed_train.trainer import train

        if unit.done():
            return self.add_panels(unit)
        t0 = time.perf_counter()
        result: dict[str, Any] = {"kind": unit.kind, "seed": unit.seed, "arm": unit.arm}
        if unit.kind == "before":
            model, stage = self.base.model, "before"
        else:
            if not (unit.run_dir / "results.json").is_file():  # the trainer writes it last: training finished
                if unit.kind == "stage1":
                    cfg = self.stage1_config(unit.seed)
                else:
                    resume = latest_checkpoint(unit.run_dir)
                    stage1 = str(self.stage1_file(unit.seed)) if uses_stage1(self.base, unit.arm) else None
                    cfg = self.arm_config(unit.arm, unit.seed, stage1_from=None if resume else stage1,
                                          resume=str(resume) if resume else None)
                if cfg.resume is None and unit.run_dir.exists():
                    shutil.rmtree(unit.run_dir)  # an interrupted start: its logs and trajectories would be appended to
                train(cfg, say=say)
                result["train_seconds"] = time.perf_counter() - t0  # (a rerun that only evaluates has none)
            result["train"] = read_json_file(unit.run_dir / "results.json")
            model, stage = unit.run_dir / "final", ("after_stage1" if unit.kind == "stage1" else "after")
            if unit.kind == "arm":
                result["overrides"] = arm_overrides(unit.arm)
                result["start"] = "after_stage1" if uses_stage1(self.base, unit.arm) else "before"
        result["evals"] = self.evaluate(model, unit.seed, unit.folder, stage)
        result["seconds"] = time.perf_counter() - t0
        _write_results(unit, result)
        return result

    def add_panels(self, unit: Unit) -> dict[str, Any]:
        """A finished unit evaluated on the splits it lacks (:meth:`missing_splits`), from its saved policy (the
        base model, or the unit's ``run/final``) as its own evaluation was; its results.json gains them (and
        their time in ``added_eval_seconds``; ``seconds`` stays the unit's own)."""
        result = read_json_file(unit.results_path)
        missing = self.missing_splits(unit)
        model = self.base.model if unit.kind == "before" else unit.run_dir / "final"
        stage = {"before": "before", "stage1": "after_stage1"}.get(unit.kind, "after")
        t0 = time.perf_counter()
        result["evals"].update(self.evaluate(model, unit.seed, unit.folder, stage, splits=missing))
        result["added_eval_seconds"] = {**result.get("added_eval_seconds", {}),
                                        ",".join(missing): time.perf_counter() - t0}
        _write_results(unit, result)
        return result

    def evaluate(self, model: str | Path, seed: int, folder: Path, stage: str,
                 splits: Sequence[str] | None = None) -> dict[str, Any]:
        """Evaluation of a policy folder on every split (or ``splits``; greedy, or ``eval_samples`` sampled
        episodes per task): summary and per-episode outcomes per split."""
        from seed_train.evaluate import episode_outcomes, evaluate_policy, write_report
        from seed_train.trainer import env_spec, eval_decoding, load
        from wrappers import read_trajectories

        cfg = self.eval_config(model, seed)
        policy = load(cfg)
        out = {}
        for split in self.splits if splits is None else splits:
            name = f"eval_{stage}_{split}"
            path = folder / f"{name}.trajectories.jsonl"
            summary = evaluate_policy(policy.backend, policy.codec, env_spec(cfg, split),
                                      max_new_tokens=cfg.max_new_tokens, limit=cfg.panel_limit(split), seed=seed,
                                      trajectories_path=path, env_backend=cfg.env_backend,
                                      progress=EVAL_LABELS.get(stage, stage), **eval_decoding(cfg, policy))
            write_report(summary, folder, name)
            out[split] = {"summary": summary, "tasks": episode_outcomes(list(read_trajectories(path)))}
        return out

    # ------------------------------------------------------------------------------ report
    def report(self) -> dict[str, Any]:
        """report.json, report.md and curves_<metric>.png from the finished units of every arm and seed the
        folder records (:meth:`whole_folder`); returns report.json's dict."""
        whole = self.whole_folder()
        report = build_report(whole)
        report["files"] = {"json": str(self.out / "report.json"), "markdown": str(self.out / "report.md"),
                           "curves": [str(p) for p in plot_curves(whole)]}
        (self.out / "report.json").write_text(json.dumps(report, indent=1))
        (self.out / "report.md").write_text(report_markdown(report) + "\n")
        from seed_train.records import add_units, write_record

        write_record(add_units(whole, None)[0], self.out / "record.jsonl")  # what to commit (seed-train record)
        return report


def run_experiment(base: SeedConfig, arms: Sequence[str], seeds: Sequence[int], out_dir: str | Path,
                   splits: Sequence[str] = DEFAULT_SPLITS, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Plan (validate) and run an experiment; returns the report."""
    return Experiment.plan(base, arms, seeds, out_dir, splits).run(say)


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The run's last complete Stage 2 checkpoint (``checkpoints/iterNNNN`` with its meta.json), if any;
    never a killed save's ``iterNNNN.tmp`` (:func:`seed_train.checkpoint.latest_checkpoint`)."""
    from seed_train.checkpoint import latest_checkpoint as latest

    return latest(run_dir)


def panel_work(unit: Unit) -> Unit:
    """A finished unit's evaluation on an added panel, as the ETA schedules it: kind ``panels``, timed by
    :func:`_durations` under ``"<kind> panels"`` (else ``panels``), ready at once."""
    return Unit("panels", unit.seed, unit.folder, f"{unit.kind} panels")


def _write_results(unit: Unit, result: dict[str, Any]) -> None:
    tmp = unit.results_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=1))
    tmp.replace(unit.results_path)  # atomically: a results.json is always a whole one


def _durations(done: Sequence[Unit]) -> dict[str, list[tuple[float, float]]]:
    """(seconds, seconds training) of finished units per arm and per kind, as their results.json recorded
    them (any process's; a unit from before ``train_seconds`` was recorded counts as training throughout),
    and the evaluations of added panels per unit kind and in all (``"<kind> panels"``, ``"panels"``)."""
    out: dict[str, list[tuple[float, float]]] = {}
    for unit in done:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            add_unit_time(out, unit.kind, unit.arm, read_json_file(unit.results_path))
    return out


def add_unit_time(times: dict[str, list[tuple[float, float]]], kind: str, arm: str | None,
                  timed: dict[str, Any]) -> None:
    """Add one unit's times (``seconds``, ``train_seconds``, ``added_eval_seconds`` of its results.json or its
    record line) to ``times`` under the keys the ETA reads: the arm (else the kind) and the kind; each added
    panel's evaluation under ``"<kind> panels"`` and ``"panels"`` (:func:`panel_work`)."""
    seconds = float(timed["seconds"])
    pair = (seconds, float(timed.get("train_seconds", seconds)))
    for key in dict.fromkeys((arm or kind, kind)):
        times.setdefault(key, []).append(pair)
    for added in (timed.get("added_eval_seconds") or {}).values():
        for key in (f"{kind} panels", "panels"):
            times.setdefault(key, []).append((float(added), 0.0))


def _eta_text(seconds: float | None, jobs: int) -> str:
    if seconds is None:
        return "ETA not known until a unit of each kind left has finished once"
    return f"ETA {clock(seconds)}" + (f" over {jobs} workers" if jobs > 1 else "")


def schedule_end(queue: Sequence[Unit], running: dict[Unit, float], durations: dict[str, list[tuple[float, float]]],
                 jobs: int, trained: set[int] = frozenset(), *,
                 needs_stage1: Callable[[Unit], bool] = lambda u: u.kind == "arm") -> float | None:
    """When ``jobs`` workers that take ``queue``'s units in order, each the first one ready when a worker is
    free, have finished them: list scheduling on mean unit times. ``running``: unit -> seconds it has run (on
    another worker); ``durations``: :func:`_durations`; ``trained``: seeds whose Stage 1 has trained (their
    arms are ready); an arm that ``needs_stage1`` is ready once its seed's Stage 1 has run its mean training
    time. An arm not run yet takes the mean of the arms run; None where a unit's kind has no finished unit (a
    base model's evaluation says nothing of Stage 1's time)."""
    import heapq

    if any(not (durations.get(u.arm or u.kind) or durations.get(u.kind)) for u in [*queue, *running]):
        return None

    def mean(unit: Unit) -> tuple[float, float]:
        known = durations.get(unit.arm or unit.kind) or durations[unit.kind]
        return sum(d for d, _ in known) / len(known), sum(t for _, t in known) / len(known)

    ready_at = {seed: 0.0 for seed in trained}
    free: list[float] = []
    for unit, ran in running.items():
        seconds, training = mean(unit)
        free.append(max(0.0, seconds - ran))
        if unit.kind == "stage1":
            ready_at.setdefault(unit.seed, max(0.0, training - ran))
    free += [0.0] * max(1, jobs - len(running))  # this worker, and any idle one
    end = max(free)
    heapq.heapify(free)
    left = list(queue)
    while left:
        t = heapq.heappop(free)
        starts = [ready_at.get(u.seed, float("inf")) if needs_stage1(u) else 0.0 for u in left]
        pick = next((k for k, ready in enumerate(starts) if ready <= t), None)
        if pick is None:  # every unit left waits for a Stage 1: this worker idles until the first is ready
            if min(starts) == float("inf"):  # a Stage 1 neither trained, running nor queued: no estimate
                return None
            heapq.heappush(free, min(starts))
            continue
        unit = left.pop(pick)
        seconds, training = mean(unit)
        if unit.kind == "stage1":
            ready_at[unit.seed] = t + training
        end = max(end, t + seconds)
        heapq.heappush(free, t + seconds)
    return end


def _held_elsewhere(unit: Unit) -> bool:
    """Whether another live process holds ``unit``'s lock (its lock file names the holder's pid)."""
    try:
        pid = int(unit.lock_path.read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return False
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _env_registration(env_id: str) -> Any:
    """This process's gymnasium registration of ``env_id`` (None where it has none, e.g. a ``module:Env`` id)."""
    import gymnasium as gym

    import seed_envs  # noqa: F401  (registers the seed/ ids)

    return gym.registry.get(env_id)


def _worker_main(experiment: Experiment, name: str, stop: Any, poll_s: float, jobs: int, registration: Any) -> None:
    """A worker process of :meth:`Experiment.run_parallel` (module level: spawn pickles it by name), its
    lines prefixed with its name. A fresh interpreter knows the seed/ ids once seed_envs is imported, not an
    id the parent registered itself (a user's script, a test's env): the parent's registration is copied in."""
    import gymnasium as gym

    import seed_envs  # noqa: F401

    if registration is not None and registration.id not in gym.registry:
        gym.registry[registration.id] = registration
    sys.stdout = LinePrefix(sys.stdout, f"{name} ")  # every line of the worker's, the evaluations' included
    sys.stderr = LinePrefix(sys.stderr, f"{name} ")  # and the libraries' progress bars (tqdm writes there)
    _end_with_parent(name)
    experiment.run_worker(say=lambda line: print(line, flush=True), stop=stop.is_set, poll_s=poll_s, jobs=jobs)


def _end_with_parent(name: str, grace_s: float = 30.0) -> None:
    """End this worker when the experiment's process ends without stopping it (killed with SIGKILL, or by
    the OOM killer): an orphaned worker would finish its unit and take further ones, on cores its user
    thinks are free. A thread waits on the parent's sentinel, then interrupts the worker as Ctrl-C would
    (its unit's lock goes with it; a rerun resumes) and, if the interrupt is not taken within ``grace_s``
    (a long native call), exits."""
    import multiprocessing
    import multiprocessing.connection
    import signal
    import threading

    parent = multiprocessing.parent_process()
    if parent is None:
        return
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:  # a command started in the background ignores SIGINT
        signal.signal(signal.SIGINT, signal.default_int_handler)  # (the shell's doing): the watch needs it

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        with contextlib.suppress(OSError, ValueError):  # (its stdout may have gone with the parent)
            print(f"the experiment's process has ended: {name} stops (a rerun resumes)", flush=True)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(grace_s)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


class LinePrefix(io.TextIOBase):
    """A text stream that writes ``prefix`` at the start of every line to ``stream`` (a worker's name),
    a line rewritten after a carriage return included."""

    def __init__(self, stream: Any, prefix: str) -> None:
        self.stream, self.prefix, self.at_line_start = stream, prefix, True

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        for piece in text.splitlines(keepends=True):
            bare_ending = piece in ("\n", "\r", "\r\n")  # an empty line or a redraw's opening \r: no prefix
            self.stream.write((self.prefix if self.at_line_start and not bare_ending else "") + piece)
            self.at_line_start = piece.endswith(("\n", "\r"))
        return len(text)

    def flush(self) -> None:
        self.stream.flush()


# ---------------------------------------------------------------------------------- the report
def _load(unit: Unit) -> dict[str, Any] | None:
    return read_json_file(unit.results_path) if unit.done() else None


def build_report(experiment: Experiment) -> dict[str, Any]:
    """The report of an experiment folder's finished units (:func:`report_from_results`)."""
    units = experiment.units()
    return report_from_results(
        {(u.kind, u.seed, u.arm): _load(u) for u in units}, env_id=experiment.base.env_id, arms=experiment.arms,
        seeds=experiment.seeds, splits=experiment.splits,
        eval_decoding=recorded_decoding(experiment.base),
        starts={a: "after_stage1" if uses_stage1(experiment.base, a) else "before" for a in experiment.arms},
        has_stage1=any(u.kind == "stage1" for u in units), unfinished=[u.label for u in units if not u.done()])


def report_from_results(results: dict[tuple[str, int, str | None], dict[str, Any] | None], *, env_id: str,
                        arms: Sequence[str], seeds: Sequence[int], splits: Sequence[str],
                        eval_decoding: dict[str, Any], starts: dict[str, str], has_stage1: bool,
                        unfinished: Sequence[str]) -> dict[str, Any]:
    """Per split: each policy's success per seed (Wilson 95% CI), mean ± sd over seeds, per-category
    aggregates; the seed-level comparisons (:func:`seed_train.seed_statistics.compare_over_seeds`: every pair
    of arms, and every arm against its Stage 2 start, ``starts``), Holm-adjusted over the whole report; and,
    as within-seed diagnostics, exact McNemar tests on episodes paired by (seed, task, sample), per seed and
    pooled. ``results``: (kind, seed, arm) -> a unit's results (``evals``: per split ``summary`` and ``tasks``),
    None where unfinished; an experiment folder's (:func:`build_report`) or a record's
    (:func:`seed_train.records.report_from_record`)."""
    from seed_train.evaluate import aggregate_runs, paired_test, wilson_interval
    from seed_train.seed_statistics import compare_over_seeds, holm

    policies = [("before", "before", None)]
    if has_stage1:
        policies.append(("after_stage1", "stage1", None))
    policies += [(arm, "arm", arm) for arm in arms]
    report: dict[str, Any] = {"env_id": env_id, "arms": list(arms), "seeds": list(seeds),
                              "overrides": {a: arm_overrides(a) for a in arms}, "eval_decoding": dict(eval_decoding),
                              "unfinished": list(unfinished), "splits": {}}
    for split in splits:
        rows: dict[str, Any] = {}
        outcomes: dict[str, dict[tuple[int, str], bool]] = {}
        for name, kind, arm in policies:
            per_seed, summaries, paired = [], [], {}
            for seed in seeds:
                result = results.get((kind, seed, arm))
                if result is None or split not in result["evals"]:
                    continue
                evaluation = result["evals"][split]
                overall = evaluation["summary"]["categories"]["all"]
                per_seed.append({"seed": seed, "success": overall["success"], "score": overall["score"],
                                 "successes": overall["successes"],
                                 "episodes": overall["episodes"],
                                 "ci95": list(wilson_interval(overall["successes"], overall["episodes"]))})
                summaries.append(evaluation["summary"])
                paired.update({(seed, task): ok for task, ok in evaluation["tasks"].items()})
            if not per_seed:
                continue
            success = [r["success"] for r in per_seed]
            rows[name] = {"per_seed": per_seed, "success_mean": sum(success) / len(success),
                          "success_sd": sample_sd(success), "categories": aggregate_runs(summaries)}
            outcomes[name] = paired
        tested = [a for a in arms if a in outcomes]
        comparisons = [(a, b) for i, a in enumerate(tested) for b in tested[i + 1:]]
        comparisons += [(arm, starts[arm]) for arm in tested if starts[arm] in outcomes]
        by_metric = {metric: {name: {r["seed"]: r[metric] for r in row["per_seed"]} for name, row in rows.items()}
                     for metric in ("success", "score")}
        seed_level, seed_level_score = ([compare_over_seeds(values[a], values[b], label_a=a, label_b=b)
                                         for a, b in comparisons] for values in by_metric.values())
        diagnostics = [{"a": a, "b": b, **paired_test(outcomes[a], outcomes[b]),
                        "per_seed": per_seed_mcnemar(outcomes[a], outcomes[b])} for a, b in comparisons]
        report["splits"][split] = {"policies": rows, "seed_level": seed_level, "seed_level_score": seed_level_score,
                                   "paired": [d for d in diagnostics if d["b"] in tested],
                                   "vs_start": [d for d in diagnostics if d["b"] not in tested]}
    # Success is the primary measure (Holm over its comparisons); the score (the env's partial credit) a
    # secondary one, adjusted as its own family.
    for key in ("seed_level", "seed_level_score"):
        family = [c for section in report["splits"].values() for c in section[key]]
        for c, p_holm in zip(family, holm([c["p_sign_flip"] for c in family])):
            c["p_holm"], c["family"] = p_holm, len(family)
        if key == "seed_level":
            report["comparisons"] = len(family)
    return report


def per_seed_mcnemar(a: dict[tuple[int, str], bool], b: dict[tuple[int, str], bool]) -> list[dict[str, Any]]:
    """The exact McNemar test within each training seed (episodes of one seed's two policies paired by task
    and sample): a diagnostic of where two trained policies differ, not evidence about the methods."""
    from seed_train.evaluate import paired_test

    seeds = sorted({k[0] for k in a} & {k[0] for k in b})
    return [{"seed": s, **paired_test({k: v for k, v in a.items() if k[0] == s}, {k: v for k, v in b.items() if k[0] == s})}
            for s in seeds]


POLICY_LABELS = {"before": "before training (base model)", "after_stage1": "after Stage 1"}


def recorded_decoding(base: SeedConfig) -> dict[str, Any]:
    """How an experiment's evaluations decode, as its report and record keep it: the temperature and samples per
    task, and the nucleus where sampled evaluations draw from one (``top_p`` < 1; absent: the whole distribution,
    as in every record before it was kept)."""
    decoding = {"eval_temperature": base.eval_temperature, "eval_samples": base.eval_samples}
    if base.eval_temperature > 0 and base.top_p < 1:
        decoding["top_p"] = base.top_p
    return decoding


def decoding_phrase(report: dict[str, Any]) -> str:
    """How the report's evaluations decoded, from the base config it records."""
    decoding = report.get("eval_decoding", {})
    temperature, samples = decoding.get("eval_temperature", 0.0), decoding.get("eval_samples", 1)
    nucleus = f", top_p {decoding['top_p']:g}" if "top_p" in decoding else ""
    return "greedy" if not temperature else f"sampled (T={temperature:g}{nucleus}, {samples} episode(s) per task)"


def report_markdown(report: dict[str, Any]) -> str:
    lines = [f"# Experiment: {report['env_id']}", "",
             f"Arms: {', '.join(report['arms']) or 'none yet (the base model and Stage 1 only)'}; training seeds: {', '.join(map(str, report['seeds']))}. "
             f"Success is the {decoding_phrase(report)} success rate on the split's panel; mean ± sd over training "
             "seeds; per seed the Wilson 95% interval (of that one trained policy, over episodes).", "",
             READING_NOTE + f" This report makes {report.get('comparisons', 0)} seed-level comparisons."]
    if report["unfinished"]:
        lines += ["", f"**Unfinished units** (rerun the command to complete them): {', '.join(report['unfinished'])}"]
    for split, section in report["splits"].items():
        lines += ["", f"## {split}", "", "| policy | seeds | success mean ± sd | per seed: success [95% CI] |",
                  "|---|---:|---|---|"]
        for name, row in section["policies"].items():
            per_seed = "; ".join(f"s{r['seed']} {r['success']:.3f} [{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}] "
                                 f"(n={r['episodes']})" for r in row["per_seed"])
            label = POLICY_LABELS.get(name, f"`{name}` after Stage 2")
            lines.append(f"| {label} | {len(row['per_seed'])} | {row['success_mean']:.3f} ± {row['success_sd']:.3f} "
                         f"| {per_seed} |")
        lines += category_table(section["policies"])
        if section.get("seed_level"):
            lines += ["", "Comparisons over training seeds (the evidence; success):", "", *COMPARISON_HEADER]
            lines += [comparison_row(c) for c in section["seed_level"]]
        if section.get("seed_level_score"):
            lines += ["", "The same on the score (the env's partial credit; a secondary measure, Holm-adjusted as "
                      "its own family):", "", *COMPARISON_HEADER]
            lines += [comparison_row(c) for c in section["seed_level_score"]]
        tests = section["paired"] + section["vs_start"]
        if tests:
            lines += ["", "Within-seed diagnostics (exact McNemar on episodes paired by task and sample inside each "
                      "training seed; episodes are not replicates of a method, so these say where two trained "
                      "policies differ, not whether the methods do):", "",
                      "| A | B | per seed: A only / B only (p) | pooled A only / B only |", "|---|---|---|---|"]
            for t in tests:
                per_seed = "; ".join(f"s{r['seed']} {r['a_only']} / {r['b_only']} ({r['p_value']:.3g})"
                                     for r in t.get("per_seed", []))
                lines.append(f"| {t['a']} | {t['b']} | {per_seed} | {t['a_only']} / {t['b_only']} |")
    curves = report.get("files", {}).get("curves", [])
    if curves:
        lines += ["", "## Curves (mean over seeds, band ± sd)", ""]
        lines += [f"![{Path(p).stem}]({Path(p).name})" for p in curves]
    return "\n".join(lines)


def category_table(policies: dict[str, Any]) -> list[str]:
    """Markdown lines: each policy's success per task category (mean ± sd over seeds, then per seed), when
    the panel has more than one category: a policy that learned one category's answer for all shows there."""
    names = sorted({c for row in policies.values() for c in row["categories"] if c != "all"})
    if len(names) < 2:
        return []
    lines = ["", "Per category (success mean ± sd over seeds; per seed):", "",
             "| policy | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for name, row in policies.items():
        seeds = [r["seed"] for r in row["per_seed"]]  # the order of the runs aggregate_runs was given
        cells = []
        for c in names:
            r = row["categories"].get(c)
            per_seed = " ".join(f"s{s} {v:.2f}" for s, v in zip(seeds, r["success_per_run"])) if r else ""
            cells.append("" if r is None else f"{r['success_mean']:.3f} ± {r['success_sd']:.3f} ({per_seed})")
        lines.append(f"| {POLICY_LABELS.get(name, f'`{name}`')} | " + " | ".join(cells) + " |")
    return lines


def plot_curves(experiment: Experiment) -> list[Path]:
    """``curves_<metric>.png`` of the experiment's finished arms (:func:`plot_histories`)."""
    histories = {arm: [read_metrics(u.run_dir) for u in experiment.units() if u.arm == arm and u.done()]
                 for arm in experiment.arms}
    return plot_histories(histories, experiment.base.env_id, experiment.out)


def plot_histories(histories: dict[str, list[list[dict[str, Any]]]], env_id: str, out: Path) -> list[Path]:
    """``curves_<metric>.png`` in ``out`` for each of :data:`CURVE_KEYS` some arm logged: per arm (its seeds'
    per-iteration metrics), the mean over seeds at each iteration with a ± sd band. Returns the files written."""
    keys = [k for k in CURVE_KEYS if any(k in m for runs in histories.values() for run in runs for m in run)]
    if not keys:
        return []
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    written = []
    for key in keys:
        fig, ax = plt.subplots(figsize=(6, 4))
        for arm, runs in histories.items():
            by_iteration: dict[int, list[float]] = {}
            for run in runs:
                for m in run:
                    if isinstance(m.get(key), (int, float)):
                        by_iteration.setdefault(int(m["iteration"]), []).append(float(m[key]))
            if not by_iteration:
                continue
            its = sorted(by_iteration)
            mean = [sum(by_iteration[i]) / len(by_iteration[i]) for i in its]
            sd = [sample_sd(by_iteration[i]) for i in its]
            (line,) = ax.plot([i + 1 for i in its], mean, marker="o", label=arm)
            ax.fill_between([i + 1 for i in its], [m - s for m, s in zip(mean, sd)], [m + s for m, s in zip(mean, sd)],
                            color=line.get_color(), alpha=0.2)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("Stage 2 iteration")
        ax.set_ylabel(key)
        ax.set_title(f"{env_id}: {key}")
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out / f"curves_{key}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written
