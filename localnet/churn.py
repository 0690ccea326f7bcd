"""`trolly-localnet demo --churn`: members killed mid-task, and a spare worker replacing them.

With churn the localnet runs one worker more than the task wants: the spare registers and waits, idle. While the
task runs, the demo kills members with SIGKILL (their supervised process and everything it started, as a crash
would): the first as soon as the task runs, each next one two rounds later, always an opening member that is
still active, never the last one. A killed member misses its round's commitment and the chain drops it at the
round's deadline (a penalty, the rest of its collateral back); its slot opens at the next round, and the spare,
which looks for work all along, joins it and trains from the round after (docs/protocol.md 4.1c). A second
slot finds no spare: the task goes on with the members left.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from trolly.chain.market.records import ACTIVE, RUNNING
from trolly.wallet.market_views import TaskView

ROUNDS_BETWEEN_KILLS = 2
"""Kill k happens once the task reached round 2k: the round after a kill drops the member and opens its slot."""


class Churn:
    """Kills `kills` members of the followed task, one at a time, through `kill(service name)`."""

    def __init__(self, kills: int, kill: Callable[[str], bool], names: dict[str, str]) -> None:
        """`names`: worker address -> its key name, which is also its service's name (`worker-<i>`)."""
        self.kills = kills
        self.kill = kill
        self.names = names
        self.killed: list[dict] = []
        """{"worker": name, "round": the round it was killed in}, in order."""
        self.replacements_seen: set[str] = set()

    async def advance(self, view: TaskView) -> list[str]:
        """Kill the next member when its time came; lines saying what was done, and which replacement joined."""
        lines = []
        for member in view.members:
            if member.first_round > 0 and member.worker not in self.replacements_seen:
                self.replacements_seen.add(member.worker)
                lines.append(f"churn: {self.names.get(member.worker, member.worker)} joined as a replacement in "
                             f"slot {member.index}, training from round {member.first_round}")
        if len(self.killed) >= self.kills or view.status != RUNNING:
            return lines
        if view.round < ROUNDS_BETWEEN_KILLS * len(self.killed) or view.round >= view.rounds:
            return lines
        active = [m for m in view.members if m.status == ACTIVE]
        victims = [m for m in active if m.first_round == 0]
        if len(active) < 2 or not victims:
            return lines
        victim = self.names.get(victims[0].worker, victims[0].worker)
        killed = await asyncio.to_thread(self.kill, victim)
        self.killed.append({"worker": victim, "round": view.round})
        return lines + [f"churn: {victim} (worker index {victims[0].index}) killed with SIGKILL in round {view.round}"
                        + ("" if killed else " (it had already stopped)")]

    def summary(self, view: TaskView) -> dict:
        """The JSON line's churn fields: who was killed when, and each replacement with its slot, first round
        and pay."""
        return {
            "killed": self.killed,
            "replacements": [
                {"worker": self.names.get(m.worker, m.worker), "slot": m.index, "first_round": m.first_round,
                 "rounds_passed": m.rounds_passed, "paid": m.paid}
                for m in view.members if m.first_round > 0],
        }
