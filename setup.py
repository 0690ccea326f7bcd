"""Maps the project's top-level folders under one ``trolly.`` namespace (docs/architecture.md section 1).

``chain/`` installs as ``trolly.chain``, ``wallet/`` as ``trolly.wallet`` and so on, so the generic folder
names cannot collide with other distributions' top-level modules. Everything else is in pyproject.toml.
"""

from setuptools import find_packages, setup

TOP_LEVEL = ["chain", "abci_app", "compute", "verifier", "wallet", "localnet", "console"]

packages = []
package_dir = {}
for top in TOP_LEVEL:
    package_dir[f"trolly.{top}"] = top
    packages.append(f"trolly.{top}")
    packages.extend(f"trolly.{top}.{sub}" for sub in find_packages(top))

CONSOLE_FRONT_END = ["web/index.html", "web/favicon.svg", "web/dist/*", "web/dist/worker/*"]
"""The console's page, icon and the bundles `make setup` builds, the browser worker's page in dist/worker
(console/server.py serves them from the package)."""

WASM_KERNEL = ["kernel.c", "kernel.wasm", "*.mjs"]
"""The wasm32 kernel's source, its committed build and its JavaScript (compute/wasm: what a browser loads)."""

setup(packages=packages, package_dir=package_dir,
      package_data={"": ["*.proto", "*.json"], "trolly.console": CONSOLE_FRONT_END, "trolly.compute.wasm": WASM_KERNEL})
