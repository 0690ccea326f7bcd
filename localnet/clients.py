"""Verifier and worker processes of a localnet."""

from __future__ import annotations

from .layout import Layout, LocalnetConfig
from .supervisor import ServiceSpec


def client_services(layout: Layout, config: LocalnetConfig) -> list[ServiceSpec]:
    return []
