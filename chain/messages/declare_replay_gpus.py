"""market `MsgDeclareReplayGpus`: a validator's operator lists the GPUs its verifier replays bit for bit, so that
the committees of GPU-trained commitments are drawn from validators that can judge them
(`market.replay_gpus`). The list replaces the operator's last one; an empty list withdraws it."""

from __future__ import annotations

from ..block import BlockContext, Event
from ..crypto import encode_address
from ..market.errors import NotValidator
from ..market.replay_gpus import check_gpu_parts, set_replay_gpus
from ..proto.market_pb2 import MsgDeclareReplayGpus
from ..state import State
from ..validators import get_validator


def validate_declare_replay_gpus(msg: MsgDeclareReplayGpus) -> None:
    check_gpu_parts(list(msg.gpus))


def process_declare_replay_gpus(state: State, ctx: BlockContext, signer: bytes, msg: MsgDeclareReplayGpus) -> None:
    if get_validator(state, signer) is None:
        raise NotValidator(f"{encode_address(signer)} is not a validator's operator: only verifiers declare the "
                           f"GPUs they replay")
    set_replay_gpus(state, signer, list(msg.gpus))
    ctx.emit(Event.of("replay_gpus", operator=encode_address(signer), gpus=",".join(sorted(msg.gpus))))
