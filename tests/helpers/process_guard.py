"""A pytest plugin that keeps a test from replacing or ending the test process itself.

Code run in process by a test (a CLI through click's runner, a service, a library call) that calls
`os.execv`/`os.execve` would turn a pytest-xdist worker into another program, which keeps the worker's pipes
open: the controller then waits for it forever and the run never ends. `os._exit` ends the worker without a
report. In the test process (not in children it forks), these raise `ProcessReplaced` instead, which fails
the test that called them, by name, and the run goes on. A worker that dies anyway (a crash in C code) ends
the run at once, reported by pytest-xdist as "worker crashed while running <test>": restarted under
`--dist loadscope`, a worker would be handed the crashing test again until the restarts ran out, and the
run could then wait forever.

Loaded by `conftest.py` (`pytest_plugins`), and by name (`-p process_guard`) in the test that shows it works.
"""

from __future__ import annotations

import os

import pytest


class ProcessReplaced(BaseException):
    """A test tried to exec or hard-exit the test process (a BaseException, so `except Exception` in the code
    under test cannot swallow it)."""


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """No restart of a crashed xdist worker, unless the command line asks for one (xdist reads the option
    when its own, later, `pytest_configure` starts the distributed session)."""
    if getattr(config.option, "maxworkerrestart", "") is None:
        config.option.maxworkerrestart = "0"


@pytest.fixture(autouse=True, scope="session")
def _no_exec_or_hard_exit_in_the_test_process():
    guarded = os.getpid()
    originals = {name: getattr(os, name) for name in ("execv", "execve", "_exit")}

    def guard(name):
        def refuse(*arguments):
            if os.getpid() != guarded:  # a forked child: let it do what it asked
                return originals[name](*arguments)
            raise ProcessReplaced(f"os.{name}{arguments[:2]!r} called in the test process: a test must not "
                                  f"replace or end it (run the program as a subprocess instead)")
        return refuse

    with pytest.MonkeyPatch.context() as patch:
        for name in originals:  # execl/execle/execlp/execvp/execvpe all end in execv or execve
            patch.setattr(os, name, guard(name))
        yield
