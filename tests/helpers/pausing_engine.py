"""The solo engine with a step observer that stops it once at a block's step: crash tests kill the app there.

    python tests/helpers/pausing_engine.py --pause <step>:<height|txs> --home H --proxy-app ADDR --rpc-laddr ADDR
                                   [--block-time 100ms]

`step` is one of the producer's `STEPS`; `height` a number, or `txs` for the first block that carries
transactions. There the engine writes `H/data/engine-paused-<step>-<height>` (holding its pid) and waits
until the file is deleted. Everything else is `trolly-node engine` as it runs in a node.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib

import uvloop

from trolly.abci_app.cli import _run_engine, parse_duration
from trolly.abci_app.engine.producer import STEPS


class PauseOnce:
    """A `StepObserver` that waits at (step, height) until its marker file is removed, the first time only."""

    def __init__(self, step: str, height: int | None, data_dir: pathlib.Path) -> None:
        self.step, self.height, self.data_dir = step, height, data_dir
        self.done = False

    async def reached(self, step: str, height: int, has_txs: bool) -> None:
        if self.done or step != self.step or not (height == self.height or (self.height is None and has_txs)):
            return
        self.done = True
        marker = self.data_dir / f"engine-paused-{step}-{height}"
        marker.write_text(str(os.getpid()))
        while marker.exists():
            await asyncio.sleep(0.02)


def parse_pause(text: str) -> tuple[str, int | None]:
    step, _, height = text.partition(":")
    if step not in STEPS or not (height.isdigit() or height == "txs"):
        raise argparse.ArgumentTypeError(f"{text!r}: expected <{'|'.join(STEPS)}>:<height|txs>")
    return step, None if height == "txs" else int(height)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pause", type=parse_pause, required=True)
    parser.add_argument("--home", type=pathlib.Path, required=True)
    parser.add_argument("--proxy-app", required=True)
    parser.add_argument("--rpc-laddr", required=True)
    parser.add_argument("--block-time", default="100ms")
    arguments = parser.parse_args()
    step, height = arguments.pause
    observer = PauseOnce(step, height, arguments.home / "data")
    uvloop.run(_run_engine(arguments.home, arguments.proxy_app, arguments.rpc_laddr,
                           parse_duration(arguments.block_time), step_observer=observer))


if __name__ == "__main__":
    main()
