"""`list_tasks` and `get_round` follow the market's pages to the end, and stop on a node that answers nonsense."""

from __future__ import annotations

import asyncio

from market_view_helpers import address, commitment_answer, round_answer, summary_answer
from trolly.wallet.market_queries import get_round, list_tasks


class PagedNode:
    """Answers `/market/tasks[/open][/after/<id>]` with pages of `size` from `ids` (a unit-test stand-in)."""

    def __init__(self, ids: list[int], size: int, broken_next: int | None = None) -> None:
        self.ids, self.size, self.broken_next = ids, size, broken_next
        self.paths: list[str] = []

    async def query_json(self, path: str) -> dict:
        self.paths.append(path)
        after = int(path.rsplit("/after/", 1)[1]) if "/after/" in path else 0
        page = [i for i in self.ids if i > after][:self.size + 1]
        more = len(page) > self.size
        page = page[:self.size]
        following = (self.broken_next if self.broken_next is not None else page[-1]) if more else None
        return {"tasks": [summary_answer(id=i) for i in page], "next": following}


def test_every_page_is_read_in_id_order():
    node = PagedNode(list(range(1, 251)), size=100)
    tasks = asyncio.run(list_tasks(node, open_only=True))
    assert [t.id for t in tasks] == list(range(1, 251))
    assert node.paths == ["/market/tasks/open", "/market/tasks/open/after/100", "/market/tasks/open/after/200"]


def test_a_next_that_does_not_advance_ends_the_listing_instead_of_looping():
    node = PagedNode(list(range(1, 251)), size=100, broken_next=0)
    tasks = asyncio.run(list_tasks(node, open_only=False))
    assert len(tasks) == 100 and node.paths == ["/market/tasks"]


class RoundNode:
    """Answers `/market/task/7/round/0[/after/<index>]` one commitment a page, of members 0..members-1; `stuck_next`
    makes every page name that index as the next page's `after`."""

    def __init__(self, members: int, stuck_next: int | None = None) -> None:
        self.members, self.stuck_next = members, stuck_next
        self.paths: list[str] = []

    async def query_json(self, path: str) -> dict:
        self.paths.append(path)
        index = int(path.rsplit("/after/", 1)[1]) + 1 if "/after/" in path else 0
        more = index + 1 < self.members
        following = (self.stuck_next if self.stuck_next is not None else index) if more else None
        return round_answer(commitments=[commitment_answer(worker=address(10 + index))], next=following)


def test_a_round_is_assembled_from_its_pages_in_worker_order():
    node = RoundNode(members=3)
    view = asyncio.run(get_round(node.query_json, 7, 0))
    assert [c.worker for c in view.commitments] == [address(10), address(11), address(12)]
    assert node.paths == ["/market/task/7/round/0", "/market/task/7/round/0/after/0", "/market/task/7/round/0/after/1"]


def test_a_round_page_whose_next_does_not_advance_ends_the_round_instead_of_looping():
    node = RoundNode(members=5, stuck_next=0)
    view = asyncio.run(get_round(node.query_json, 7, 0))
    assert len(view.commitments) == 2 and node.paths == ["/market/task/7/round/0", "/market/task/7/round/0/after/0"]
