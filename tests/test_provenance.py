"""The Ethos-U compile's provenance change (npuport/runtimes/_provenance.py): node histories are shared, not
deep-copied, and nothing a reader of the history sees changes. The whole compile under it is covered by
test_ethosu.py's exact proof (fake-quantised PyTorch == the TOSA reference model, 0.0)."""

import copy

import torch
from torch.fx import traceback as fxtb

from npuport.runtimes._provenance import shared_provenance


def _node_with_history(depth: int):
    gm = torch.fx.symbolic_trace(torch.nn.ReLU())
    node = next(n for n in gm.graph.nodes if n.op not in ("placeholder", "output"))
    for i in range(depth):  # a node retraced by `depth` passes, each recording where it came from
        node.meta["from_node"] = [fxtb.NodeSource(node, f"pass_{i}", fxtb.NodeSourceAction.CREATE)]
    return node


def test_history_is_shared_and_reads_the_same():
    node = _node_with_history(6)
    want = fxtb.NodeSource(node, "next", fxtb.NodeSourceAction.CREATE)
    with shared_provenance():
        got = fxtb.NodeSource(node, "next", fxtb.NodeSourceAction.CREATE)
        assert fxtb.copy is not copy
    assert fxtb.copy is copy  # torch is left as it was
    assert got.to_dict() == want.to_dict() and got.print_readable() == want.print_readable()
    assert len(got.to_dict()["from_node"][0]["from_node"]) == 1  # the chain is all there, 6 deep
    # shared records, but a snapshot of the list: what is appended to the node later is not in this record
    assert got.from_node[0] is node.meta["from_node"][0] and got.from_node is not node.meta["from_node"]
    node.meta["from_node"].append(fxtb.NodeSource(None, "later"))
    assert len(got.from_node) == 1


def test_nested_use_and_an_error_inside_restore_torch():
    try:
        with shared_provenance():
            with shared_provenance():
                pass
            assert fxtb.copy is not copy  # the inner exit did not undo the outer
            raise KeyError("inside")
    except KeyError:
        pass
    assert fxtb.copy is copy
