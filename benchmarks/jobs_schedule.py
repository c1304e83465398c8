"""How long one training seed of a recorded experiment would take with ``seed-train experiment --jobs N``.

    python benchmarks/jobs_schedule.py RECORD [--jobs 2] [--arms sft-grpo seed seed-wrong-rule]

For each training seed of a committed record (``docs/results/records/NAME.jsonl``) this schedules that
seed's recorded units (its Stage 1, the base model's evaluation, the arms given) on N workers in the order
``--jobs`` takes them, at their recorded times (``seed_train.experiment.schedule_end``, the ETA's schedule).
A unit recorded before ``train_seconds`` existed counts as training throughout, so its seed's arms wait for
the whole Stage 1 unit: the estimate errs long. The recorded times are those of the run that made the
record (its load), not of a run with ``--jobs``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from seed_train.experiment import Unit, add_unit_time, schedule_end
from seed_train.records import read_record


def seed_minutes(record_path: Path, arms: list[str], jobs: int) -> dict[int, float | None]:
    """Training seed -> minutes its units take on ``jobs`` workers (None where a unit is not recorded)."""
    record = read_record(record_path)
    out: dict[int, float | None] = {}
    for seed in record.seeds:
        keys = [("stage1", seed, None), ("before", seed, None)] + [("arm", seed, arm) for arm in arms]
        if any(key not in record.units for key in keys):
            out[seed] = None
            continue
        times: dict[str, list[tuple[float, float]]] = {}
        for kind, _, arm in keys:
            add_unit_time(times, kind, arm, record.units[(kind, seed, arm)])
        queue = [Unit(kind, seed, Path(arm or kind), arm) for kind, _, arm in keys]
        end = schedule_end(queue, {}, times, jobs)
        out[seed] = None if end is None else end / 60
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("record", type=Path)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--arms", nargs="+", default=["sft-grpo", "seed", "seed-wrong-rule"])
    args = p.parse_args(argv)
    print(f"| seed | minutes with --jobs {args.jobs} ({', '.join(args.arms)}) |\n|---:|---:|")
    for seed, minutes in seed_minutes(args.record, args.arms, args.jobs).items():
        print(f"| {seed} | {'-' if minutes is None else f'{minutes:.1f}'} |")


if __name__ == "__main__":
    main()
