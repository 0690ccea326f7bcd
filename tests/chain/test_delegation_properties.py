"""Delegation, F1 rewards, commission and slashing under thousands of random operations.

After every operation: the sum of every account (module accounts included: the bonded and unbonding pools, the
rewards pool, the fee collector) equals the supply, and the supply fell by exactly what slashes burned (the
harness also checks every module invariant after each block). Each withdrawal pays a delegation what a brute-force
computation says it earned since its last one (each block's delegator rewards of its validator times its shares
over the validator's shares, in exact fractions), rounded down by less than 1 utrl: the documented rounding.
"""

from __future__ import annotations

from collections import defaultdict
from fractions import Fraction

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trolly.chain.accounts import get_supply, iterate_accounts
from trolly.chain.block import BlockContext, Misbehavior
from trolly.chain.crypto import encode_address
from trolly.chain.delegations import iterate_delegations
from trolly.chain.proto.bank_pb2 import MsgSend
from trolly.chain.proto.distribution_pb2 import MsgWithdrawRewards
from trolly.chain.proto.staking_pb2 import MsgDelegate, MsgEditValidator, MsgRedelegate, MsgUndelegate
from trolly.chain.slash import slash_validator
from trolly.chain.state import State
from trolly.chain.validators import get_validator

TRL = 10**6
VALIDATORS = 3
DELEGATORS = 5  # accounts 0..4; the operators delegate too (their self-bonds)
PARAMS = {"staking": {"unbonding_blocks": 6, "max_evidence_age_blocks": 6, "commission_change_blocks": 2,
                      "max_entries": 3},
          "market": {"verification_window": 1, "reveal_window": 1}}

amount = st.sampled_from([1, 7, 999, TRL, 3 * TRL + 1]) | st.integers(1, 5 * TRL)
who = st.integers(0, DELEGATORS + VALIDATORS - 1)
validator = st.integers(0, VALIDATORS - 1)
permille = st.integers(1, 1000)
operation = st.one_of(
    st.tuples(st.just("delegate"), who, validator, amount),
    st.tuples(st.just("undelegate"), who, validator, permille),
    st.tuples(st.just("redelegate"), who, validator, validator, permille),
    st.tuples(st.just("withdraw"), who, validator),
    st.tuples(st.just("fees"), st.integers(1, 10**7)),
    st.tuples(st.just("fees"), st.integers(1, 10**7)),
    st.tuples(st.just("slash_fraction"), validator, st.integers(0, 10_000), st.integers(0, 5)),
    st.tuples(st.just("slash_amount"), validator, st.integers(0, 4 * TRL), st.integers(0, 5)),
    st.tuples(st.just("edit"), validator, st.integers(-150, 150)),
    st.tuples(st.just("advance"), st.integers(1, 4)),
    st.tuples(st.just("double_sign"), validator),
)


class Model:
    """The chain under test and the brute-force ledger of what each delegation earned since its last payment."""

    def __init__(self, chain) -> None:
        self.chain = chain
        self.people = chain.accounts[:DELEGATORS] + chain.operators
        self.fee_payer = chain.accounts[DELEGATORS]
        self.accrued: dict[tuple[bytes, bytes], Fraction] = defaultdict(Fraction)
        self.supply = get_supply(chain.state)
        self.withdrawals = 0

    def operator(self, index: int) -> bytes:
        return self.chain.operators[index].address

    # -- the checks -------------------------------------------------------------------------------------------
    def check_paid(self, events) -> None:
        for event in events:
            attributes = dict(event.attributes)
            if event.type == "withdraw_rewards":  # a settlement paying 0 emits none: see forget_restarted
                key = (self.address_of(attributes["delegator"]), self.address_of(attributes["validator"]))
                paid, exact = int(attributes["amount"]), self.accrued.pop(key, Fraction(0))
                assert paid <= exact < paid + 1 + Fraction(1, 10**9), (paid, exact)
                self.withdrawals += 1
            if event.type == "validator_slash":
                self.supply -= sum(int(attributes[k]) for k in ("burned_bonded", "burned_unbonding",
                                                                   "burned_redelegated"))

    def address_of(self, text: str) -> bytes:
        return next(p.address for p in self.people if self.bech32(p.address) == text)

    @staticmethod
    def bech32(address: bytes) -> str:
        return encode_address(address)

    def check_supply(self) -> None:
        state = self.chain.state
        assert sum(account.balance for _, account in iterate_accounts(state)) == get_supply(state) == self.supply

    # -- running operations -------------------------------------------------------------------------------------
    def block(self, *txs, misbehavior=()):
        before = {(d.delegator, d.validator): d.period for d in iterate_delegations(self.chain.state)}
        output = self.chain.block(*txs, misbehavior=misbehavior)
        events = [e for result in output.tx_results for e in result.events] + output.events
        self.check_paid(events)
        self.forget_restarted(before)
        self.accrue(output.events)
        return output

    def forget_restarted(self, before: dict) -> None:
        """A delegation whose period moved was settled (paid, possibly 0 with no event): its ledger restarts."""
        after = {(d.delegator, d.validator): d.period for d in iterate_delegations(self.chain.state)}
        for key, period in before.items():
            if after.get(key) != period:
                assert self.accrued.get(key, Fraction(0)) < 1, "a settlement paid nothing of 1 utrl or more"
                self.accrued.pop(key, None)

    def accrue(self, end_block_events) -> None:
        """Each validator's delegator rewards of this block, split by the shares in force at its end."""
        shares = defaultdict(dict)
        for delegation in iterate_delegations(self.chain.state):
            shares[delegation.validator][delegation.delegator] = delegation.shares
        for event in end_block_events:
            if event.type != "reward":
                continue
            attributes = dict(event.attributes)
            operator, credited = self.address_of(attributes["operator"]), int(attributes["delegators"])
            total = sum(shares[operator].values())
            for delegator, held in shares[operator].items():
                self.accrued[(delegator, operator)] += Fraction(credited * held, total)

    def slash(self, index: int, back: int, **penalty) -> None:
        state = State(self.chain.kv)
        ctx = BlockContext(self.chain.env(self.chain.height))
        before = {(d.delegator, d.validator): d.period for d in iterate_delegations(state)}
        slash_validator(state, ctx, self.operator(index), max(1, self.chain.height - back), "test", **penalty)
        self.chain.kv.apply(state.changes())
        self.check_paid(ctx.events)
        self.forget_restarted(before)

    def tokens(self, person, index: int) -> int:
        query = self.chain.query(f"/delegations/{self.bech32(person.address)}")
        validator_text = self.bech32(self.operator(index))
        return next((row["amount"] for row in query["delegations"] if row["validator"] == validator_text), 0)

    def run(self, op) -> None:
        chain, kind = self.chain, op[0]
        if kind == "delegate":
            _, person, index, value = op
            self.block(chain.tx(self.people[person], MsgDelegate(validator=self.operator(index), amount=value)))
        elif kind == "undelegate":
            _, person, index, share = op
            value = max(1, self.tokens(self.people[person], index) * share // 1000)
            self.block(chain.tx(self.people[person], MsgUndelegate(validator=self.operator(index), amount=value)))
        elif kind == "redelegate":
            _, person, src, dst, share = op
            value = max(1, self.tokens(self.people[person], src) * share // 1000)
            message = MsgRedelegate(src_validator=self.operator(src), dst_validator=self.operator(dst), amount=value)
            self.block(chain.tx(self.people[person], message))
        elif kind == "withdraw":
            _, person, index = op
            self.block(chain.tx(self.people[person], MsgWithdrawRewards(validator=self.operator(index))))
        elif kind == "fees":
            self.block(chain.tx(self.fee_payer, MsgSend(to=chain.accounts[0].address, amount=1), fee=op[1]))
        elif kind == "slash_fraction":
            self.slash(op[1], op[3], fraction_bps=op[2])
        elif kind == "slash_amount":
            self.slash(op[1], op[3], amount=op[2])
        elif kind == "edit":
            _, index, delta = op
            rate = get_validator(chain.state, self.operator(index)).commission.rate + delta
            self.block(chain.tx(chain.operators[index], MsgEditValidator(commission_rate=max(0, rate))))
        elif kind == "advance":
            for _ in range(op[1]):
                self.block()
        elif kind == "double_sign":
            consensus = chain.consensus_keys[op[1]].address
            self.block(misbehavior=(Misbehavior(1, consensus, 10, chain.height, 0, 30),))
        self.check_supply()

    def withdraw_everything(self) -> None:
        txs = []
        for delegation in list(iterate_delegations(self.chain.state)):
            person = next(p for p in self.people if p.address == delegation.delegator)
            txs.append(self.chain.tx(person, MsgWithdrawRewards(validator=delegation.validator)))
        self.block(*txs)
        assert all(value < 1 for value in self.accrued.values())
        self.check_supply()


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(operations=st.lists(operation, min_size=40, max_size=120))
def test_random_delegation_histories_keep_the_supply_and_pay_each_delegator_its_exact_share(make_chain, operations):
    chain = make_chain(accounts=DELEGATORS + 1, validators=VALIDATORS, stakes=[5 * TRL, 3 * TRL, 2 * TRL],
                       params=PARAMS)
    model = Model(chain)
    for op in operations:
        model.run(op)
    model.withdraw_everything()
