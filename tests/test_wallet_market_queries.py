"""`list_tasks` follows the market listing's pages to the end, and stops on a node that answers nonsense."""

from __future__ import annotations

import asyncio

from market_view_helpers import summary_answer
from trolly.wallet.market_queries import list_tasks


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
