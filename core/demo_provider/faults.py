"""The faults the demo provider injects, switchable on a running process
(``POST /v1/faults``) so a test or a person can break it on purpose, and the seeded
random draws that decide which request a probability hits."""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace

MAX_SLOW_S = 3_600.0  # seconds: a longer stall is a typo, and would hold a thread that long
MAX_SEED = 2**63 - 1
PROBABILITIES = ("lose_request", "lose_reply", "truncate")
SWITCHES = ("fail_lookups", "unavailable")


class FaultError(ValueError):
    """A fault setting that cannot be used; the message says which and why."""


@dataclass(frozen=True)
class Faults:
    """What the provider does wrong.

    Attributes:
        lose_request: Probability that a submit's connection is closed before
            anything is recorded (the request lost on its way in): the client cannot
            tell this from a lost reply, and a look-up then says not found.
        lose_reply: Probability that a submit is committed as done, then its
            connection closed with no response bytes at all.
        fail_lookups: Look-ups and result fetches answer 503 ``lookup_unavailable``.
        unavailable: Every submit answers 503 ``unavailable`` before anything is
            recorded (its submit is not counted).
        slow_s: Seconds a new request stays ``running`` before it is done.
        truncate: Probability that a submit's reply has its last vector cut short
            (count and checksum as computed, so the reply fails verification).
        seed: Seed of the random draws; None: a fresh one each start.
    """

    lose_request: float = 0.0
    lose_reply: float = 0.0
    fail_lookups: bool = False
    unavailable: bool = False
    slow_s: float = 0.0
    truncate: float = 0.0
    seed: int | None = None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    def changed(self, changes: Mapping[str, object]) -> Faults:
        """A copy with ``changes`` (a partial JSON object) applied.

        Raises:
            FaultError: An unknown name, or a value of the wrong type or range.
        """
        fields: dict[str, object] = {}
        for name, value in changes.items():
            if name in PROBABILITIES:
                fields[name] = _number(name, value, 1.0)
            elif name in SWITCHES:
                if not isinstance(value, bool):
                    raise FaultError(f"{name} must be true or false")
                fields[name] = value
            elif name == "slow_s":
                fields[name] = _number(name, value, MAX_SLOW_S)
            elif name == "seed":
                # bool is an int to Python, not to a person writing JSON.
                if value is not None and (
                    isinstance(value, bool)
                    or not isinstance(value, int)
                    or not 0 <= value <= MAX_SEED
                ):
                    raise FaultError(f"seed must be null or a whole number from 0 to {MAX_SEED}")
                fields[name] = value
            else:
                raise FaultError(f"unknown fault {name[:40]!r}")
        return replace(self, **fields)  # type: ignore[arg-type]


def _number(name: str, value: object, highest: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FaultError(f"{name} must be a number from 0 to {highest:g}")
    number = float(value)
    if not (math.isfinite(number) and 0.0 <= number <= highest):
        raise FaultError(f"{name} must be a number from 0 to {highest:g}")
    return number


class FaultSwitch:
    """The current faults and their random draws, shared by the server's threads."""

    def __init__(self, faults: Faults | None = None) -> None:
        self._lock = threading.Lock()
        # Checked like a change over the wire: a constructed Faults is not validated.
        self._faults = Faults().changed((faults or Faults()).to_dict())
        self._random = random.Random(self._faults.seed)

    @property
    def now(self) -> Faults:
        with self._lock:
            return self._faults

    def update(self, changes: Mapping[str, object]) -> Faults:
        """Apply a partial change; a new seed restarts the draws (tests replay).

        Raises:
            FaultError: The change is refused as a whole; nothing is applied.
        """
        with self._lock:
            self._faults = self._faults.changed(changes)
            if "seed" in changes:
                self._random = random.Random(self._faults.seed)
            return self._faults

    def hits(self, probability: float) -> bool:
        """One draw: True with ``probability`` (never at 0, always at 1)."""
        if probability <= 0.0:
            return False  # no draw: switching a fault off does not shift the sequence
        with self._lock:
            return self._random.random() < probability
