"""An ABCI v0.38 client written independently of `trolly.abci_app`: it plays CometBFT in the tests.

It shares no code with the server: its own protobuf wire encoder and decoder (varints, length-delimited
fields; no generated classes, no `google.protobuf`), its own uvarint framing, and plain blocking sockets
instead of asyncio. Field numbers come straight from CometBFT v0.38 `proto/tendermint/abci/types.proto`.
If the server's generated types or framing drift from v0.38, these tests fail even when the server's own
tests pass.

Transactions are opaque bytes here, exactly as they are to CometBFT.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field

# -- protobuf wire format ------------------------------------------------------------------------------------
VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5


def varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # int64 negatives are ten-byte two's complement varints
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def read_varint(data: bytes, position: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if position >= len(data):
            raise ValueError("truncated varint")
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return result, position
        if shift > 63:
            raise ValueError("varint too long")


def tag(number: int, wire_type: int) -> bytes:
    return varint(number << 3 | wire_type)


def field_varint(number: int, value: int) -> bytes:
    return tag(number, VARINT) + varint(value) if value else b""


def field_bytes(number: int, value: bytes | str) -> bytes:
    raw = value.encode() if isinstance(value, str) else value
    return tag(number, LENGTH) + varint(len(raw)) + raw


def field_message(number: int, body: bytes) -> bytes:
    """A sub-message, written even when empty (a set oneof case with no fields is `tag 00`)."""
    return tag(number, LENGTH) + varint(len(body)) + body


@dataclass
class Decoded:
    """A parsed message: field number -> list of raw values (ints for varints, bytes for the rest)."""

    fields: dict[int, list] = field(default_factory=dict)

    def all(self, number: int) -> list:
        return self.fields.get(number, [])

    def int(self, number: int, default: int = 0) -> int:
        values = self.all(number)
        return values[-1] if values else default

    def bytes(self, number: int) -> bytes:
        values = self.all(number)
        return values[-1] if values else b""

    def text(self, number: int) -> str:
        return self.bytes(number).decode()

    def message(self, number: int) -> "Decoded":
        return decode(self.bytes(number))

    def messages(self, number: int) -> list["Decoded"]:
        return [decode(raw) for raw in self.all(number)]


def decode(data: bytes) -> Decoded:
    decoded = Decoded()
    position = 0
    while position < len(data):
        key, position = read_varint(data, position)
        number, wire_type = key >> 3, key & 7
        if wire_type == VARINT:
            value, position = read_varint(data, position)
        elif wire_type == LENGTH:
            length, position = read_varint(data, position)
            value = data[position:position + length]
            if len(value) != length:
                raise ValueError("truncated length-delimited field")
            position += length
        elif wire_type == FIXED64:
            value, position = data[position:position + 8], position + 8
        elif wire_type == FIXED32:
            value, position = data[position:position + 4], position + 4
        else:
            raise ValueError(f"unsupported wire type {wire_type}")
        decoded.fields.setdefault(number, []).append(value)
    return decoded


def timestamp(seconds: int, nanos: int = 0) -> bytes:
    return field_varint(1, seconds) + field_varint(2, nanos)


# -- Request oneof numbers and bodies (v0.38) --------------------------------------------------------------------
REQ_ECHO, REQ_FLUSH, REQ_INFO, REQ_INIT_CHAIN, REQ_QUERY, REQ_CHECK_TX, REQ_COMMIT = 1, 2, 3, 5, 6, 8, 11
REQ_LIST_SNAPSHOTS, REQ_PREPARE, REQ_PROCESS, REQ_FINALIZE = 12, 16, 17, 20
# Response oneof numbers (v0.38)
RES_EXCEPTION, RES_ECHO, RES_FLUSH, RES_INFO, RES_INIT_CHAIN, RES_QUERY, RES_CHECK_TX = 1, 2, 3, 4, 6, 7, 9
RES_COMMIT, RES_LIST_SNAPSHOTS, RES_PREPARE, RES_PROCESS, RES_FINALIZE = 12, 13, 17, 18, 21
EXPECTED_RESPONSE = {REQ_ECHO: RES_ECHO, REQ_FLUSH: RES_FLUSH, REQ_INFO: RES_INFO, REQ_INIT_CHAIN: RES_INIT_CHAIN,
                     REQ_QUERY: RES_QUERY, REQ_CHECK_TX: RES_CHECK_TX, REQ_COMMIT: RES_COMMIT,
                     REQ_LIST_SNAPSHOTS: RES_LIST_SNAPSHOTS, REQ_PREPARE: RES_PREPARE, REQ_PROCESS: RES_PROCESS,
                     REQ_FINALIZE: RES_FINALIZE}


def request(case: int, body: bytes = b"") -> bytes:
    return field_message(case, body)


def echo(message: str) -> bytes:
    return request(REQ_ECHO, field_bytes(1, message))


def flush() -> bytes:
    return request(REQ_FLUSH)


def info() -> bytes:
    # RequestInfo{version=1, block_version=2, p2p_version=3, abci_version=4}
    return request(REQ_INFO, field_bytes(1, "0.38.17") + field_varint(2, 11) + field_varint(3, 8) +
                   field_bytes(4, "2.0.0"))


def init_chain(chain_id: str, app_state: bytes, seconds: int, initial_height: int = 1) -> bytes:
    # RequestInitChain{time=1, chain_id=2, consensus_params=3, validators=4, app_state_bytes=5, initial_height=6}
    return request(REQ_INIT_CHAIN, field_message(1, timestamp(seconds)) + field_bytes(2, chain_id) +
                   field_bytes(5, app_state) + field_varint(6, initial_height))


def validator(address: bytes, power: int) -> bytes:
    return field_bytes(1, address) + field_varint(3, power)  # Validator{address=1, power=3}


def finalize_block(height: int, txs: list[bytes], seconds: int, block_hash: bytes, proposer: bytes,
                   votes: list[tuple[bytes, int, int]] = (), misbehavior: list[tuple[int, bytes, int, int]] = ()
                   ) -> bytes:
    """votes: (address, power, block_id_flag); misbehavior: (type, address, power, height)."""
    # RequestFinalizeBlock{txs=1, decided_last_commit=2, misbehavior=3, hash=4, height=5, time=6, nvh=7, proposer=8}
    # CommitInfo{round=1, votes=2}; VoteInfo{validator=1, block_id_flag=3}
    commit_info = b"".join(field_message(2, field_message(1, validator(a, p)) + field_varint(3, flag))
                           for a, p, flag in votes)
    body = b"".join(field_bytes(1, tx) for tx in txs) + field_message(2, commit_info)
    # Misbehavior{type=1, validator=2, height=3, time=4, total_voting_power=5}
    total_power = sum(p for _, p, _ in votes)
    for kind, address, power, evidence_height in misbehavior:
        body += field_message(3, field_varint(1, kind) + field_message(2, validator(address, power)) +
                              field_varint(3, evidence_height) + field_message(4, timestamp(seconds - 1)) +
                              field_varint(5, total_power))
    body += field_bytes(4, block_hash) + field_varint(5, height)
    body += field_message(6, timestamp(seconds)) + field_bytes(8, proposer)
    return request(REQ_FINALIZE, body)


def prepare_proposal(height: int, txs: list[bytes], max_tx_bytes: int, seconds: int) -> bytes:
    body = field_varint(1, max_tx_bytes) + b"".join(field_bytes(2, tx) for tx in txs)
    return request(REQ_PREPARE, body + field_varint(5, height) + field_message(6, timestamp(seconds)))


def process_proposal(height: int, txs: list[bytes], seconds: int) -> bytes:
    body = b"".join(field_bytes(1, tx) for tx in txs) + field_varint(5, height)
    return request(REQ_PROCESS, body + field_message(6, timestamp(seconds)))


def commit() -> bytes:
    return request(REQ_COMMIT)


def check_tx(tx: bytes, recheck: bool = False) -> bytes:
    return request(REQ_CHECK_TX, field_bytes(1, tx) + field_varint(2, 1 if recheck else 0))


def query(path: str, data: bytes = b"", height: int = 0, prove: bool = False) -> bytes:
    return request(REQ_QUERY, field_bytes(1, data) + field_bytes(2, path) + field_varint(3, height) +
                   field_varint(4, int(prove)))


def list_snapshots() -> bytes:
    return request(REQ_LIST_SNAPSHOTS)


# -- decoded responses -----------------------------------------------------------------------------------------
@dataclass
class TxOutcome:
    code: int
    log: str
    codespace: str
    events: list[tuple[str, list[tuple[str, str, bool]]]]


def tx_outcome(message: Decoded) -> TxOutcome:
    """ExecTxResult / ResponseCheckTx: code=1, data=2, log=3, info=4, gas=5/6, events=7, codespace=8."""
    events = []
    for event in message.messages(7):
        attributes = [(a.text(1), a.text(2), bool(a.int(3))) for a in event.messages(2)]
        events.append((event.text(1), attributes))
    return TxOutcome(message.int(1), message.text(3), message.text(8), events)


class ProtocolError(AssertionError):
    """The server answered something a v0.38 CometBFT would not accept."""


# -- framing and connections -------------------------------------------------------------------------------------
class Connection:
    """One ABCI connection over a blocking socket, with its own uvarint framing."""

    def __init__(self, address: str, timeout: float = 30.0) -> None:
        if address.startswith("unix://"):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(address[len("unix://"):])
        else:
            host, port = address.removeprefix("tcp://").rsplit(":", 1)
            self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.buffer = b""

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, *requests: bytes) -> None:
        self.sock.sendall(b"".join(varint(len(r)) + r for r in requests))

    def _fill(self) -> bool:
        chunk = self.sock.recv(1 << 16)
        self.buffer += chunk
        return bool(chunk)

    def receive(self) -> bytes | None:
        """The next response frame's body, or None if the server closed the connection."""
        while True:
            try:
                length, start = read_varint(self.buffer, 0)
                if len(self.buffer) >= start + length:
                    body = self.buffer[start:start + length]
                    self.buffer = self.buffer[start + length:]
                    return body
            except ValueError:
                pass  # incomplete prefix: read more
            if not self._fill():
                if self.buffer:
                    raise ProtocolError(f"connection closed inside a frame ({len(self.buffer)} bytes left)")
                return None

    def closed_by_server(self) -> bool:
        """True when the server has closed the connection (EOF, or a reset)."""
        try:
            return self.receive() is None
        except (ConnectionResetError, BrokenPipeError):
            return True

    def call(self, *requests: bytes) -> list[Decoded]:
        """Send requests then a Flush; check one response per request, same case, in order, flush last."""
        self.send(*requests, flush())
        responses = []
        for raw in requests:
            sent_case = decode(raw)
            (case,) = sent_case.fields
            body = self.receive()
            if body is None:
                raise ProtocolError("connection closed before every response arrived")
            response = decode(body)
            if RES_EXCEPTION in response.fields:
                raise ProtocolError(f"exception response: {response.message(RES_EXCEPTION).text(1)}")
            if list(response.fields) != [EXPECTED_RESPONSE[case]]:
                raise ProtocolError(f"request case {case} answered with fields {list(response.fields)}")
            responses.append(response.message(EXPECTED_RESPONSE[case]))
        last = self.receive()
        if last is None or list(decode(last).fields) != [RES_FLUSH]:
            raise ProtocolError("flush not answered after the earlier responses")
        return responses

    def close(self) -> None:
        self.sock.close()


class CometLikeClient:
    """Four connections opened in CometBFT's order: query, snapshot, mempool, consensus."""

    def __init__(self, address: str) -> None:
        self.query = Connection(address)
        self.snapshot = Connection(address)
        self.mempool = Connection(address)
        self.consensus = Connection(address)

    def info(self) -> Decoded:
        # ResponseInfo{data=1, version=2, app_version=3, last_block_height=4, last_block_app_hash=5}
        return self.query.call(info())[0]

    def init_chain(self, chain_id: str, app_state: bytes, seconds: int) -> Decoded:
        return self.consensus.call(init_chain(chain_id, app_state, seconds))[0]

    def finalize_and_commit(self, height: int, txs: list[bytes], seconds: int, proposer: bytes = b"\x01" * 20,
                            votes=(), misbehavior=()) -> tuple[bytes, list[TxOutcome]]:
        """Returns (app_hash, tx outcomes); checks the Commit answer's shape."""
        finalized, committed = self.consensus.call(
            finalize_block(height, txs, seconds, block_hash=height.to_bytes(32, "big"), proposer=proposer,
                           votes=votes, misbehavior=misbehavior),
            commit(),
        )
        self.last_validator_updates = [
            (update.message(1).bytes(1), update.int(2)) for update in finalized.messages(3)
        ]  # ValidatorUpdate{pub_key=1 (PublicKey{ed25519=1}), power=2}
        # ResponseFinalizeBlock{events=1, tx_results=2, validator_updates=3, consensus_param_updates=4, app_hash=5}
        outcomes = [tx_outcome(result) for result in finalized.messages(2)]
        if len(outcomes) != len(txs):
            raise ProtocolError(f"{len(outcomes)} tx results for {len(txs)} txs")
        app_hash = finalized.bytes(5)
        if len(app_hash) != 32:
            raise ProtocolError(f"app hash of {len(app_hash)} bytes")
        if set(committed.fields) - {3}:  # ResponseCommit{retain_height=3}; 1 and 2 are reserved in v0.38
            raise ProtocolError(f"ResponseCommit carries fields {list(committed.fields)}")
        return app_hash, outcomes

    def check_tx(self, tx: bytes, recheck: bool = False) -> TxOutcome:
        return tx_outcome(self.mempool.call(check_tx(tx, recheck))[0])

    def query_path(self, path: str, prove: bool = False) -> Decoded:
        # ResponseQuery{code=1, log=3, info=4, index=5, key=6, value=7, proof_ops=8, height=9, codespace=10}
        return self.query.call(query(path, prove=prove))[0]

    def close(self) -> None:
        for connection in (self.query, self.snapshot, self.mempool, self.consensus):
            connection.close()
