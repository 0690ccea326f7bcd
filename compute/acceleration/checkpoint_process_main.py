"""The checkpoint writer process: copies, hashes and stores a worker's checkpoints on its own core.

Started by `checkpoint_process.CheckpointProcess` as `python -m trolly.compute.acceleration.checkpoint_process_main
FD`, where FD is a shared memory file (memfd) holding the trainer's live weights and AdamW state (the state
arena, `state_arena.py`). It imports neither torch nor numpy's users: only the standard library and the blob
store.

Why a process: the training thread of a worker is Python driving many short PyTorch calls, each releasing and
retaking the GIL. Background *threads* that copy, hash, write and record checkpoints in the same process keep
taking the GIL in those gaps, which slowed the training steps and the update encoding beside the last
checkpoint (docs/performance.md), although each thread spent most of its time in calls that release the GIL. A process has its own GIL: the training thread only sends a 13-byte command per
checkpoint and waits for a 9-byte answer before its next optimizer step.

Protocol (all integers little-endian), on the process's stdin and stdout:

    setup    one JSON line: {"blob_root", "arena_size", "layouts": {kind: {"checkpoint_size", "headers":
             [[offset, hex]], "copies": [[arena offset, checkpoint offset, length]], "step_offset"}}};
             answered by READY. Kinds: "S" a checkpoint, "F" a round's last checkpoint (weights only)
    command  kind (b"S" or b"F"), sequence u32, step i64: copy the arena into that kind of checkpoint
             (canonical bytes, with `step` written at step_offset), answer COPIED as soon as the arena may
             change again, then hash and store the checkpoint as a blob and answer STORED with its sha256
    answer   kind (1 byte), sequence u32, payload length u32, payload: READY, COPIED, STORED (32-byte
             digest) or FAILED (a UTF-8 message)

End of input (the worker closed the pipe, or died) ends the process once what was asked is stored. Answers
come in command order. A failure is answered for the checkpoint it concerns and every later one.
"""

from __future__ import annotations

import json
import mmap
import os
import queue
import struct
import sys
import threading

from ..blobs.store import BlobStore

COMMAND = struct.Struct("<cIq")
ANSWER = struct.Struct("<cII")
SNAPSHOT, FINAL = b"S", b"F"
READY, COPIED, STORED, FAILED = b"R", b"C", b"D", b"E"
STEP = struct.Struct("<q")
BUFFERS = {SNAPSHOT: 3, FINAL: 1}  # checkpoint buffers by kind: one being copied into while others are stored


def read_exactly(stream, size: int) -> bytes:
    """`size` bytes from a binary stream, or b"" at a clean end of input; EOFError on a truncated message."""
    data = stream.read(size)
    if not data:
        return b""
    while len(data) < size:
        more = stream.read(size - len(data))
        if not more:
            raise EOFError(f"input ended inside a {size}-byte message")
        data += more
    return data


class Answers:
    """Answers to the worker, one `write` each, from either thread."""

    def __init__(self, descriptor: int) -> None:
        self._descriptor = descriptor
        self._lock = threading.Lock()

    def send(self, kind: bytes, sequence: int, payload: bytes = b"") -> None:
        message = ANSWER.pack(kind, sequence, len(payload)) + payload
        with self._lock:
            view = memoryview(message)
            while view:
                view = view[os.write(self._descriptor, view):]


class CheckpointCopier:
    """Turns the arena into checkpoint bytes of one kind: the fixed headers, each tensor's data, the step count."""

    def __init__(self, arena: mmap.mmap, layout: dict) -> None:
        self._arena = memoryview(arena)
        self.size = int(layout["checkpoint_size"])
        self._headers = [(int(offset), bytes.fromhex(data)) for offset, data in layout["headers"]]
        self._copies = [(int(source), int(target), int(length)) for source, target, length in layout["copies"]]
        self._step_offset = int(layout["step_offset"])
        for source, target, length in self._copies:
            if source < 0 or length < 0 or source + length > len(self._arena) or target + length > self.size:
                raise ValueError("a copy lies outside the arena or the checkpoint")

    def new_buffer(self) -> memoryview:
        # Anonymous mappings start on a page boundary: the store writes them with direct I/O, no bounce copy.
        buffer = memoryview(mmap.mmap(-1, max(self.size, 1)))[:self.size]
        for offset, header in self._headers:
            buffer[offset:offset + len(header)] = header
        return buffer

    def fill(self, buffer: memoryview, step: int) -> None:
        arena = self._arena
        for source, target, length in self._copies:
            buffer[target:target + length] = arena[source:source + length]
        STEP.pack_into(buffer, self._step_offset, step)


def serve(commands, answers: Answers, copiers: dict[bytes, CheckpointCopier], store: BlobStore) -> None:
    """Copy on this thread (the worker waits for COPIED), hash and store on another (it does not)."""
    free: dict[bytes, queue.SimpleQueue[memoryview]] = {}
    for kind, copier in copiers.items():
        free[kind] = queue.SimpleQueue()
        for _ in range(BUFFERS[kind]):
            free[kind].put(copier.new_buffer())
    to_store: queue.SimpleQueue = queue.SimpleQueue()
    failed: list[str] = []

    def store_loop() -> None:
        while True:
            item = to_store.get()
            if item is None:
                return
            kind, sequence, buffer = item
            if not failed:
                try:
                    digest = store.put_hashing(buffer)
                except Exception as error:  # answered; every later checkpoint fails with it
                    failed.append(f"storing checkpoint failed: {error}")
                else:
                    answers.send(STORED, sequence, bytes.fromhex(digest))
            if failed:
                answers.send(FAILED, sequence, failed[0].encode())
            free[kind].put(buffer)

    storer = threading.Thread(target=store_loop, name="checkpoint-store", daemon=True)
    storer.start()
    try:
        while True:
            message = read_exactly(commands, COMMAND.size)
            if not message:
                return
            kind, sequence, step = COMMAND.unpack(message)
            if kind not in copiers:
                raise ValueError(f"unknown command {kind!r}")
            buffer = free[kind].get()
            copiers[kind].fill(buffer, step)
            answers.send(COPIED, sequence)
            to_store.put((kind, sequence, buffer))
    finally:
        to_store.put(None)
        storer.join()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or not argv[0].isdigit():
        print("usage: python -m trolly.compute.acceleration.checkpoint_process_main ARENA_FD (started by a worker)",
              file=sys.stderr)
        return 2
    commands = sys.stdin.buffer
    answers = Answers(sys.stdout.fileno())
    setup = json.loads(commands.readline())
    arena = mmap.mmap(int(argv[0]), int(setup["arena_size"]))
    copiers = {kind.encode(): CheckpointCopier(arena, layout) for kind, layout in setup["layouts"].items()}
    if set(copiers) != set(BUFFERS):
        raise ValueError(f"the setup must give the layouts {sorted(k.decode() for k in BUFFERS)}")
    store = BlobStore(setup["blob_root"])
    answers.send(READY, 0)
    serve(commands, answers, copiers, store)
    return 0


if __name__ == "__main__":
    sys.exit(main())
