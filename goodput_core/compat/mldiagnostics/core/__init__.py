"""The SDK's ``core`` package at the same relative path: ``core.xprof``."""

from goodput_core.compat.mldiagnostics.core import xprof

__all__ = ["xprof"]
