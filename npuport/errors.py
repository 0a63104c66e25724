"""Typed boundary errors. The CLI turns every NpuportError into a one-line message and exit code 2."""

from __future__ import annotations


class NpuportError(Exception):
    """Base class: a failure we can explain to the user in one line."""


class ConfigError(NpuportError, ValueError):
    """A bad value in a config or on the command line; the message names the value and the fix."""


class UnsupportedArchitecture(NpuportError):
    """The model's `model_type` has no adapter."""


class ModelLoadError(NpuportError):
    """A model directory is missing, incomplete or corrupt."""


class ExportError(NpuportError):
    """Capturing a module as a static graph failed."""


class BackendUnavailable(NpuportError):
    """A backend's SDK is not installed or its device is absent; the message names the install command."""


class ArtifactError(NpuportError):
    """An artifact directory is missing files, was tampered with, or does not match its source."""


class ParityError(NpuportError):
    """A compiled artifact disagrees with the eager reference beyond tolerance."""

    def __init__(self, message: str, *, max_diff: float | None = None, atol: float | None = None):
        super().__init__(message)
        self.max_diff = max_diff
        self.atol = atol


class DataError(NpuportError):
    """A data file has bad rows; the message lists file:line and the reason for each."""
