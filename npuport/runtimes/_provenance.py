"""Node provenance shared instead of deep-copied while ExecuTorch lowers a graph (the Ethos-U compile's hot spot).

Every ExecuTorch pass retraces the graph, and torch.fx records each new node's origin as a `NodeSource` that
deep-copies the origin's own history (`node.meta["from_node"]`). Histories grow by one record per pass, so a lowering
of ~130 passes copies ever longer chains for every node: quadratic in the pass count, and the largest single share of
an Ethos-U compile (py-spy on a port, `benchmarks/ethosu_profile.py`). The records are never changed after they are
built (torch.fx only appends to a node's own list, and from_dict builds new ones), so sharing them and copying only
the outer list keeps every history, and its serialised form, as it was. This is the change proposed upstream in
pytorch/pytorch#193051 ("Shallow-copy from_node provenance in NodeSource instead of deepcopy"); it is applied only
inside `shared_provenance()`, and only to a torch whose NodeSource still deep-copies (checked from its source).
"""

from __future__ import annotations

import contextlib
import copy as _copy
import functools
import inspect
import types


def _history_copy(x, memo=None):
    if isinstance(x, list):
        return list(x)  # a new outer list: later appends to the node's list stay out of this record
    return _copy.deepcopy(x, memo)


@functools.cache
def _deep_copies() -> bool:
    """Whether this torch's NodeSource still deep-copies its origin's history (False once upstream changed it)."""
    from torch.fx import traceback as fxtb

    try:
        return 'copy.deepcopy(node.meta["from_node"])' in inspect.getsource(fxtb.NodeSource.__init__)
    except (OSError, TypeError):
        return False


@contextlib.contextmanager
def shared_provenance():
    from torch.fx import traceback as fxtb

    if not _deep_copies() or getattr(fxtb, "copy", None) is not _copy:
        yield  # another torch, or already inside: nothing to change
        return
    fxtb.copy = types.SimpleNamespace(copy=_copy.copy, deepcopy=_history_copy)
    try:
        yield
    finally:
        fxtb.copy = _copy
