"""Typed boundary errors, and the one exit-code table the CLI answers with.

    0   ok
    1   a check failed: parity, file hashes, source hash, signature (CheckFailed)
    2   bad input or environment: usage, missing files, unknown names, unavailable runtime (any other NpuportError)
    3   internal error: anything unexpected (one line + "rerun with --debug")
    130 interrupted (Ctrl-C)
"""

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


EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class CheckFailed(NpuportError):
    """A check npuport exists to make came out negative (exit code 1), as opposed to bad input (exit code 2)."""


class ArtifactError(NpuportError):
    """An artifact directory is missing, unreadable or not an npuport artifact."""


class IntegrityError(ArtifactError, CheckFailed):
    """An artifact's files, source model or signature do not match its manifest."""


class DataError(NpuportError):
    """A data file has bad rows; the message lists file:line and the reason for each."""
