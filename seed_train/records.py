"""Experiment records: what an experiment measured, small enough to commit, and its report rebuilt from them.

An experiment folder (``seed-train experiment``) holds models, checkpoints and full trajectories: gigabytes
that stay on the machine that ran it. Its *record* is one JSONL file of a few hundred KB at most that
keeps what the conclusions rest on:

- a header line: the env, the base config every unit shared, the evaluated splits and decoding;
- a ``session`` line per time units were added: the date, the command lines, the versions of the code that
  recorded them and, in ``runs`` (folders started since 2026-12-07), each command with the versions it ran with;
- a ``unit`` line per finished unit (seed x before / Stage 1 / arm): per split, every evaluation episode
  as ``[key, category, success, score, length, steps, format_errors]`` (``key`` pairs episodes across
  policies: the task id, ``#sJ`` for sample J), and a final ``1`` for an episode without an outcome (its
  env or endpoint failed: left out of every rate and test); for trained units the per-iteration metrics and every
  skill the run wrote (``skill_texts``, each distinct text once, and per episode ``[iteration, task_id,
  category, success, index into skill_texts or null]``; :func:`unit_skills` expands them), and the unit's
  own values of the operational fields (``operational``: threads, micro-batch size...; units recorded before
  2026-12-05 lack it).

That is the record in memory. On disk (version 2) the strings every unit repeats are stored once, in the
header: ``episodes`` (per split, each ``[key, category]`` the units evaluate) and ``tasks`` (each
``[task_id, category]`` a skill was written for); a unit's episode row is ``[episode index, success, score,
length, steps, format_errors]`` and its skill row ``[iteration, task index, success, text index or null]``.
That cuts a record to about a third (the CodeLock positive control's 52 units: 865 KB as version 1).
Version 1 files (the rows spelled out) are still read; writing one rewrites it as version 2.

``seed-train record EXP_DIR RECORD`` adds the folder's finished units that the record lacks (so seeds run
on a later day, on another machine, append to it; a unit already recorded must give the same outcomes,
which checks that Stage 1 and the evaluations are deterministic per seed); ``seed-train report RECORD``
rebuilds the experiment's report (report.json, report.md, curves) from the record alone, with the same
code the experiment uses (:func:`seed_train.experiment_report.report_from_results`), no model needed.
Every experiment also writes its own folder's record (``record.jsonl``) with each report.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seed_train.arms import stage2_start
from seed_train.experiment import read_json_file  # (experiment imports this module lazily)
from seed_train.experiment_report import plot_histories, recorded_decoding, report_from_results, report_markdown

RECORD_KIND = "seed-gym experiment record"
VERSION = 2
EPISODE_FIELDS = ("key", "category", "success", "score", "length", "steps", "format_errors", "no_outcome")


def _round(value: Any, digits: int = 5) -> Any:
    """Floats to ``digits`` significant digits (records stay small and diff cleanly), recursively."""
    if isinstance(value, float):
        return float(f"{value:.{digits}g}")
    if isinstance(value, dict):
        return {k: _round(v, digits) for k, v in value.items()}
    if isinstance(value, list):
        return [_round(v, digits) for v in value]
    return value


def episode_rows(trajectories: Sequence[Any]) -> list[list[Any]]:
    """The record's rows of an evaluation's trajectories (keys as :func:`seed_train.evaluate.episode_outcomes`)."""
    from seed_train.evaluate import has_outcome

    several = any(t.meta.get("sample", 0) for t in trajectories)
    rows = [[f"{t.task_id}#s{t.meta.get('sample', 0)}" if several else t.task_id, t.category, int(bool(t.success)),
             _round(float(t.score)), int(t.length), len(t.steps), sum(bool(s.format_error) for s in t.steps)]
            for t in trajectories]
    for row, t in zip(rows, trajectories):
        if not has_outcome(t):  # (written only then: the rows of every fault-free evaluation keep their bytes)
            row.append(1)
    return rows


def with_outcome(rows: Sequence[Sequence[Any]]) -> list[Sequence[Any]]:
    """The rows of episodes with an outcome (no trailing ``no_outcome`` flag)."""
    return [r for r in rows if len(r) < 8 or not r[7]]


def summary_of_rows(rows: Sequence[Sequence[Any]]) -> dict[str, Any]:
    """What :func:`seed_train.evaluate.summarize` computes from trajectories, from the record's rows."""
    from seed_train.evaluate import wilson_interval

    groups: dict[str, list[Sequence[Any]]] = defaultdict(list)
    for row in rows:
        groups[row[1]].append(row)
    out = {}
    for name, played in [*sorted(groups.items()), ("all", list(rows))]:
        rs = with_outcome(played)  # rates over the episodes with an outcome
        wins = sum(r[2] for r in rs)
        steps = sum(r[5] for r in rs)
        out[name] = {"episodes": len(played), "successes": wins, "success": wins / len(rs) if rs else 0.0,
                     "ci95": list(wilson_interval(wins, len(rs))),
                     "score": sum(r[3] for r in rs) / len(rs) if rs else 0.0,
                     "length": sum(r[4] for r in rs) / len(rs) if rs else 0.0,
                     "format_error_rate": sum(r[6] for r in rs) / steps if steps else 0.0}
    return {"categories": out}


@dataclass
class Record:
    """A parsed record: header, sessions, and units keyed by (kind, seed, arm)."""

    header: dict[str, Any]
    sessions: list[dict[str, Any]] = field(default_factory=list)
    units: dict[tuple[str, int, str | None], dict[str, Any]] = field(default_factory=dict)

    @property
    def arms(self) -> list[str]:
        return list(dict.fromkeys(k[2] for k in self.units if k[0] == "arm"))

    @property
    def seeds(self) -> list[int]:
        return sorted({k[1] for k in self.units})

    def results(self) -> dict[tuple[str, int, str | None], dict[str, Any]]:
        """Each unit as the experiment's results.json has it (``evals``: per split, summary and outcomes)."""
        return {key: {"evals": {split: {"summary": summary_of_rows(rows),
                                        "tasks": {r[0]: bool(r[2]) for r in with_outcome(rows)}}
                                for split, rows in unit["evals"].items()}}
                for key, unit in self.units.items()}

    def lines(self) -> list[str]:
        """The file's lines (version 2: the header holds the episode and task tables the units index)."""
        episodes: dict[str, dict[tuple[str, str], int]] = defaultdict(dict)
        tasks: dict[tuple[str, str], int] = {}
        for unit in self.units.values():
            for split, rows in unit["evals"].items():
                for row in rows:
                    episodes[split].setdefault((row[0], row[1]), len(episodes[split]))
            for row in unit.get("skills", []):
                tasks.setdefault((row[1], row[2]), len(tasks))
        header = {**self.header, "version": VERSION,
                  "episodes": {split: [list(k) for k in table] for split, table in episodes.items()},
                  "tasks": [list(k) for k in tasks]}
        out = [json.dumps(header, separators=(",", ":"))]
        out += [json.dumps({"session": s}, separators=(",", ":")) for s in self.sessions]
        out += [json.dumps({"unit": _encoded(u, episodes, tasks)}, separators=(",", ":"), ensure_ascii=False)
                for u in self.units.values()]
        return out


def _encoded(unit: dict[str, Any], episodes: dict[str, dict[tuple[str, str], int]],
             tasks: dict[tuple[str, str], int]) -> dict[str, Any]:
    """A unit as a version-2 line holds it: episode and task strings replaced by their header index."""
    out = {**unit, "evals": {split: [[episodes[split][(r[0], r[1])], *r[2:]] for r in rows]
                             for split, rows in unit["evals"].items()}}
    if "skills" in unit:
        out["skills"] = [[r[0], tasks[(r[1], r[2])], r[3], r[4]] for r in unit["skills"]]
    return out


def _decoded(unit: dict[str, Any], header: dict[str, Any]) -> dict[str, Any]:
    """A version-2 unit line expanded back to the in-memory rows (inverse of :func:`_encoded`)."""
    episodes, tasks = header.get("episodes", {}), header.get("tasks", [])
    out = {**unit, "evals": {split: [[*episodes[split][r[0]], *r[1:]] for r in rows]
                             for split, rows in unit["evals"].items()}}
    if "skills" in unit:
        out["skills"] = [[r[0], *tasks[r[1]], r[2], r[3]] for r in unit["skills"]]
    return out


def read_record(path: str | Path) -> Record:
    """Parse a record file; a line that is not JSON names the file and line."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"record {path}: file not found")
    record: Record | None = None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"record {path}:{number}: not JSON ({e.msg})") from None
        if record is None:
            if not isinstance(item, dict) or item.get("record") != RECORD_KIND:
                raise ValueError(f"record {path}:1: not a {RECORD_KIND} (its first line must be the header)")
            if item.get("version", 0) > VERSION:
                raise ValueError(f"record {path}: version {item['version']} is newer than this seed-gym reads ({VERSION})")
            version, header = item.get("version", 1), item
            record = Record({k: v for k, v in item.items() if k not in ("episodes", "tasks")})
        elif "session" in item:
            record.sessions.append(item["session"])
        elif "unit" in item:
            u = item["unit"]
            if version >= 2:
                try:
                    u = _decoded(u, header)
                except (KeyError, IndexError, TypeError):
                    raise ValueError(f"record {path}:{number}: a unit row names an episode or task the header's "
                                     "tables lack") from None
            record.units[(u["kind"], int(u["seed"]), u.get("arm"))] = u
        else:
            raise ValueError(f"record {path}:{number}: neither a session nor a unit line")
    if record is None:
        raise ValueError(f"record {path}: empty file")
    return record


def write_record(record: Record, path: str | Path) -> None:
    """Atomically: a record on disk is always a whole one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # processes sharing an experiment folder each their own
    tmp.write_text("\n".join(record.lines()) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def versions() -> dict[str, str]:
    """Versions that can change a result: Python, torch, transformers, peft, and the seed-gym commit."""
    from importlib import metadata

    out = {"python": platform.python_version()}
    for name in ("torch", "transformers", "peft", "seed-gym"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                                cwd=Path(__file__).resolve().parent)
        if commit.returncode == 0:
            out["commit"] = commit.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return out


def _skills(run_dir: Path) -> tuple[list[str], list[list[Any]]]:
    """The run's distinct skill texts, and per Stage 2 episode ``[iteration, task_id, category, success,
    index of its skill text or None]`` (a static library's few texts are stored once, not per episode)."""
    from wrappers import read_trajectories

    path = run_dir / "trajectories.jsonl"
    if not path.is_file():
        return [], []
    texts: dict[str, int] = {}
    rows = []
    for t in read_trajectories(path):
        if "skill" not in t.meta:
            continue
        skill = t.meta["skill"]
        index = None if skill is None else texts.setdefault(skill, len(texts))
        rows.append([t.meta.get("iteration"), t.task_id, t.category, int(bool(t.success)), index])
    return list(texts), rows


def unit_skills(unit: dict[str, Any]) -> list[list[Any]]:
    """A recorded unit's skills as ``[iteration, task_id, category, success, skill text or None]``."""
    texts = unit.get("skill_texts", [])
    return [[*row[:4], None if row[4] is None else texts[row[4]]] for row in unit.get("skills", [])]


def unit_entry(experiment: Any, unit: Any) -> dict[str, Any]:
    """The record line of one finished unit of ``experiment`` (a :class:`seed_train.experiment.Experiment`)."""
    from seed_train.logs import read_metrics
    from wrappers import read_trajectories

    result = read_json_file(unit.results_path)
    stage = {"before": "before", "stage1": "after_stage1"}.get(unit.kind, "after")
    evals = {}
    for split in experiment.splits:
        path = unit.folder / f"eval_{stage}_{split}.trajectories.jsonl"
        if path.is_file():
            evals[split] = episode_rows(list(read_trajectories(path)))
    entry: dict[str, Any] = {"kind": unit.kind, "seed": unit.seed, "arm": unit.arm,
                             "seconds": round(float(result.get("seconds", 0.0)), 1), "evals": evals}
    # What a later run's ETA reads (recorded_times).
    if "train_seconds" in result:
        entry["train_seconds"] = round(float(result["train_seconds"]), 1)
    if result.get("added_eval_seconds"):
        entry["added_eval_seconds"] = {k: round(float(v), 1) for k, v in result["added_eval_seconds"].items()}
    if result.get("resumed"):  # its times include the earlier process's kept iterations (experiment.run_unit)
        entry["resumed"] = {"from": result["resumed"]["from"],
                            "earlier_seconds": round(float(result["resumed"]["earlier_seconds"]), 1)}
    if unit.kind == "arm":
        entry["overrides"] = result.get("overrides")
    if unit.kind != "before":
        metrics = read_metrics(unit.run_dir)
        entry["metrics"] = _round([{k: v for k, v in m.items() if isinstance(v, (int, float, str)) or v is None}
                                   for m in metrics])
        entry["skill_texts"], entry["skills"] = _skills(unit.run_dir)
        run_config = unit.run_dir / "config.json"
        if run_config.is_file():
            # How this unit computed (threads, micro-batches...), which may differ between units of one
            # experiment: the header's base config holds one process's values only.
            from seed_train.experiment import OPERATIONAL_FIELDS

            config = read_json_file(run_config)
            entry["operational"] = {k: config[k] for k in OPERATIONAL_FIELDS if k in config}
    return entry


def recorded_times(path: str | Path, env_id: str) -> dict[str, list[tuple[float, float]]]:
    """A record's unit times, keyed as an experiment's own finished units (``experiment.add_unit_time``:
    (seconds, seconds until training ended) per arm and per kind, added panels' evaluations apart). A unit
    recorded without ``train_seconds`` counts as training throughout (so an ETA from it errs long). Raises
    ValueError for a record of another env: its times say nothing of this one."""
    from seed_train.experiment import add_unit_time

    record = read_record(path)
    if record.header.get("env_id") != env_id:
        raise ValueError(f"record {path} holds units of {record.header.get('env_id')}, not {env_id}")
    out: dict[str, list[tuple[float, float]]] = {}
    for (kind, _, arm), unit in record.units.items():
        add_unit_time(out, kind, arm, unit)
    return out


def header_of(experiment: Any) -> dict[str, Any]:
    return {"record": RECORD_KIND, "version": VERSION, "env_id": experiment.base.env_id,
            "config": experiment.common_config(), "splits": list(experiment.splits),
            "eval_decoding": recorded_decoding(experiment.base)}


def experiment_from_folder(folder: str | Path) -> Any:
    """The experiment an experiment folder holds (its manifest: base config, arms, seeds, splits)."""
    from seed_train.config import SeedConfig
    from seed_train.experiment import Experiment

    folder = Path(folder)
    manifest_path = folder / "experiment.json"
    if not manifest_path.is_file():
        raise ValueError(f"{folder}: not an experiment folder (no experiment.json)")
    manifest = read_json_file(manifest_path)
    config = {**manifest["config"], "output_dir": str(folder)}
    base = SeedConfig.from_dict({k: v for k, v in config.items() if k not in ("resume", "stage1_from")})
    return Experiment(base, tuple(manifest["arms"]), tuple(manifest["seeds"]), folder, tuple(manifest["splits"]))


def add_units(experiment: Any, record: Record | None) -> tuple[Record, dict[str, int]]:
    """``record`` (a new one when None) with the experiment's finished units it lacks. Raises ValueError when
    the experiment's base config differs from the record's (operational fields aside) or when a unit both
    hold has other evaluation outcomes. Returns the record and counts (added, identical, panels_added:
    recorded units given the evaluation of a panel added since, unfinished)."""
    from seed_train.experiment import mixing_changes

    header = header_of(experiment)
    if record is None:
        record = Record(header)
    else:
        before, now = record.header["config"], header["config"]
        changed = mixing_changes(before, now, record.header["splits"])
        if changed or record.header["env_id"] != header["env_id"]:
            raise ValueError(f"the experiment's base config differs from the record's in {changed or ['env_id']}: "
                             "a record holds one experiment")
        if now.get("panels"):  # (panels only added: the record's config gains them)
            before["panels"] = now["panels"]
        record.header["splits"] = list(dict.fromkeys([*record.header["splits"], *header["splits"]]))
    counts = {"added": 0, "identical": 0, "unfinished": 0, "panels_added": 0}
    for unit in experiment.units():
        if not unit.done():
            counts["unfinished"] += 1
            continue
        key = (unit.kind, unit.seed, unit.arm)
        entry = unit_entry(experiment, unit)
        if key in record.units:
            old = record.units[key]["evals"]
            differ = [s for s in entry["evals"] if s in old and
                      [r[:3] for r in old[s]] != [r[:3] for r in entry["evals"][s]]]
            if differ:
                raise ValueError(f"{unit.label}: the recorded evaluation on {differ} has other outcomes than this "
                                 "folder's: the unit was not reproduced (another config, machine or version?)")
            added = {s: rows for s, rows in entry["evals"].items() if s not in old}
            if added:  # a panel the folder evaluated after the unit was recorded
                old.update(added)
                counts["panels_added"] += 1
            else:
                counts["identical"] += 1
            continue
        record.units[key] = entry
        counts["added"] += 1
    if counts["added"] or counts["panels_added"]:
        manifest = read_json_file(experiment.out / "experiment.json")
        runs = [{"command": portable_command(r["command"], experiment.out), "versions": r["versions"]}
                for r in manifest.get("runs", [])]
        record.sessions.append({"date": datetime.date.today().isoformat(),
                                "commands": [portable_command(c, experiment.out) for c in manifest.get("commands", [])],
                                "versions": versions(), **({"runs": runs} if runs else {}),
                                "units_added": counts["added"],
                                **({"panels_added": counts["panels_added"]} if counts["panels_added"] else {})})
    return record, counts


def portable_command(command: Sequence[str], folder: str | Path) -> list[str]:
    """A command line as a committed record keeps it: no path of the machine that ran it. An argument naming
    the experiment folder (or a path inside it) by an absolute path becomes ``runs/<folder name>/...``
    (where experiments live in a checkout); another absolute path under the working directory becomes
    relative to it."""
    folder = Path(os.path.abspath(folder))
    cwd = Path.cwd()
    out = []
    for arg in command:
        path = Path(arg)
        if path.is_absolute():
            if path == folder or folder in path.parents:
                arg = (Path("runs") / folder.name / path.relative_to(folder)).as_posix()
            elif cwd in path.parents:
                arg = path.relative_to(cwd).as_posix()
        out.append(arg)
    return out


def record_experiment(folder: str | Path, record_path: str | Path) -> dict[str, int]:
    """``seed-train record``: add the experiment folder's finished units to the record file (created if absent)."""
    record_path = Path(record_path)
    experiment = experiment_from_folder(folder)
    record, counts = add_units(experiment, read_record(record_path) if record_path.is_file() else None)
    write_record(record, record_path)
    return counts


def report_from_record(record: Record) -> dict[str, Any]:
    """The experiment report (:func:`seed_train.experiment_report.report_from_results`) from a record alone."""
    config = record.header["config"]
    arms = record.arms
    return report_from_results(
        record.results(), env_id=record.header["env_id"], arms=arms, seeds=record.seeds,
        splits=record.header["splits"], eval_decoding=record.header["eval_decoding"],
        starts={a: stage2_start(a, config["stage1_demos"]) for a in arms},
        has_stage1=any(k[0] == "stage1" for k in record.units), unfinished=[])


def histories(record: Record) -> dict[str, list[list[dict[str, Any]]]]:
    """Per arm, each seed's per-iteration metrics (for the curves)."""
    out: dict[str, list[list[dict[str, Any]]]] = {}
    for (kind, _, arm), unit in sorted(record.units.items(), key=lambda kv: kv[0][1]):
        if kind == "arm":
            out.setdefault(arm, []).append(unit.get("metrics", []))
    return out


def write_report_from_record(record_path: str | Path, out_dir: str | Path) -> dict[str, Any]:
    """``seed-train report``: report.json, report.md and the curves of a record, in ``out_dir``."""
    record = read_record(record_path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    report = report_from_record(record)
    report["record"] = str(record_path)
    report["files"] = {"json": str(out / "report.json"), "markdown": str(out / "report.md"),
                       "curves": [str(p) for p in plot_histories(histories(record), record.header["env_id"], out)]}
    (out / "report.json").write_text(json.dumps(report, indent=1))
    (out / "report.md").write_text(report_markdown(report) + "\n")
    return report
