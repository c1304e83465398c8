"""Sokoban hindsight rules: how to push a box home, or which mistake lost the room.

The boards in the text observations (verl-agent's symbols, see :mod:`seed_envs.sokoban.render`) are
read back into walls, targets, boxes and the player, and the episode is checked for the classic
mistakes, most decisive first: a box pushed where it can never leave (a corner, or along a wall with
no target on it), a box pushed off its target, invalid actions, stepping back and forth, walking into
walls, and running out of moves. Successes give the push pattern the room needed (straight, with a
turn, several boxes). Rules name no direction sequence: the episode's moves fit only its own room.
With ``obs_mode="image"`` the text has no board and only the board-free checks apply.

:func:`wrong_rule` is the content control's rewrite: the same skill turned into advice that loses rooms.
"""
from __future__ import annotations

from dataclasses import dataclass

from seed_envs.hindsight import EpisodeRecord, HindsightRule, avoidance, invalid_indices, swap_phrases, workflow
from seed_envs.sokoban.render import SYMBOLS

_WALL, _FLOOR, _TARGET, _BOX, _BOX_ON_TARGET, _PLAYER, _PLAYER_ON_TARGET = SYMBOLS
_MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
OPPOSITE = {"up": "down", "down": "up", "left": "right", "right": "left"}


@dataclass(frozen=True)
class Board:
    """A Sokoban state read from an observation: cells as (row, column)."""

    walls: frozenset[tuple[int, int]]
    targets: frozenset[tuple[int, int]]
    boxes: frozenset[tuple[int, int]]
    player: tuple[int, int] | None

    def boxes_on_targets(self) -> int:
        return len(self.boxes & self.targets)


def parse_board(text: str) -> Board | None:
    """The board in an observation's text (None when it shows none, e.g. image mode)."""
    rows = [line for line in text.splitlines() if line and set(line) <= set(SYMBOLS)]
    if not rows:
        return None
    walls, targets, boxes, player = set(), set(), set(), None
    for r, row in enumerate(rows):
        for c, ch in enumerate(row):
            cell = (r, c)
            if ch == _WALL:
                walls.add(cell)
            if ch in (_TARGET, _BOX_ON_TARGET, _PLAYER_ON_TARGET):
                targets.add(cell)
            if ch in (_BOX, _BOX_ON_TARGET):
                boxes.add(cell)
            if ch in (_PLAYER, _PLAYER_ON_TARGET):
                player = cell
    return Board(frozenset(walls), frozenset(targets), frozenset(boxes), player)


def _shift(cell: tuple[int, int], d: tuple[int, int], k: int = 1) -> tuple[int, int]:
    return cell[0] + k * d[0], cell[1] + k * d[1]


def is_dead_box(board: Board, box: tuple[int, int]) -> str | None:
    """Why a box off target can never reach one: ``"corner"`` (walls on two adjacent sides) or
    ``"wall"`` (pressed against a straight wall with no target along the stretch it can slide on);
    None when it may still be movable onto a target."""
    if box in board.targets:
        return None
    up, down, left, right = (_shift(box, _MOVES[m]) in board.walls for m in ("up", "down", "left", "right"))
    if (up or down) and (left or right):
        return "corner"
    for blocked, wall_side, slide in ((up, _MOVES["up"], _MOVES["right"]), (down, _MOVES["down"], _MOVES["right"]),
                                      (left, _MOVES["left"], _MOVES["down"]), (right, _MOVES["right"], _MOVES["down"])):
        if not blocked:
            continue
        # The box can only slide along the wall; walk both ways until a wall ends the stretch.
        stuck = True
        for sign in (1, -1):
            k = 0
            while True:
                cell = _shift(box, slide, sign * k)
                if cell in board.walls:
                    break
                if cell in board.targets or _shift(cell, wall_side) not in board.walls:
                    stuck = False  # a target on the stretch, or a gap in the wall the box can leave by
                    break
                k += 1
            if not stuck:
                break
        if stuck:
            return "wall"
    return None


def boards(record: EpisodeRecord) -> list[Board | None]:
    """The board before every step, then the final one."""
    return [parse_board(t) for t in [*record.observations, record.final_observation]]


def dead_push(record: EpisodeRecord) -> tuple[int, str] | None:
    """The first step that left a box where it can never reach a target, and why (corner / wall)."""
    states = boards(record)
    for i in range(len(record.actions)):
        before, after = states[i], states[i + 1]
        if before is None or after is None or after.boxes == before.boxes:
            continue
        for box in after.boxes - before.boxes:
            why = is_dead_box(after, box)
            if why:
                return i, why
    return None


def pushed_off_target(record: EpisodeRecord) -> int | None:
    """The first step that lowered the number of boxes on targets."""
    states = boards(record)
    for i in range(len(record.actions)):
        before, after = states[i], states[i + 1]
        if before is not None and after is not None and after.boxes_on_targets() < before.boxes_on_targets():
            return i
    return None


def push_directions(record: EpisodeRecord) -> list[str]:
    """The direction of every step that moved a box, in order."""
    states = boards(record)
    out = []
    for i, action in enumerate(record.actions):
        before, after = states[i], states[i + 1]
        if before is not None and after is not None and after.boxes != before.boxes:
            out.append(action.strip().lower())
    return out


def bumps(record: EpisodeRecord) -> list[int]:
    """Valid moves that changed nothing (into a wall or an immovable box)."""
    states = boards(record)
    out = []
    for i in range(len(record.actions)):
        if record.invalid[i]:
            continue
        before, after = states[i], states[i + 1]
        if before is not None and after is not None:
            if before == after:
                out.append(i)
        elif "nothing changed" in ([*record.observations[1:], record.final_observation][i]):
            out.append(i)  # no board in the text (image mode): the env's feedback says so
    return out


def back_and_forth(record: EpisodeRecord) -> int:
    """How many times a move was undone by the opposite move right after it."""
    moves = [a.strip().lower() for a in record.actions]
    return sum(1 for a, b in zip(moves, moves[1:]) if OPPOSITE.get(a) == b)


SUCCESS_RULES = {
    "straight": "Walk to the side of the box opposite the target, then push it straight onto the target.",
    "turn": "Push the box in line with the target, then walk around and push it onto the target.",
    "multi": "Push one box at a time onto a target, keeping the others off walls and out of corners.",
}
SUCCESS_SUMMARIES = {
    "straight": "Solved: straight push.",
    "turn": "Solved: push with a turn.",
    "multi": "Solved: box by box.",
}
FAILURE_RULES = {
    "corner": "Never push a box into a corner without a target; it can never move out again.",
    "wall": "Never push a box against a wall without a target along it; it can only slide there.",
    "off_target": "Once a box is on a target, walk around it; pushing it off undoes progress.",
    "invalid": "Answer with a single direction word each step; other text is invalid and wastes a move.",
    "back_and_forth": "Do not step back and forth; plan a path to the box's push side first.",
    "bump": "Check the board before moving: walking into a wall or a blocked box wastes a move.",
    "timeout": "Plan first: reach the box's push side in few moves, then push it to the target.",
}
FAILURE_SUMMARIES = {
    "corner": "Lost: box in a corner.",
    "wall": "Lost: box stuck on a wall.",
    "off_target": "Lost: pushed a box off.",
    "invalid": "Lost: invalid actions.",
    "back_and_forth": "Lost: moved back and forth.",
    "bump": "Lost: walked into walls.",
    "timeout": "Lost: ran out of moves.",
}


def failure_kind(record: EpisodeRecord) -> str:
    """The most decisive mistake of a lost episode."""
    dead = dead_push(record)
    if dead is not None:
        return dead[1]
    if pushed_off_target(record) is not None:
        return "off_target"
    if invalid_indices(record):
        return "invalid"
    if back_and_forth(record) >= 2:
        return "back_and_forth"
    if len(bumps(record)) >= 2:
        return "bump"
    return "timeout"


def hindsight_rule(record: EpisodeRecord) -> HindsightRule:
    if record.success:
        first = parse_board(record.observations[0]) if record.observations else None
        if first is not None and len(first.boxes) > 1:
            kind = "multi"
        else:
            kind = "straight" if len(set(push_directions(record))) <= 1 else "turn"
        return workflow(kind, SUCCESS_RULES, SUCCESS_SUMMARIES)
    return avoidance(failure_kind(record), FAILURE_RULES, FAILURE_SUMMARIES)


# ------------------------------------------------------------------ the wrong-rule content control
# Each phrase a Sokoban rule turns on, mapped to one of about the same length that makes the advice lose the
# room: push from the target's side, away from it, into corners, and every direction word reversed. Longer
# phrases first (the swap tries them in this order at each position).
_WRONG_PHRASES = (
    ("check the board before moving", "move before checking the board"),
    ("off walls and out of corners", "against walls and in corners"), ("a single direction word", "a full sentence"),
    ("one box at a time", "every box at once"), ("walk around it", "push it further"),
    ("undoes progress", "makes progress"), ("to the target", "away from the target"),
    ("to a target", "away from a target"), ("in line with", "out of line with"), ("in few moves", "in many moves"),
    ("away from", "towards"), ("towards", "away from"), ("toward", "away from"), ("opposite", "facing"),
    ("onto", "away from"), ("do not", "always"), ("never", "always"), ("avoid", "seek"), ("wastes", "saves"),
    ("first", "last"), ("up", "down"), ("down", "up"), ("left", "right"), ("right", "left"),
)
#: A skill that names none of those phrases (a garbled or off-topic one) is replaced by this losing rule.
WRONG_RULE = "Push the box into the nearest corner first, then walk away from the target."


def wrong_rule(text: str, category: str) -> str:
    """A skill of the same format whose advice loses the room, whatever its size (``category``): the push
    side, the push direction, the advice about corners, walls and planning, and every direction word
    reversed (:data:`_WRONG_PHRASES`); a skill that names none of them becomes :data:`WRONG_RULE`."""
    new, changed = swap_phrases(text, _WRONG_PHRASES)
    return new if changed else WRONG_RULE
