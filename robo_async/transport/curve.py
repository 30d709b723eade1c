"""ZMQ CURVE: encrypted, authenticated links between actors and the learner.

`robo-async keys dir=keys actors=2` writes (zmq.auth certificate files, Z85 text)::

    keys/learner.key            the learner's public key: copy it to every actor machine
    keys/learner.key_secret     the learner's secret key: stays on the learner machine
    keys/actors/actor-<id>.key_secret   actor <id>'s key pair: copy it to that actor's machine only
    keys/authorized/actor-<id>.key      the learner's allow-list: public keys, one file per actor id
    keys/authorized/actor-<id>.lanes    how many robots' streams that key may send (`lanes=`, default 1)

The learner's sockets are CURVE servers; a ZAP handler (pyzmq's ThreadAuthenticator) admits only
keys in `authorized/`, so a stranger can neither insert data nor subscribe to weights. Each
admitted connection carries its actor id and lanes as ZMQ's User-Id (`<id>:<lanes>`), and the
learner refuses data under any id but the streams that key was issued for: its own id and, for a
vectorized actor (`actor.envs`), id + j * LANE_STRIDE for j below its lanes. Remove a file from `authorized/` to
revoke an actor (read when the learner starts).

    auth = LearnerAuth(keys_dir).start()         # in the learner process, before binding
    auth.secure(sock)                            # server side, before bind
    actor_of(frame) -> int | None                # the admitted actor id of a received frame
    admitted(frame) -> (id, lanes) | None        # ... and the lanes its key was issued for
    secure_client(sock, keys_dir, actor_id)      # actor side, before connect
"""

from __future__ import annotations

import logging
import re
import shutil
import time
from pathlib import Path

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85

log = logging.getLogger(__name__)
ACTOR_FILE = re.compile(r"actor-(\d+)\.key$")
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


class KeysError(ValueError):
    """Missing or unusable key files (named)."""


def create_keys(keys_dir: Path, actor_ids: list[int], lanes: int = 1) -> list[Path]:
    """The learner's key pair (kept if it exists) and one per actor id (kept if it exists), each
    issued for `lanes` robots' streams (written again); returns the files written."""
    if not 1 <= lanes <= MAX_LANES:
        raise KeysError(f"lanes must be 1 to {MAX_LANES}, not {lanes}")
    keys_dir.mkdir(parents=True, exist_ok=True)
    (keys_dir / "actors").mkdir(exist_ok=True)
    (keys_dir / "authorized").mkdir(exist_ok=True)
    written = []
    if not (keys_dir / "learner.key_secret").exists():
        pub, sec = zmq.auth.create_certificates(keys_dir, "learner")
        written += [Path(pub), Path(sec)]
    for i in actor_ids:
        name = f"actor-{i}"
        if not (keys_dir / "actors" / f"{name}.key_secret").exists():
            pub, sec = zmq.auth.create_certificates(keys_dir / "actors", name)
            written += [Path(pub), Path(sec)]
        shutil.copy(keys_dir / "actors" / f"{name}.key", keys_dir / "authorized" / f"{name}.key")
        (keys_dir / "authorized" / f"{name}.lanes").write_text(f"{lanes}\n")
    for p in [*keys_dir.glob("*.key_secret"), *(keys_dir / "actors").glob("*.key_secret")]:
        p.chmod(0o600)
    return written


def _load(path: Path, secret: bool) -> tuple[bytes, bytes | None]:
    if not path.exists():
        raise KeysError(f"key file {path} is missing; create keys with `robo-async keys dir={path.parent}`")
    try:
        pub, sec = zmq.auth.load_certificate(path)
    except Exception as e:  # noqa: BLE001 - a damaged file: name it
        raise KeysError(f"key file {path} cannot be read: {e}") from None
    if secret and sec is None:
        raise KeysError(f"{path} holds no secret key")
    return pub, sec


def authorized(keys_dir: Path) -> dict[bytes, tuple[int, int]]:
    """Z85 public key -> (actor id, lanes), from `authorized/actor-<id>.key` and `.lanes` (1 if absent)."""
    out = {}
    for p in sorted((keys_dir / "authorized").glob("actor-*.key")):
        m = ACTOR_FILE.search(p.name)
        if m:
            out[_load(p, secret=False)[0]] = (int(m.group(1)), _lanes(p.with_suffix(".lanes")))
    if not out:
        raise KeysError(
            f"{keys_dir / 'authorized'} lists no actor keys; create them with `robo-async keys dir={keys_dir} actors=N`"
        )
    return out


def _lanes(path: Path) -> int:
    if not path.exists():
        return 1
    text = path.read_text().strip()
    if not text.isdigit() or not 1 <= int(text) <= MAX_LANES:
        raise KeysError(f"{path} must hold a lane count 1 to {MAX_LANES}, not {text[:20]!r}")
    return int(text)


class _Authenticator(ThreadAuthenticator):
    """Admits listed keys; the User-Id of a connection is its actor id; counts refusals."""

    def __init__(self, context: zmq.Context, allowed: dict[bytes, tuple[int, int]]) -> None:
        super().__init__(context, log=logging.getLogger("robo_async.transport.zap"))
        self.allowed = allowed
        self.denied = 0

    def curve_user_id(self, client_public_key: bytes) -> str:
        actor, lanes = self.allowed[z85.encode(client_public_key)]
        return f"{actor}:{lanes}"

    def callback(self, domain: str, key: bytes) -> bool:  # the credentials provider
        return key in self.allowed

    def _send_zap_reply(
        self, request_id: bytes, status_code: bytes, status_text: bytes, user_id: str = "anonymous"
    ) -> None:
        if status_code != b"200":
            self.denied += 1
            if self.denied <= 20 or self.denied % 1000 == 0:
                log.warning("refused a connection: %s (%d so far)", status_text.decode(errors="replace"), self.denied)
        super()._send_zap_reply(request_id, status_code, status_text, user_id)


class LearnerAuth:
    """The learner's side of CURVE: its key pair and a ZAP handler admitting the listed actor keys.
    `start()` before binding, `secure(sock)` on each server socket, `stop()` at the end."""

    def __init__(self, keys_dir: str | Path, ctx: zmq.Context | None = None) -> None:
        self.keys_dir = Path(keys_dir)
        self._ctx = ctx or zmq.Context.instance()
        self._auth: _Authenticator | None = None

    def start(self) -> LearnerAuth:
        """Load the learner's keys and the allow-list, start the ZAP handler; returns self."""
        self.public, self.secret = _load(self.keys_dir / "learner.key_secret", secret=True)
        allowed = authorized(self.keys_dir)
        self._auth = _Authenticator(self._ctx, allowed)
        for attempt in range(50):  # a previous authenticator of this context may still be releasing its endpoint
            try:
                self._auth.start()
                break
            except zmq.ZMQError as e:
                if e.errno != zmq.EADDRINUSE or attempt == 49:
                    raise
                time.sleep(0.05)
        self._auth.configure_curve_callback("*", credentials_provider=self._auth)
        log.info("CURVE on: %d actor key(s) admitted from %s", len(allowed), self.keys_dir / "authorized")
        return self

    def secure(self, sock: zmq.Socket) -> None:
        """Make `sock` a CURVE server with the learner's keys (before it binds)."""
        sock.curve_secretkey = self.secret
        sock.curve_publickey = self.public
        sock.curve_server = True

    @property
    def denied(self) -> int:
        """Connections refused so far (keys not on the allow-list)."""
        return self._auth.denied if self._auth is not None else 0

    def alive(self) -> bool:
        """Whether the ZAP handler's thread runs (watched: without it nobody is admitted)."""
        return self._auth is not None and self._auth.is_alive()

    def stop(self) -> None:
        """Stop the ZAP handler."""
        if self._auth is not None:
            self._auth.stop()
            self._auth = None


def admitted(frame: zmq.Frame) -> tuple[int, int] | None:
    """(actor id, lanes) ZAP admitted for the connection `frame` came on (None on a clear socket)."""
    try:
        uid = frame.get("User-Id")
    except zmq.ZMQError:
        return None
    actor, _, lanes = uid.partition(":") if isinstance(uid, str) else ("", "", "")
    return (int(actor), int(lanes)) if actor.isdigit() and lanes.isdigit() else None


def actor_of(frame: zmq.Frame) -> int | None:
    """The actor id ZAP admitted for the connection `frame` came on (None on a clear socket)."""
    key = admitted(frame)
    return None if key is None else key[0]


LANE_STRIDE = 1024  # a vectorized actor's robot j streams as its actor id + j * LANE_STRIDE
MAX_LANES = 64  # robots' streams one key may be issued for (actor.envs' own limit, MAX_ENVS)


def owns(owner: tuple[int, int] | None, claimed: int | None) -> bool:
    """Whether the key admitted as `owner` = (actor id, lanes) may send under actor id `claimed`:
    exactly the streams it was issued for, its own id + j * LANE_STRIDE for 0 <= j < lanes."""
    if owner is None or claimed is None:
        return False
    actor, lanes = owner
    j, rest = divmod(claimed - actor, LANE_STRIDE)
    # (an id from LANE_STRIDE on has its own id only: its lanes would be other actors' ids)
    return claimed == actor or (actor < LANE_STRIDE and rest == 0 and 0 <= j < lanes)


def secure_client(sock: zmq.Socket, keys_dir: str | Path, actor_id: int) -> None:
    """Make `sock` a CURVE client with actor `actor_id`'s key pair and the learner's public key
    from `keys_dir` (before it connects); a missing or damaged key file raises `KeysError`."""
    keys = Path(keys_dir)
    pub, sec = _load(keys / "actors" / f"actor-{actor_id}.key_secret", secret=True)
    server, _ = _load(keys / "learner.key", secret=False)
    sock.curve_secretkey = sec
    sock.curve_publickey = pub
    sock.curve_serverkey = server


def is_loopback(host: str) -> bool:
    """Whether `host` names this machine's loopback interface (no CURVE needed to bind there)."""
    return host in LOOPBACK or host.startswith("127.")
