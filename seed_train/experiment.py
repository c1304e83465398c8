"""``seed-train experiment``: arms x training seeds on one env, paired and resumable.

    seed-train experiment --env-id seed/EZPoints-v0 --arms grpo sft-grpo seed seed-shuffled \\
        --seeds 0 1 2 --output-dir runs/exp --iterations 4 --group-size 4

Every flag but ``--arms``, ``--seeds`` and ``--splits`` sets the base config; an arm is a named set of
overrides of it (:data:`seed_train.arms.ARMS`). The work is cut into units, each with its own folder under the
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
from typing import Any

from seed_train.arms import MANAGED_FIELDS, arm_overrides, is_arm, stage2_start, uses_opd, uses_stage1
from seed_train.config import SeedConfig, field_default
from seed_train.experiment_report import plot_histories, recorded_decoding, report_from_results, report_markdown
from seed_train.logs import read_metrics
from seed_train.preflight import check_skill_source
from seed_train.progress import clock

DEFAULT_SPLITS = ("unseen", "test")
#: How an evaluation's progress lines name the policy (the unit's own line names the seed and the arm).
EVAL_LABELS = {"before": "before training", "after_stage1": "after Stage 1", "after": "after Stage 2"}

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
        from seed_train.records import versions  # (records imports this module)

        old = read_json_file(path) if path.is_file() else {"arms": [], "seeds": []}
        # Each command with the versions it ran with (Python, libraries, seed-gym commit): a record made
        # later, by other code, says what produced its units (folders started before 2026-12-07 lack them).
        run = [{"command": list(self.command), "versions": versions()}] if self.command else []
        tmp = path.with_name(f"experiment.json.tmp{os.getpid()}")
        tmp.write_text(json.dumps({
            "config": self.common_config(), "splits": list(dict.fromkeys([*old.get("splits", []), *self.splits])),
            "arms": list(dict.fromkeys([*old["arms"], *self.arms])),
            "seeds": list(dict.fromkeys([*old["seeds"], *self.seeds])),
            "overrides": {a: arm_overrides(a) for a in dict.fromkeys([*old["arms"], *self.arms]) if is_arm(a)},
            "commands": [*old.get("commands", []), *([list(self.command)] if self.command else [])],
            "runs": [*old.get("runs", []), *run],
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
        # A resumed arm has run, besides its holder's time (its lock's age), the iterations its checkpoint kept.
        running = {u: now - u.lock_path.stat().st_mtime + trained_earlier(u, held=True)
                   for u in pending if _held_elsewhere(u)}
        queue = [u for u in pending if u not in running]
        # Seeds whose Stage 1 has trained: finished ones (not pending) too, or their arms would never be ready.
        trained = {u.seed for u in self.units() if u.kind == "stage1" and (u.run_dir / "results.json").is_file()}
        return schedule_end(queue, running, durations, jobs, trained,
                            needs_stage1=lambda u: u.kind == "arm" and uses_stage1(self.base, u.arm),
                            done={u: seconds for u in queue if (seconds := trained_earlier(u, held=False))})

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
        # A resumed arm's iterations trained by the interrupted process(es); None: trained earlier, time unknown.
        earlier: float | None = 0.0
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
                if cfg.resume:
                    earlier = kept_iterations_seconds(unit.run_dir, Path(cfg.resume))
                    result["resumed"] = {"from": Path(cfg.resume).name, "earlier_seconds": earlier}
                train(cfg, say=say)
            else:  # trained by a process that did not live to evaluate it: that training's time, from its files
                earlier = finished_training_seconds(unit.run_dir)
                if earlier is None:  # no time in its files: train_seconds left out rather than said ~0
                    say(f"    its training time is not in {unit.run_dir}: its times count the evaluation only")
                else:
                    result["resumed"] = {"from": "final", "earlier_seconds": earlier}
            if earlier is not None:
                result["train_seconds"] = time.perf_counter() - t0 + earlier
            result["train"] = read_json_file(unit.run_dir / "results.json")
            model, stage = unit.run_dir / "final", ("after_stage1" if unit.kind == "stage1" else "after")
            if unit.kind == "arm":
                result["overrides"] = arm_overrides(unit.arm)
                result["start"] = stage2_start(unit.arm, self.base.stage1_demos)
        result["evals"] = self.evaluate(model, unit.seed, unit.folder, stage)
        result["seconds"] = time.perf_counter() - t0 + (earlier or 0.0)
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


def kept_iterations_seconds(run_dir: Path, checkpoint: Path) -> float:
    """The logged time (``iteration_s``) of the iterations a resume from ``checkpoint`` keeps: what the
    interrupted process(es) spent on them. A resumed unit adds it to its ``seconds`` and ``train_seconds``,
    so that they say what the unit took as if it had run in one go (an ETA reads them), not what the last
    process took; the lost work after the checkpoint and the earlier processes' start-up are not counted."""
    from seed_train.checkpoint import read_checkpoint_meta

    last = int(read_checkpoint_meta(checkpoint)["iteration"])
    return sum(float(m.get("iteration_s", 0.0)) for m in read_metrics(run_dir) if m["iteration"] <= last)


def resume_kept_seconds(run_dir: Path) -> float:
    """The logged time of the iterations a run's own process resumed with (its config.json ``resume``;
    :func:`kept_iterations_seconds`): 0 for a run started afresh. Raises where the run's files cannot be read."""
    resume = read_json_file(run_dir / "config.json").get("resume")
    return kept_iterations_seconds(run_dir, Path(resume)) if resume else 0.0


def finished_training_seconds(run_dir: Path) -> float | None:
    """What a run's training took, for a unit whose training finished in a process that did not live to evaluate
    it: the trainer's ``seconds`` in its results.json (that process's wall time) plus the iterations kept from
    the checkpoint that process resumed from (:func:`resume_kept_seconds`; not counted where unreadable). A run
    trained before results.json carried ``seconds``: its logged Stage 2 iterations (``iteration_s``), and None
    (not known) where none were logged (a Stage 1 unit)."""
    from seed_train.checkpoint import CheckpointError

    seconds = read_json_file(run_dir / "results.json").get("seconds")
    if not isinstance(seconds, (int, float)):
        logged = [float(m.get("iteration_s", 0.0)) for m in read_metrics(run_dir)]
        return sum(logged) if logged else None
    kept = 0.0
    with contextlib.suppress(CheckpointError, OSError, ValueError, KeyError, TypeError):  # unreadable: not counted
        kept = resume_kept_seconds(run_dir)
    return float(seconds) + kept


def trained_earlier(unit: Unit, *, held: bool) -> float:
    """Seconds of an arm's training that earlier processes did and a resume keeps (:func:`kept_iterations_seconds`):
    for a unit another process holds (``held``), the iterations of the checkpoint it resumed from (its run's
    config.json ``resume``); for a queued one, those of its latest checkpoint. 0 for other units, and where the
    run's files cannot be read (the ETA then counts the unit whole)."""
    if unit.kind != "arm" or not unit.run_dir.is_dir() or (unit.run_dir / "results.json").is_file():
        return 0.0
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError, AttributeError):
        if held:
            return resume_kept_seconds(unit.run_dir)
        latest = latest_checkpoint(unit.run_dir)
        return kept_iterations_seconds(unit.run_dir, latest) if latest else 0.0
    return 0.0


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
                 needs_stage1: Callable[[Unit], bool] = lambda u: u.kind == "arm",
                 done: dict[Unit, float] | None = None) -> float | None:
    """When ``jobs`` workers that take ``queue``'s units in order, each the first one ready when a worker is
    free, have finished them: list scheduling on mean unit times. ``running``: unit -> seconds it has run (on
    another worker); ``durations``: :func:`_durations`; ``trained``: seeds whose Stage 1 has trained (their
    arms are ready); an arm that ``needs_stage1`` is ready once its seed's Stage 1 has run its mean training
    time. An arm not run yet takes the mean of the arms run; None where a unit's kind has no finished unit (a
    base model's evaluation says nothing of Stage 1's time). ``done``: seconds of a queued unit's work that a
    resume keeps (:func:`trained_earlier`), taken off its time."""
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
        seconds = max(0.0, seconds - (done or {}).get(unit, 0.0))
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
        starts={a: stage2_start(a, experiment.base.stage1_demos) for a in experiment.arms},
        has_stage1=any(u.kind == "stage1" for u in units), unfinished=[u.label for u in units if not u.done()])


def plot_curves(experiment: Experiment) -> list[Path]:
    """``curves_<metric>.png`` of the experiment's finished arms (:func:`plot_histories`)."""
    histories = {arm: [read_metrics(u.run_dir) for u in experiment.units() if u.arm == arm and u.done()]
                 for arm in experiment.arms}
    return plot_histories(histories, experiment.base.env_id, experiment.out)
