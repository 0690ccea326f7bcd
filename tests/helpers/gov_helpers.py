"""Helpers for governance tests: proposal messages, and a `Gov` driver over `chain_helpers.Chain`.

    def test_something(make_chain):
        gov = Gov(make_chain(validators=3, params={"gov": SHORT_GOV}))
        proposal_id = gov.submit(("market", "validator_fee_bps", 300), deposit=MIN_DEPOSIT)
        gov.vote_all(proposal_id, YES)              # every genesis validator votes yes
        gov.finish(proposal_id)                     # blocks until its voting period has ended

`refused_in_check_tx` runs a transaction through CheckTx against the committed state and asserts that it was
refused and that nothing, committed or pending, changed.
"""

from __future__ import annotations

from trolly.chain import app as chain_app
from trolly.chain.block import TxResult
from trolly.chain.gov.store import ABSTAIN, NO, NO_WITH_VETO, YES  # noqa: F401 - re-exported for the tests
from trolly.chain.proto import gov_pb2
from trolly.chain.state import State

MIN_DEPOSIT = 1_000_000
SHORT_GOV = {"min_deposit": MIN_DEPOSIT, "max_deposit_blocks": 4, "voting_period_blocks": 3}
"""Gov params of these tests: periods of a few blocks, a small minimum deposit."""


def change(section: str, key: str, value: object) -> gov_pb2.ParamChange:
    return gov_pb2.ParamChange(section=section, key=key, value=value if isinstance(value, str) else str(value))


def proposal_message(*changes: tuple[str, str, object], deposit: int = MIN_DEPOSIT, title: str = "change params",
                     summary: str = "") -> gov_pb2.MsgSubmitProposal:
    return gov_pb2.MsgSubmitProposal(title=title, summary=summary, initial_deposit=deposit,
                                     changes=[change(*c) for c in changes])


def event_attributes(result, kind: str) -> dict:
    return dict(next(e for e in result.events if e.type == kind).attributes)


def refused_in_check_tx(chain, key, *messages) -> TxResult:
    """CheckTx of a tx carrying `messages` against the committed state: it must fail and leave nothing written."""
    raw = chain.tx(key, *messages, fee=0)
    chain._pending_nonces.clear()  # the tx never reaches a block
    state = State(chain.kv)
    before = dict(chain.kv.items)
    result = chain_app.check_tx(state, chain.env(chain.height + 1), raw)
    assert not result.ok, "CheckTx admitted a transaction it should refuse"
    assert state.changes() == {} and chain.kv.items == before
    return result


class Gov:
    """Drives proposals through a `Chain` whose validators are the voters."""

    def __init__(self, chain) -> None:
        self.chain = chain
        self.proposer = chain.accounts[0]

    def submit(self, *changes: tuple[str, str, object], deposit: int = MIN_DEPOSIT, proposer=None, **fields) -> int:
        result = self.chain.deliver(proposer or self.proposer, proposal_message(*changes, deposit=deposit, **fields))
        assert result.ok, result.log
        return int(event_attributes(result, "proposal_submitted")["proposal_id"])

    def vote(self, proposal_id: int, voter, option: int) -> TxResult:
        return self.chain.deliver(voter, gov_pb2.MsgVote(proposal_id=proposal_id, option=option))

    def vote_all(self, proposal_id: int, option: int, voters=None) -> None:
        voters = self.chain.operators if voters is None else voters
        output = self.chain.block(*[self.chain.tx(v, gov_pb2.MsgVote(proposal_id=proposal_id, option=option))
                                    for v in voters])
        assert all(r.ok for r in output.tx_results), [r.log for r in output.tx_results]

    def proposal(self, proposal_id: int) -> dict:
        return self.chain.query(f"/gov/proposal/{proposal_id}")

    def finish(self, proposal_id: int) -> list:
        """Empty blocks until the proposal's current period has ended; returns the end-block events of the last."""
        end = self.proposal(proposal_id)
        end_height = end["voting_end_height"] if end["status"] == "voting_period" else end["deposit_end_height"]
        outputs = self.chain.advance(max(0, end_height - self.chain.height))
        return outputs[-1].events if outputs else []
