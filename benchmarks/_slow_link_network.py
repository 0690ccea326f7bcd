"""Network namespaces joined by a bridge, each link shaped with tc tbf, torn down in every case.

Layout: a switch namespace holding bridge `br0`; per worker a namespace with one end of a veth pair (address
10.77.0.<i+1>/24), the other end enslaved to the bridge. Each veth end gets `tbf rate <rate>mbit`, so both
directions of every worker's link are shaped. The root namespace is not touched (no forwarding, no routes).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

SUBNET = "10.77.0"


def run(*command: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(command, check=check, capture_output=True, text=True, timeout=30)


def namespace_support_problem() -> str | None:
    """None if this process can create namespaces and shape links, else the reason it cannot."""
    if os.geteuid() != 0:
        return "not root"
    probe = f"trlprobe{os.getpid() % 100000}"
    try:
        result = run("ip", "netns", "add", probe, check=False)
        if result.returncode != 0:
            return f"ip netns add failed: {result.stderr.strip()}"
        result = run("ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", "100mbit",
                     "burst", "64kb", "latency", "100ms", check=False)
        if result.returncode != 0:
            return f"tc tbf failed: {result.stderr.strip()}"
        return None
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"cannot run ip/tc: {error}"
    finally:
        run("ip", "netns", "del", probe, check=False)


class ShapedNetwork:
    def __init__(self, workers: int, rate_mbit: int) -> None:
        tag = f"{os.getpid() % 10000}"
        self.switch = f"trlsw{tag}"
        self.worker_namespaces = [f"trlw{tag}-{index}" for index in range(workers)]
        self.addresses = [f"{SUBNET}.{index + 1}" for index in range(workers)]
        self.rate_mbit = rate_mbit
        self.tag = tag
        self.measured_mbit: float | None = None
        self._created: list[str] = []

    def __enter__(self) -> "ShapedNetwork":
        try:
            self._build()
            self.measured_mbit = self._measure()
        except BaseException:
            self._teardown()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self._teardown()

    def _shape(self, namespace: str, device: str) -> None:
        # burst >= rate / HZ keeps tbf from capping below the rate; the latency bounds its queue.
        run("ip", "netns", "exec", namespace, "tc", "qdisc", "add", "dev", device, "root", "tbf",
            "rate", f"{self.rate_mbit}mbit", "burst", "64kb", "latency", "200ms")

    def _build(self) -> None:
        run("ip", "netns", "add", self.switch)
        self._created.append(self.switch)
        run("ip", "netns", "exec", self.switch, "ip", "link", "add", "br0", "type", "bridge")
        run("ip", "netns", "exec", self.switch, "ip", "link", "set", "br0", "up")
        for index, (namespace, address) in enumerate(zip(self.worker_namespaces, self.addresses)):
            run("ip", "netns", "add", namespace)
            self._created.append(namespace)
            inner, outer = f"tw{self.tag}i{index}", f"tw{self.tag}o{index}"
            run("ip", "link", "add", inner, "type", "veth", "peer", "name", outer)
            run("ip", "link", "set", inner, "netns", namespace)
            run("ip", "link", "set", outer, "netns", self.switch)
            run("ip", "netns", "exec", namespace, "ip", "addr", "add", f"{address}/24", "dev", inner)
            run("ip", "netns", "exec", namespace, "ip", "link", "set", inner, "up")
            run("ip", "netns", "exec", namespace, "ip", "link", "set", "lo", "up")
            run("ip", "netns", "exec", self.switch, "ip", "link", "set", outer, "master", "br0")
            run("ip", "netns", "exec", self.switch, "ip", "link", "set", outer, "up")
            self._shape(namespace, inner)
            self._shape(self.switch, outer)

    def _measure(self) -> float:
        """Send 8 MB from worker 1 to worker 0 over the shaped link; returns Mbit/s."""
        size = 8 * 1024 * 1024
        receiver = subprocess.Popen(
            ["ip", "netns", "exec", self.worker_namespaces[0], sys.executable, "-c",
             "import socket,sys\ns=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
             f"s.bind(('{self.addresses[0]}',8699));s.listen(1);print('up',flush=True)\nc,_=s.accept();n=0\n"
             "while True:\n d=c.recv(1<<20)\n if not d: break\n n+=len(d)\nprint(n,flush=True)"],
            stdout=subprocess.PIPE, text=True)
        try:
            receiver.stdout.readline()
            result = run("ip", "netns", "exec", self.worker_namespaces[1], sys.executable, "-c",
                         "import socket,time\ns=socket.create_connection(('%s',8699));t=time.perf_counter()\n"
                         "s.sendall(b'x'*%d);s.shutdown(socket.SHUT_WR);s.recv(1);print(time.perf_counter()-t)"
                         % (self.addresses[0], size))
            received = int(receiver.stdout.readline())
            seconds = float(result.stdout.strip())
            return round(received * 8 / seconds / 1e6, 1)
        finally:
            receiver.kill()
            receiver.wait()

    def _teardown(self) -> None:
        # Deleting a namespace destroys its veth ends and their qdiscs with it.
        for namespace in reversed(self._created):
            run("ip", "netns", "del", namespace, check=False)
        self._created.clear()
