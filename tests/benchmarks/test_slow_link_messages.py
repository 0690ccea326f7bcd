"""The slow-link benchmark's parent passes each worker's published hash on to the others as soon as it comes
(they start fetching while the slower ones still train), then sends the barrier with all hashes; the workers'
messages are read as they come, none lost when several arrive together. Checked with tiny stand-in workers."""

import subprocess
import sys
import textwrap

import pytest

from benchmarks.slow_link import Messages, gather_published, send

# Publishes after `delay` seconds, then echoes every line it is sent until the barrier, in one message.
STAND_IN = textwrap.dedent("""
    import json, sys, time
    number, delay = int(sys.argv[1]), float(sys.argv[2])
    time.sleep(delay)
    print(json.dumps({"hash": f"h{number}"}), flush=True)
    received = []
    for line in sys.stdin:
        received.append(json.loads(line))
        if "hashes" in received[-1]:
            break
    print(json.dumps({"received": received}) + "\\n" + json.dumps({"after": True}), flush=True)
""")


def start(delays):
    return [subprocess.Popen([sys.executable, "-c", STAND_IN, str(number), str(delay)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, bufsize=1) for number, delay in enumerate(delays)]


def test_each_hash_reaches_the_other_workers_before_the_barrier():
    processes = start([0.3, 0.0, 0.15])  # they publish in the order 1, 2, 0
    try:
        messages = Messages(processes)
        published = gather_published(processes, messages)
        assert [m["hash"] for m in published] == ["h0", "h1", "h2"]  # in worker order, whatever the arrival
        for process in processes:
            send(process, {"hashes": ["h0", "h1", "h2"]})
        for number in range(3):
            received = messages.next_from(number)["received"]
            peers = [m for m in received if "peer" in m]
            assert sorted(m["peer"] for m in peers) == sorted(set(range(3)) - {number})
            assert all(m["hash"] == f"h{m['peer']}" for m in peers)
            assert "hashes" in received[-1]  # the barrier came after every peer's hash
            assert messages.next_from(number) == {"after": True}  # written in the same breath, not lost
    finally:
        for process in processes:
            process.kill()
            process.wait()


def test_a_worker_that_exits_is_reported_with_its_code():
    process = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    try:
        messages = Messages([process])
        with pytest.raises(RuntimeError, match="worker 0 exited with code 3"):
            messages.next_from(0)
    finally:
        process.wait()
