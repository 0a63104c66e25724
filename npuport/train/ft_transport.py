"""How a recovering torchft replica fetches a peer's live state: torchft's `CheckpointTransport` interface, with
safetensors on the wire instead of pickles, on an HTTP server bound to loopback (or the host named for it).

torchft ships two transports, and both unpickle what they receive (`HTTPTransport` through
`torch.load(weights_only=False)`, `PGTransport` through `pickle.loads` of its metadata); the HTTP one also binds
every interface and advertises `socket.gethostname()`. npuport never loads a pickle, so it plugs this one in
through the Manager's `checkpoint_transport` argument: the tensors travel as safetensors, the nesting (dicts, lists,
scalars: a state dict, an optimizer's state) as JSON in the safetensors header.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch
from torchft.checkpointing.transport import CheckpointTransport


def to_wire(obj) -> tuple[dict[str, torch.Tensor], str]:
    """(tensors, skeleton): the tensors by number, and the nesting as JSON (dicts with str or int keys, lists and
    tuples, scalars), which is what a state dict and an optimizer's state dict are made of."""
    tensors: dict[str, torch.Tensor] = {}

    def walk(o):
        if isinstance(o, torch.Tensor):
            name = str(len(tensors))
            tensors[name] = o.detach().contiguous().cpu()
            return ["t", name]
        if isinstance(o, dict):
            items = []
            for k, v in o.items():
                if not isinstance(k, (str, int)) or isinstance(k, bool):
                    raise TypeError(f"state key {k!r}: only str and int keys can travel")
                items.append([k, walk(v)])
            return ["d", items]
        if isinstance(o, (list, tuple)):
            return ["l", [walk(v) for v in o]]
        if o is None or isinstance(o, (bool, int, float, str)):
            return ["v", o]
        raise TypeError(f"{type(o).__name__} cannot travel as safetensors (tensors, containers and scalars only)")

    skeleton = json.dumps(walk(obj))
    return tensors, skeleton


def from_wire(tensors: dict[str, torch.Tensor], skeleton: str):
    def build(node):
        kind, body = node
        if kind == "t":
            return tensors[body]
        if kind == "d":
            return {k: build(v) for k, v in body}
        if kind == "l":
            return [build(v) for v in body]
        if kind == "v":
            return body
        raise ValueError(f"unknown node kind {kind!r} in a checkpoint skeleton")

    return build(json.loads(skeleton))


def encode(state) -> bytes:
    from safetensors.torch import save

    tensors, skeleton = to_wire(state)
    return save(tensors, metadata={"npuport_skeleton": skeleton})


def decode(data: bytes):
    from safetensors.torch import load

    tensors = load(data)
    # the metadata sits in the header: 8 bytes of little-endian length, then JSON (the safetensors format)
    header_len = int.from_bytes(data[:8], "little")
    meta = json.loads(data[8 : 8 + header_len]).get("__metadata__", {})
    if "npuport_skeleton" not in meta:
        raise ValueError("not an npuport state (no skeleton in the safetensors header)")
    return from_wire(tensors, meta["npuport_skeleton"])


class SafetensorsHTTPTransport(CheckpointTransport[dict]):
    """Serves the state staged by `send_checkpoint` at http://HOST:PORT/checkpoint/STEP until
    `disallow_checkpoint`; `recv_checkpoint` fetches a peer's."""

    def __init__(self, timeout: timedelta, host: str = "127.0.0.1"):
        self._timeout, self._host = timeout, host
        self._staged = threading.Condition()
        self._step: int | None = None
        self._payload: bytes | None = None
        transport = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                parts = self.path.strip("/").split("/")
                if len(parts) != 2 or parts[0] != "checkpoint" or not parts[1].isdigit():
                    self.send_error(400, f"expected /checkpoint/STEP, got {self.path}")
                    return
                # a recovering peer may ask before this replica has staged the step (both learn of the quorum at
                # once): wait for it, as torchft's own HTTP transport does with its lock
                with transport._staged:
                    transport._staged.wait_for(lambda: transport._step == int(parts[1]),
                                               timeout=transport._timeout.total_seconds())
                    body = transport._payload if transport._step == int(parts[1]) else None
                if body is None:
                    self.send_error(404, f"no checkpoint staged for {self.path} (serving step {transport._step})")
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):  # quiet: torchft logs the transfer itself
                pass

        self._server = ThreadingHTTPServer((host, 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="npuport-ft-transport", daemon=True)
        self._thread.start()

    def metadata(self) -> str:
        return f"http://{self._host}:{self._server.server_address[1]}/checkpoint/"

    def send_checkpoint(self, dst_ranks: list[int], step: int, state_dict: dict, timeout: timedelta) -> None:
        payload = encode(state_dict)
        with self._staged:
            self._step, self._payload = step, payload
            self._staged.notify_all()

    def disallow_checkpoint(self) -> None:
        with self._staged:
            self._step, self._payload = None, None

    def recv_checkpoint(self, src_rank: int, metadata: str, step: int, timeout: timedelta) -> dict:
        if not metadata.startswith("http://"):
            raise ValueError(f"unexpected checkpoint address {metadata!r}")
        with urllib.request.urlopen(f"{metadata}{step}", timeout=timeout.total_seconds()) as r:
            return decode(r.read())

    def shutdown(self, wait: bool = True) -> None:
        self._server.shutdown()
        self._server.server_close()
