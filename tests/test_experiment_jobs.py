"""seed-train experiment --jobs N: units in N worker processes. Each unit runs once; a seed's arms wait for its
Stage 1 to have trained and then run side by side; a failed worker stops the others after their unit; and the
units' outcomes are those of the one-after-another run (the same seeds, the same per-episode results)."""
from __future__ import annotations

import json
import threading
import time

import pytest
import toy_env  # noqa: F401  (registers test/Echo-v0)

from seed_train.config import SeedConfig
from seed_train.experiment import Experiment, Unit, WorkerFailed
from wrappers import read_trajectories

ARMS = ("sft-grpo", "seed")
pytestmark = pytest.mark.usefixtures("keep_torch_rng")


def _base(tiny_path: str, **extra) -> SeedConfig:
    return SeedConfig(env_id="test/Echo-v0", model=tiny_path, lora=False, template="compact", history=0,
                      action_format="plain", max_new_tokens=4, skill_max_new_tokens=8, analyzer_retries=0,
                      stage1_demos=4, stage1_epochs=1, iterations=1, tasks_per_iteration=2, group_size=2,
                      kl_coef=0.0, eval_limit=4, threads=1, **extra)


class TimedUnits(Experiment):
    """Units that sleep instead of training; Stage 1 marks its training finished after ``unit_s`` (as the
    trainer's run/results.json does before the unit's evaluation) and evaluates for 3 ``unit_s``. The base
    model takes 2 ``unit_s``: its worker is free a clear ``unit_s`` after Stage 1 has trained, so it takes the
    seed's first arm, not the next seed's Stage 1 (with equal times the two raced, and lost under load). An arm
    takes 4, outlasting Stage 1's evaluation. A unit named in ``fail`` raises. Module level, so a spawned
    worker unpickles it."""

    unit_s: float = 0.4
    fail: tuple[str, ...] = ()

    def run_unit(self, unit: Unit, say=print):
        if unit.done():  # an added panel: evaluated from the unit's saved policy (here: a sleep)
            result = json.loads(unit.results_path.read_text())
            time.sleep(self.unit_s)
            result["evals"].update({split: {} for split in self.missing_splits(unit)})
            result["panel_worker"] = threading.current_thread().name
            unit.results_path.with_suffix(".tmp").write_text(json.dumps(result))
            unit.results_path.with_suffix(".tmp").replace(unit.results_path)
            return
        say(f"start {time.time():.3f}")
        if unit.label in self.fail:
            raise RuntimeError(f"{unit.label} breaks")
        log = {"label": unit.label, "start": time.time(), "worker": threading.current_thread().name}
        time.sleep(self.unit_s * {"before": 2, "stage1": 1, "arm": 4}[unit.kind])
        if unit.kind == "stage1":
            unit.run_dir.mkdir(parents=True, exist_ok=True)
            # Timed before the file appears: a worker polling for it may start an arm before this thread runs
            # again (a timestamp taken after the write failed CI once, the arm's start 1 ms before it).
            log["trained"] = time.time()
            (unit.run_dir / "results.json").write_text("{}")
            time.sleep(3 * self.unit_s)  # its evaluation
        log["end"] = time.time()
        tmp = unit.results_path.with_suffix(".tmp")  # whole, as the experiment's own: the other worker reads it
        tmp.write_text(json.dumps({"seconds": log["end"] - log["start"], "log": log,
                                   "evals": {split: {} for split in self.splits}}))
        tmp.replace(unit.results_path)

    def report(self):
        return {"units": sorted(u.label for u in self.units() if u.done())}


def _logs(experiment: Experiment) -> dict[str, dict]:
    return {u.label: json.loads(u.results_path.read_text())["log"] for u in experiment.units() if u.done()}


def _two_worker_threads(experiment: Experiment) -> tuple[list[str], dict[str, int]]:
    """``experiment``'s units taken by workers ``w1`` and ``w2`` (threads: one process, the same locks):
    their lines, each prefixed with the worker's name, and the number of units each ran."""
    lines: list[str] = []
    ran: dict[str, int] = {}
    workers = [threading.Thread(target=lambda n=n: ran.update({n: experiment.run_worker(
        say=lambda line: lines.append(f"{n} {line}"), poll_s=0.02, jobs=2)}), name=n) for n in ("w1", "w2")]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    return lines, ran


def test_workers_take_each_unit_once_and_a_seeds_arms_start_when_its_stage1_has_trained(tmp_path, tiny_path):
    experiment = TimedUnits.plan(_base(tiny_path), ARMS, [0, 1], tmp_path / "exp")
    lines, ran = _two_worker_threads(experiment)
    logs = _logs(experiment)
    assert sorted(logs) == sorted(u.label for u in experiment.units())  # every unit finished
    assert sum(ran.values()) == len(logs) == 8 and ran["w1"] >= 2 and ran["w2"] >= 2  # each exactly once, shared
    assert len([line for line in lines if "     start " in line]) == 8  # the units' own lines, prefixed
    assert sorted(line.split()[0] for line in lines if "     start " in line) == ["w1"] * ran["w1"] + ["w2"] * ran["w2"]
    for seed in (0, 1):
        stage1 = logs[f"seed {seed} Stage 1"]
        arms = [logs[f"seed {seed} arm {arm}"] for arm in ARMS]
        assert all(arm["start"] >= stage1["trained"] for arm in arms)  # never before Stage 1's weights exist
    # Seed 0: the arms start while Stage 1 is still evaluating (the worker that did not run it was free), and
    # the seed's two arms run at the same time on the two workers.
    first = [logs[f"seed 0 arm {arm}"] for arm in ARMS]
    assert min(arm["start"] for arm in first) < logs["seed 0 Stage 1"]["end"]
    assert max(arm["start"] for arm in first) < min(arm["end"] for arm in first)
    assert {arm["worker"] for arm in first} == {"w1", "w2"}
    done_lines = [line for line in lines if ": done in " in line]
    # Two workers ending at the same moment may print their lines in either order, and both may count the
    # other's unit already finished: at least one line, not necessarily the last, says the run has ended.
    assert len(done_lines) == 8 and any("8/8 units finished, ETA 0s over 2 workers" in line for line in done_lines)
    # The base model's evaluation ends first, with Stage 1 and the arms not yet timed: no estimate, not a guess.
    assert "seed 0 before training: done" in done_lines[0]
    assert done_lines[0].endswith("units finished, ETA not known until a unit of each kind left has finished once")
    # A second pass finds nothing to do.
    assert experiment.run_worker(say=lines.append, poll_s=0.02) == 0
    # The order free workers take units in: per seed Stage 1, the base model, the arms as given.
    assert [u.label for u in experiment.claim_order()][:5] == ["seed 0 Stage 1", "seed 0 before training",
                                                               "seed 0 arm sft-grpo", "seed 0 arm seed",
                                                               "seed 1 Stage 1"]


def test_workers_evaluate_a_panel_added_to_finished_units_once_each(tmp_path, tiny_path):
    import dataclasses

    experiment = TimedUnits.plan(_base(tiny_path), ARMS, [0], tmp_path / "exp", splits=("unseen",))
    experiment.unit_s = 0.05
    assert experiment.run_worker(say=lambda line: None, poll_s=0.02) == 4
    wider = dataclasses.replace(experiment, splits=("unseen", "test"))
    assert all(wider.missing_splits(u) == ("test",) for u in wider.units())
    lines, ran = _two_worker_threads(wider)
    results = [json.loads(u.results_path.read_text()) for u in wider.units()]
    assert sum(ran.values()) == 4 and ran["w1"] >= 1 and ran["w2"] >= 1  # each unit once, shared
    assert all(sorted(r["evals"]) == ["test", "unseen"] for r in results)
    assert sorted(r["panel_worker"] for r in results) == sorted(["w1"] * ran["w1"] + ["w2"] * ran["w2"])
    assert sum("evaluating on the added panel(s) test" in line for line in lines) == 4
    assert not any(wider.pending(u) for u in wider.units())


def test_the_eta_schedules_the_units_left_on_the_workers_as_they_take_them(tmp_path):
    """search QA seed 6 with --jobs 2 (docs/results.md): Stage 1 trained in 830 s and evaluated to 1,085 s,
    the base model 178 s, the arms 1,128 / 1,715 / 1,570 s in --arms order. By hand: w1 Stage 1 0-1,085;
    w2 base 0-178, then idle until Stage 1 has trained (830), sft-grpo 830-1,958; w1 seed 1,085-2,800; w2
    seed-wrong-rule 1,958-3,528. The run took 3,538 s; the old estimate (mean unit time x units / workers)
    could not see the wait."""
    from seed_train.experiment import schedule_end

    folder = tmp_path / "seed6"
    stage1, before = Unit("stage1", 6, folder / "stage1"), Unit("before", 6, folder / "before")
    arms = [Unit("arm", 6, folder / arm, arm) for arm in ("sft-grpo", "seed", "seed-wrong-rule")]
    times = {"stage1": [(1085.0, 830.0)], "before": [(178.0, 178.0)], "sft-grpo": [(1128.0, 1128.0)],
             "seed": [(1715.0, 1715.0)], "seed-wrong-rule": [(1570.0, 1570.0)]}
    assert schedule_end([stage1, before, *arms], {}, times, jobs=2) == pytest.approx(3528.0)
    assert schedule_end([stage1, before, *arms], {}, times, jobs=1) == pytest.approx(1085 + 178 + 1128 + 1715 + 1570)
    # Stage 1 has run 600 s on another worker: the arms are ready 230 s from now; this worker runs the base
    # model (0-178), waits, sft-grpo 230-1,358; the other ends Stage 1 at 485 and takes seed 485-2,200;
    # seed-wrong-rule 1,358-2,928.
    assert schedule_end([before, *arms], {stage1: 600.0}, times, jobs=2) == pytest.approx(2928.0)
    # Stage 1 trained (its run's results.json): the arms are ready at once.
    assert schedule_end(arms, {}, times, jobs=2, trained={6}) == pytest.approx(1128 + 1570)
    # An arm with no time yet takes the mean of the arms run.
    arm_times = {"arm": [(1000.0, 1000.0), (2000.0, 2000.0)]}
    assert schedule_end(arms[:1], {}, arm_times, jobs=2, trained={6}) == pytest.approx(1500.0)
    # A kind with no finished unit has no estimate (the base model's 3 minutes say nothing of Stage 1's 18).
    assert schedule_end([before], {stage1: 60.0}, {"before": [(178.0, 178.0)]}, jobs=2) is None
    assert schedule_end([before], {}, {"stage1": [(60.0, 50.0)]}, jobs=1) is None
    assert schedule_end([before], {}, {}, jobs=2) is None
    assert schedule_end([], {}, times, jobs=2) == 0.0  # nothing left


def test_the_eta_counts_a_unit_another_live_process_holds(tmp_path, tiny_path):
    import os

    experiment = TimedUnits.plan(_base(tiny_path), ("sft-grpo",), [0], tmp_path / "exp")
    stage1, before, arm = experiment.claim_order()
    stage1.folder.mkdir(parents=True)
    stage1.lock_path.write_text(f"pid {os.getppid()}")  # a live process that is not this one
    os.utime(stage1.lock_path, (time.time() - 600, time.time() - 600))  # held for 600 s
    times = [(1085.0, 830.0)]
    for u in (before, arm):
        u.folder.mkdir(parents=True)
    before.results_path.write_text(json.dumps({"seconds": 178.0, "evals": {s: {} for s in experiment.splits}}))
    arm_times = {"stage1": times, "sft-grpo": [(1128.0, 1128.0)]}
    # This worker waits 230 s for Stage 1's weights, then runs the arm: 1,358 s.
    assert experiment.eta_seconds(arm_times, jobs=2) == pytest.approx(1358.0, abs=5)
    # A holder that has died: Stage 1 is queued again; one worker runs it (0-1,085), the other the arm from
    # Stage 1's training time on (830-1,958).
    stage1.lock_path.write_text("pid 999999999")
    assert experiment.eta_seconds(arm_times, jobs=2) == pytest.approx(830 + 1128)


def test_the_eta_counts_the_arms_of_seeds_whose_stage1_finished_before(tmp_path, tiny_path):
    """Arms run after a --baselines-only run (WebShop's, 2026-12-06): every Stage 1 has finished, so none is
    pending. The ETA had taken only pending Stage 1 units as trained, so it never scheduled those arms ("ETA
    0s" with 8 arms to go). By hand, in claim order on 2 workers: s0 sft-grpo 0-1,128 and s0 seed 0-1,715,
    then s1 sft-grpo 1,128-2,256 and s1 seed 1,715-3,430."""
    from seed_train.experiment import schedule_end

    experiment = TimedUnits.plan(_base(tiny_path), ("sft-grpo", "seed"), [0, 1], tmp_path / "exp")
    for unit in experiment.units():
        if unit.kind != "arm":
            unit.run_dir.mkdir(parents=True)
            (unit.run_dir / "results.json").write_text("{}")  # (Stage 1's: trained)
            unit.results_path.write_text(json.dumps({"seconds": 1.0, "evals": {s: {} for s in experiment.splits}}))
    times = {"stage1": [(1085.0, 830.0)], "before": [(178.0, 178.0)], "sft-grpo": [(1128.0, 1128.0)],
             "seed": [(1715.0, 1715.0)]}
    assert experiment.eta_seconds(times, jobs=2) == pytest.approx(3430.0)
    assert experiment.eta_seconds(times, jobs=1) == pytest.approx(2 * (1128 + 1715))
    # An arm whose Stage 1 is nowhere (neither trained, running nor queued) has no estimate, not 0.
    arm = experiment.claim_order()[2]
    assert schedule_end([arm], {}, times, jobs=2) is None


def test_the_eta_takes_off_what_a_resumed_arm_has_trained(tmp_path, tiny_path):
    """An arm interrupted after a checkpoint resumes from it: the ETA counts the iterations the checkpoint keeps
    (their logged iteration_s) as done, for a queued arm and for one another process has resumed. ALFWorld's
    seed-wrong-rule (2026-12-06) resumed with 2 of its 4 iterations kept; the ETA had counted it whole."""
    import os

    from seed_train.experiment import schedule_end

    folder = tmp_path / "seed6"
    arms = [Unit("arm", 6, folder / arm, arm) for arm in ("sft-grpo", "seed", "seed-wrong-rule")]
    times = {"sft-grpo": [(1128.0, 1128.0)], "seed": [(1715.0, 1715.0)], "seed-wrong-rule": [(1570.0, 1570.0)]}
    # By hand: w1 sft-grpo 0-1,128, w2 seed 0-1,715, then w1 the wrong-rule arm's 1,570 - 570 s: 1,128-2,128.
    assert schedule_end(arms, {}, times, jobs=2, trained={6}, done={arms[2]: 570.0}) == pytest.approx(2128.0)
    assert schedule_end(arms, {}, times, jobs=2, trained={6}) == pytest.approx(1128 + 1570)

    experiment = TimedUnits.plan(_base(tiny_path), ("sft-grpo", "seed"), [0], tmp_path / "exp")
    for unit in experiment.units():
        if unit.kind != "arm":
            unit.run_dir.mkdir(parents=True)
            (unit.run_dir / "results.json").write_text("{}")  # (Stage 1's: trained)
            unit.results_path.write_text(json.dumps({"seconds": 1.0, "evals": {s: {} for s in experiment.splits}}))
    arm = next(u for u in experiment.units() if u.arm == "seed")
    checkpoint = arm.run_dir / "checkpoints" / "iter0000"
    checkpoint.mkdir(parents=True)
    (checkpoint / "meta.json").write_text(json.dumps({"iteration": 0}))
    # Iteration 0 is kept (500 s); iteration 1 ran past the checkpoint and is lost: it is redone.
    (arm.run_dir / "metrics.jsonl").write_text("".join(json.dumps({"iteration": i, "iteration_s": t}) + "\n"
                                                       for i, t in ((0, 500.0), (1, 700.0))))
    times = {"stage1": [(1085.0, 830.0)], "before": [(178.0, 178.0)], "sft-grpo": [(1128.0, 1128.0)],
             "seed": [(3000.0, 3000.0)]}
    assert experiment.eta_seconds(times, jobs=1) == pytest.approx(1128 + 3000 - 500)
    assert experiment.eta_seconds(times, jobs=2) == pytest.approx(3000 - 500)
    # Another live process holds it, resumed from that checkpoint 100 s ago: 3,000 - 600 s left, beside this
    # worker's sft-grpo (0-1,128).
    (arm.run_dir / "config.json").write_text(json.dumps({"resume": str(checkpoint)}))
    arm.folder.mkdir(parents=True, exist_ok=True)
    arm.lock_path.write_text(f"pid {os.getppid()}")
    os.utime(arm.lock_path, (time.time() - 100, time.time() - 100))
    assert experiment.eta_seconds(times, jobs=2) == pytest.approx(2400.0, abs=5)
    # The holder started afresh (no resume): its lock's age alone.
    (arm.run_dir / "config.json").write_text(json.dumps({"resume": None}))
    assert experiment.eta_seconds(times, jobs=2) == pytest.approx(2900.0, abs=5)


def test_a_unit_evaluated_after_its_trainer_died_counts_the_training_its_files_show(tmp_path):
    """finished_training_seconds, worked by hand: the trainer's `seconds` plus the iterations it resumed from;
    a run from before the trainer wrote `seconds`: its logged iterations; a resume checkpoint gone or a config.json
    unreadable: the trainer's `seconds` alone (an estimate must not stop an evaluation); nothing to go by: None.
    ALFWorld seed 1's sft-grpo (2026-12-06), trained in one session and evaluated in the next, had recorded its
    evaluation only."""
    from seed_train.experiment import finished_training_seconds

    run = tmp_path / "run"
    checkpoint = run / "checkpoints" / "iter0001"
    checkpoint.mkdir(parents=True)
    (checkpoint / "meta.json").write_text(json.dumps({"iteration": 1}))
    (run / "metrics.jsonl").write_text("".join(json.dumps({"iteration": i, "iteration_s": t}) + "\n"
                                               for i, t in ((0, 400.0), (1, 300.0), (2, 250.0), (3, 200.0))))
    (run / "results.json").write_text(json.dumps({"after": {}}))  # trained before the trainer wrote `seconds`
    assert finished_training_seconds(run) == pytest.approx(1150.0)
    (run / "results.json").write_text(json.dumps({"after": {}, "seconds": 480.0}))
    (run / "config.json").write_text(json.dumps({"resume": None}))  # one process trained it all
    assert finished_training_seconds(run) == pytest.approx(480.0)
    (run / "config.json").write_text(json.dumps({"resume": str(checkpoint)}))  # iterations 0-1 kept from before
    assert finished_training_seconds(run) == pytest.approx(480.0 + 400.0 + 300.0)
    (checkpoint / "meta.json").unlink()  # that checkpoint deleted since
    assert finished_training_seconds(run) == pytest.approx(480.0)
    (run / "config.json").write_text("{not json")
    assert finished_training_seconds(run) == pytest.approx(480.0)
    # A Stage 1 run from before `seconds`: no iterations logged, so its time is not known (None), not 0.
    stage1 = tmp_path / "stage1"
    stage1.mkdir()
    (stage1 / "results.json").write_text(json.dumps({"after_stage1": {}}))
    assert finished_training_seconds(stage1) is None


def test_the_eta_reads_an_earlier_runs_unit_times_until_the_folder_has_its_own(tmp_path, tiny_path):
    """--times-from: a record's unit times (records.recorded_times) give the ETA before this run has timed any
    unit. By hand, one seed on 2 workers: Stage 1 0-1,085 (trained at 830), the base model 0-178, sft-grpo
    830-1,958 (its worker idles until Stage 1 has trained), seed 1,085-2,800; on one worker, their sum, 4,106."""
    times = {"stage1": [(1085.0, 830.0)], "before": [(178.0, 178.0)], "sft-grpo": [(1128.0, 1128.0)],
             "seed": [(1715.0, 1715.0)], "arm": [(1128.0, 1128.0), (1715.0, 1715.0)]}
    experiment = TimedUnits.plan(_base(tiny_path), ARMS, [0], tmp_path / "exp")
    assert experiment.eta_seconds(experiment.unit_times(), jobs=2) is None  # nothing timed, nothing given
    experiment.prior_times = times
    assert experiment.eta_seconds(experiment.unit_times(), jobs=2) == pytest.approx(2800.0)
    assert experiment.eta_seconds(experiment.unit_times(), jobs=1) == pytest.approx(4106.0)
    experiment.unit_s = 0.02
    lines: list[str] = []
    experiment.run(say=lines.append)
    assert lines[0] == "4 unfinished units, ETA 1h08m26s (from the unit times of --times-from)"
    own = experiment.unit_times()  # the folder's own times replace the given ones, key by key
    assert set(own) == set(times) and all(seconds < 60 for pairs in own.values() for seconds, _ in pairs)
    assert lines[-1].startswith("[4/4] seed 0 arm seed: done in ") and lines[-1].endswith(", ETA 0s")


def test_baselines_only_workers_run_each_seeds_base_model_and_stage1_and_no_arm(tmp_path, tiny_path):
    import dataclasses

    experiment = dataclasses.replace(TimedUnits.plan(_base(tiny_path), ARMS, [0, 1], tmp_path / "exp"),
                                     baselines_only=True)
    experiment.unit_s = 0.05
    ran = [experiment.run_worker(say=lambda line: None, poll_s=0.02, jobs=1)]
    assert ran == [4] and [u.label for u in experiment.claim_order()] == [
        "seed 0 Stage 1", "seed 0 before training", "seed 1 Stage 1", "seed 1 before training"]
    assert sorted(_logs(experiment)) == ["seed 0 Stage 1", "seed 0 before training", "seed 1 Stage 1",
                                         "seed 1 before training"]  # every baseline, no arm
    assert [u.label for u in experiment.units() if not u.done()] == [f"seed {s} arm {a}" for s in (0, 1) for a in ARMS]


def test_worker_processes_write_the_report_and_a_failure_stops_the_others_until_a_rerun(tmp_path, tiny_path):
    out = tmp_path / "exp"
    experiment = TimedUnits.plan(_base(tiny_path), ARMS, [0, 1], out)
    experiment.unit_s, experiment.fail = 0.2, ("seed 0 arm seed",)
    lines: list[str] = []
    with pytest.raises(WorkerFailed, match="rerun the same command to resume"):
        experiment.run_parallel(2, say=lines.append, poll_s=0.05)
    assert lines[0] == "8 unfinished units over 2 worker processes (1 torch thread(s) each)"
    assert any(line.endswith("failed (exit code 1); the other workers stop after their current unit")
               for line in lines)
    done = {u.label for u in experiment.units() if u.done()}
    assert "seed 0 arm seed" not in done and "seed 1 arm seed" not in done  # the others stopped after their unit
    assert {"seed 0 Stage 1", "seed 0 before training"} <= done
    before_rerun = {label: log["start"] for label, log in _logs(experiment).items()}
    experiment.fail = ()
    report = experiment.run_parallel(2, say=lines.append, poll_s=0.05)  # the rerun runs only what is left
    assert report == {"units": sorted(u.label for u in experiment.units())}
    after = _logs(experiment)
    assert {label: after[label]["start"] for label in before_rerun} == before_rerun  # finished units kept
    assert min(after[label]["start"] for label in after if label not in before_rerun) > max(before_rerun.values())


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_workers_end_when_the_experiment_process_is_killed(tmp_path, tiny_path, sigint):
    """kill -9 of the experiment's process leaves no worker running (an orphaned worker once went on to finish
    two more units on cores its user had freed), also where the command was started in the background by a
    shell, which makes it ignore SIGINT (how the first version of the watch failed in CI)."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    exp = tmp_path / "exp"
    script = (f"import signal, sys; sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
              + ("signal.signal(signal.SIGINT, signal.SIG_IGN)\n" if sigint == "ignored" else "") +
              "from test_experiment_jobs import ARMS, TimedUnits, _base\n"
              f"e = TimedUnits.plan(_base({tiny_path!r}), ARMS, [0], {str(exp)!r})\n"
              "e.unit_s = 120.0\n"
              "e.run_parallel(2, say=print, poll_s=0.05)\n")
    with open(tmp_path / "out.txt", "w") as out:
        parent = subprocess.Popen([sys.executable, "-c", script], stdout=out, stderr=subprocess.STDOUT)
    locks = [exp / "seed0" / unit / ".unit.lock" for unit in ("stage1", "before")]
    deadline = time.time() + 120
    while not all(lock.is_file() and lock.read_text().startswith("pid ") for lock in locks):
        assert parent.poll() is None and time.time() < deadline, (tmp_path / "out.txt").read_text()
        time.sleep(0.2)
    workers = [int(lock.read_text().split()[1]) for lock in locks]
    assert parent.pid not in workers and len(set(workers)) == 2

    def running(pid: int) -> bool:  # (an orphan that has exited may stay a zombie until PID 1 reaps it)
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (FileNotFoundError, ProcessLookupError):
            return False

    assert all(running(pid) for pid in workers)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.time() + 20
    while any(running(pid) for pid in workers) and time.time() < deadline:
        time.sleep(0.2)
    assert not any(running(pid) for pid in workers)  # long before their 120 s units would have ended
    assert not any((exp / "seed0" / unit / "results.json").exists() for unit in ("stage1", "before", *ARMS))
    assert (tmp_path / "out.txt").read_text().count("the experiment's process has ended") == 2


def test_jobs_2_gives_each_unit_the_outcomes_of_the_run_one_after_another(tmp_path, tiny_path, capfd):
    """The real trainer in two worker processes: every unit's evaluation plays the same episodes with the same
    outcomes as the same experiment run in one process, and the seed's Stage 1 weights are the same."""
    from seed_train.cli import main_train

    argv = ["experiment", "--env-id", "test/Echo-v0", "--model", tiny_path, "--no-lora", "--template", "compact",
            "--history", "0", "--action-format", "plain", "--max-new-tokens", "4", "--skill-max-new-tokens", "8",
            "--analyzer-retries", "0", "--stage1-demos", "4", "--stage1-epochs", "1", "--iterations", "1",
            "--tasks-per-iteration", "2", "--group-size", "2", "--lr", "3e-3", "--kl-coef", "0", "--eval-limit", "4",
            "--threads", "1", "--arms", *ARMS, "--seeds", "0"]
    assert main_train([*argv, "--output-dir", str(tmp_path / "one")]) == 0
    capfd.readouterr()
    assert main_train([*argv, "--output-dir", str(tmp_path / "two"), "--jobs", "2"]) == 0
    out, err = capfd.readouterr()  # (the workers write to the file descriptors)
    bars = [piece for piece in err.replace("\r", "\n").splitlines() if "Writing model shards" in piece]
    assert bars and all(piece.startswith(("w1 ", "w2 ")) for piece in bars)  # the workers' progress bars too
    assert "4 unfinished units over 2 worker processes" in out
    # Every line a worker prints names it, the evaluations' progress included.
    assert all(line.startswith(("w1 ", "w2 ")) for line in out.splitlines()[1:] if line and "report:" not in line)
    assert "evaluating before training: test/Echo-v0 unseen, 4 episodes" in out
    assert "seed 0 arm seed: done in" in out and "4/4 units finished, ETA 0s over 2 workers" in out
    for unit in ("before", "stage1", *ARMS):
        stage = {"before": "before", "stage1": "after_stage1"}.get(unit, "after")
        for split in ("unseen", "test"):
            files = [tmp_path / run / "seed0" / unit / f"eval_{stage}_{split}.trajectories.jsonl" for run in ("one", "two")]
            plays = [[(t.task_id, t.seed, t.success, [s.action for s in t.steps]) for t in read_trajectories(f)]
                     for f in files]
            assert plays[0] == plays[1] and len(plays[0]) == 4, (unit, split)
    weights = [(tmp_path / run / "seed0" / "stage1" / "run" / "checkpoints" / "stage1.safetensors").read_bytes()
               for run in ("one", "two")]
    assert weights[0] == weights[1]
    reports = [json.loads((tmp_path / run / "report.json").read_text()) for run in ("one", "two")]
    assert reports[1]["unfinished"] == [] and reports[0]["splits"] == reports[1]["splits"]


def test_jobs_below_one_is_refused_naming_the_flag(tiny_path, capsys):
    from seed_train.cli import main_train

    assert main_train(["experiment", "--env-id", "test/Echo-v0", "--model", tiny_path, "--jobs", "0"]) == 2
    assert "--jobs must be at least 1, got 0" in capsys.readouterr().err


def test_a_workers_stream_prefixes_every_line_and_every_rewrite():
    import io

    from seed_train.experiment import LinePrefix

    sink = io.StringIO()
    stream = LinePrefix(sink, "w2 ")
    stream.write("one\ntw")
    stream.write("o\n")
    stream.write("3/4\r4/4\n\nlast")
    # tqdm opens each redraw with a bare carriage return: no prefix of its own (a log file read raw showed
    # "w1 w1 Loading weights"), the text after it gets one.
    stream.write("\n\rLoading 0%\rLoading 9%")
    assert sink.getvalue() == "w2 one\nw2 two\nw2 3/4\rw2 4/4\n\nw2 last\n\rw2 Loading 0%\rw2 Loading 9%"
