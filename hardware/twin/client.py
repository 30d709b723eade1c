"""A client of a twin's control socket (server.py lists its commands): tests, benchmarks and the
virtual operator send it commands and read the replies.
"""

from __future__ import annotations

import msgpack
import numpy as np
import zmq


class TwinControl:
    """A client of a twin's control socket (tests, benchmarks, the virtual operator)."""

    def __init__(self, address: str, timeout_ms: int = 5000) -> None:
        self._ctx = zmq.Context.instance()
        self.address, self.timeout_ms = address, timeout_ms
        self._sock = self._connect()

    def _connect(self) -> zmq.Socket:
        s = self._ctx.socket(zmq.REQ)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.RCVTIMEO, self.timeout_ms)
        s.connect(self.address)
        return s

    def __call__(self, cmd: str, **fields: object) -> dict:
        """Send one command; its reply (raises RuntimeError on the twin's error or a timeout)."""
        for k, v in fields.items():
            if isinstance(v, np.ndarray):
                fields[k] = v.tolist()
        self._sock.send(msgpack.packb({"cmd": cmd, **fields}))
        try:
            reply = msgpack.unpackb(self._sock.recv(), raw=False)
        except zmq.Again:
            self._sock.close()
            self._sock = self._connect()
            raise RuntimeError(f"twin at {self.address} did not answer {cmd!r}") from None
        if "error" in reply:
            raise RuntimeError(f"twin: {reply['error']}")
        return reply

    def close(self) -> None:
        """Close the socket."""
        self._sock.close()
