"""ALFWorld hindsight rules: the workflow of each task type, or the step of it that went wrong.

A success gives its task type's workflow (find, take, heat / cool / clean / light it when the type
asks, place) in words that fit every game of the type: "the object", "the target receptacle", and
the appliance the type always uses (microwave, fridge, sink basin, lamp), never this game's object
or receptacle numbers. A failure is checked, most decisive first, for a skipped step of the workflow
(placed the object unheated, never used the lamp, placed one of two objects), many invalid commands,
loops over the same places or commands, never taking the object, never placing it, and running out
of steps.

:func:`wrong_rule` is the content control's rewrite: the rule sent to another task type's appliance.
"""
from __future__ import annotations

from seed_envs.hindsight import (EpisodeRecord, HindsightRule, avoidance, invalid_indices, max_repeat,
                                 swap_phrases, workflow)

#: The verb and the appliance of the task types that change the object before placing it.
PROCESS = {
    "pick_heat_then_place_in_recep": ("heat", "microwave"),
    "pick_cool_then_place_in_recep": ("cool", "fridge"),
    "pick_clean_then_place_in_recep": ("clean", "sink basin"),
}
SUCCESS_RULES = {
    "pick_and_place_simple": "Find the object in likely receptacles, take it, go to the target receptacle and place it.",
    "look_at_obj_in_light": "Find and take the object, then go to a lamp and use the lamp while holding it.",
    "pick_clean_then_place_in_recep": "Find and take the object, clean it with the sink basin, then place it in the target receptacle.",
    "pick_heat_then_place_in_recep": "Find and take the object, heat it with the microwave, then place it in the target receptacle.",
    "pick_cool_then_place_in_recep": "Find and take the object, cool it with the fridge, then place it in the target receptacle.",
    "pick_two_obj_and_place": "Place the first object in the target receptacle, then find the second and place it too.",
    "task": "Find the object the task names, take it, do what the task asks with it, then place it where asked.",
}  # ("task": a game of a type not above)
SUCCESS_SUMMARIES = {
    "pick_and_place_simple": "Solved the task.",
    "look_at_obj_in_light": "Solved the task.",
    "pick_clean_then_place_in_recep": "Solved the task.",
    "pick_heat_then_place_in_recep": "Solved the task.",
    "pick_cool_then_place_in_recep": "Solved the task.",
    "pick_two_obj_and_place": "Solved the task.",
    "task": "Solved the task.",
}
FAILURE_RULES = {
    "skipped_heat": "Heat the object with the microwave before placing it; unheated it does not count.",
    "skipped_cool": "Cool the object with the fridge before placing it; uncooled it does not count.",
    "skipped_clean": "Clean the object with the sink basin before placing it; unwashed it does not count.",
    "no_lamp": "Take the object to a lamp and use the lamp while holding it; elsewhere it does not count.",
    "one_of_two": "The task needs two objects: after placing the first, find the second and place it too.",
    "invalid": "Copy commands exactly from the admissible list, numbers included; other text does nothing.",
    "loop": "Do not revisit places or repeat commands; check a receptacle you have not opened yet.",
    "not_found": "Check receptacles one by one, opening closed ones, until you see the object; then take it.",
    "not_placed": "Once you hold the object, process it if asked and go straight to the target receptacle.",
    "timeout": "Go straight through the workflow: find the object, take it, process it if asked, place it.",
}
FAILURE_SUMMARIES = {
    "skipped_heat": "Failed: placed it unheated.",
    "skipped_cool": "Failed: placed it uncooled.",
    "skipped_clean": "Failed: placed it unwashed.",
    "no_lamp": "Failed: never used a lamp.",
    "one_of_two": "Failed: placed only one.",
    "invalid": "Failed: invalid commands.",
    "loop": "Failed: went in circles.",
    "not_found": "Failed: object not found.",
    "not_placed": "Failed: never placed it.",
    "timeout": "Failed: ran out of steps.",
}


def _verb(command: str) -> str:
    return command.strip().split(" ", 1)[0].lower() if command.strip() else ""


def is_place(command: str) -> bool:
    """Putting an object down: ``move X to Y`` (current game files) or ``put X in/on Y`` (older ones)."""
    return _verb(command) in ("move", "put")


def revisits(actions: list[str]) -> int:
    """``go to`` commands that returned to a place visited two moves earlier (A -> B -> A)."""
    goes = [a for a in actions if a.startswith("go to ")]
    return sum(1 for a, _, c in zip(goes, goes[1:], goes[2:]) if a == c)


def failure_kind(record: EpisodeRecord) -> str:
    valid = [a.strip().lower() for a in record.valid_actions()]
    verbs = [_verb(a) for a in valid]
    placed = [i for i, a in enumerate(valid) if is_place(a)]
    process = PROCESS.get(record.category)
    if process and placed and process[0] not in verbs[: placed[0]]:
        return f"skipped_{process[0]}"
    if record.category == "look_at_obj_in_light" and "take" in verbs and "use" not in verbs:
        return "no_lamp"
    if record.category == "pick_two_obj_and_place" and len(placed) == 1:
        return "one_of_two"
    bad = invalid_indices(record)
    if len(bad) >= 2 and len(bad) * 4 >= len(record.actions):
        return "invalid"
    _, repeats = max_repeat(valid)
    if repeats >= 3 or revisits(valid) >= 2:
        return "loop"
    if "take" not in verbs:
        return "invalid" if bad else "not_found"
    if not placed:
        return "not_placed"
    return "invalid" if bad else "timeout"


def hindsight_rule(record: EpisodeRecord) -> HindsightRule:
    if record.success:
        return workflow(record.category if record.category in SUCCESS_RULES else "task", SUCCESS_RULES,
                        SUCCESS_SUMMARIES)
    return avoidance(failure_kind(record), FAILURE_RULES, FAILURE_SUMMARIES)


# ------------------------------------------------------------------ the wrong-rule content control
#: The task type whose workflow a type's wrong rule follows: another appliance, or the wrong last step.
WRONG_TYPE = {
    "pick_heat_then_place_in_recep": "pick_cool_then_place_in_recep",
    "pick_cool_then_place_in_recep": "pick_heat_then_place_in_recep",
    "pick_clean_then_place_in_recep": "pick_heat_then_place_in_recep",
    "look_at_obj_in_light": "pick_clean_then_place_in_recep",
    "pick_and_place_simple": "look_at_obj_in_light",
    "pick_two_obj_and_place": "pick_and_place_simple",
}
# Each type's words for its own step, mapped to the WRONG_TYPE's (longer phrases first: the swap tries them
# in this order at each position, and never rewrites a replacement).
_WRONG_PHRASES = {
    "pick_heat_then_place_in_recep": (("unheated", "uncooled"), ("heating", "cooling"), ("heated", "cooled"),
                                      ("heat", "cool"), ("microwave", "fridge")),
    "pick_cool_then_place_in_recep": (("uncooled", "unheated"), ("cooling", "heating"), ("cooled", "heated"),
                                      ("cool", "heat"), ("fridge", "microwave")),
    "pick_clean_then_place_in_recep": (("unwashed", "unheated"), ("cleaning", "heating"), ("cleaned", "heated"),
                                       ("washed", "heated"), ("clean", "heat"), ("wash", "heat"),
                                       ("sink basin", "microwave"), ("sinkbasin", "microwave"), ("sink", "microwave")),
    "look_at_obj_in_light": (("desk lamp", "sink basin"), ("floor lamp", "sink basin"), ("desklamp", "sinkbasin"),
                             ("floorlamp", "sinkbasin"), ("lamp", "sink basin"), ("light", "water")),
    "pick_and_place_simple": (("place it", "use the lamp"), ("put it", "use the lamp")),
    "pick_two_obj_and_place": (("two objects", "one object"), ("both objects", "one object"),
                               ("find the second and place it too", "stop there"), ("two", "one"), ("both", "one")),
}


def wrong_rule(text: str, category: str) -> str:
    """A skill of the same format whose rule fails ``category``'s task: its own step's words turned into
    :data:`WRONG_TYPE`'s (heat <-> cool with microwave <-> fridge, clean -> heat at the microwave, the lamp ->
    the sink basin, placing -> using a lamp, two objects -> one); a skill that names none of them becomes
    :data:`WRONG_TYPE`'s workflow rule. An unknown category keeps its text."""
    if category not in WRONG_TYPE:
        return text
    new, changed = swap_phrases(text, _WRONG_PHRASES[category])
    return new if changed else SUCCESS_RULES[WRONG_TYPE[category]]
