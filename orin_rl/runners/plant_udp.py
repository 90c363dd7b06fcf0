"""A plant in another process, over UDP: the worked example of a robot adapter.

A robot's computer often talks to its motor controller over a socket. This module is that
shape without the hardware: ``serve`` runs a gymnasium env as the "robot" and answers
datagrams; :class:`UdpPlant` is the adapter the online actor drives (``online.plant:
udp://HOST:PORT``). Start the server with ``orin-rl plant-server --env Pendulum-v1``.

Protocol: one JSON object per datagram, each request with a sequence number ``seq`` that
its reply echoes (a late reply to an older request is dropped, never taken for a new one).

==========================================  =================================================
request                                     reply
==========================================  =================================================
``{"op": "spaces"}``                        ``{"observation_space": B, "action_space": B}``,
                                            B = ``{"low": [...], "high": [...]}``
``{"op": "reset", "seed": S}``              ``{"obs": [...]}``
``{"op": "step", "action": [...]}``         ``{"obs", "reward", "terminated", "truncated"}``
``{"op": "close"}``                         ``{"ok": true}``; the server exits
==========================================  =================================================

A reply that does not come within ``timeout_s`` raises :class:`PlantTimeout` (the actor
stops, the supervisor checkpoints the run): a robot that stops answering is not driven blind.
"""

from __future__ import annotations

import itertools
import json
import logging
import socket
import threading
from typing import Any

import gymnasium as gym
import numpy as np

from orin_rl.runners.plant import Feedback, OnlineError, Plant

log = logging.getLogger(__name__)

MAX_DATAGRAM = 65_507


class PlantTimeout(OnlineError):
    """The plant did not answer in time."""


def _box(space: gym.spaces.Box) -> dict[str, list[float]]:
    return {"low": space.low.tolist(), "high": space.high.tolist()}


class UdpPlant(Plant):
    """The actor's side: requests to a plant server, replies matched by sequence number."""

    def __init__(self, host: str, port: int, env_id: str | None = None, timeout_s: float = 1.0):
        super().__init__()
        self.address = (host, port)
        self.timeout_s = timeout_s
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.settimeout(timeout_s)
        self._seq = itertools.count(1)
        self._sent: int | None = None
        self._io = threading.Lock()  # the watchdog's send and the actor's receive
        spaces = self._call({"op": "spaces"})
        self.observation_space = gym.spaces.Box(
            np.asarray(spaces["observation_space"]["low"], dtype=np.float32),
            np.asarray(spaces["observation_space"]["high"], dtype=np.float32),
        )
        self.action_space = gym.spaces.Box(
            np.asarray(spaces["action_space"]["low"], dtype=np.float32),
            np.asarray(spaces["action_space"]["high"], dtype=np.float32),
        )

    def _request(self, message: dict[str, Any]) -> int:
        seq = next(self._seq)
        self.sock.sendto(json.dumps({**message, "seq": seq}).encode(), self.address)
        return seq

    def _reply(self, seq: int) -> dict[str, Any]:
        while True:  # replies to older requests (a watchdog's, a timed-out one) are dropped
            try:
                data, _ = self.sock.recvfrom(MAX_DATAGRAM)
            except TimeoutError:
                raise PlantTimeout(
                    f"plant at udp://{self.address[0]}:{self.address[1]} did not answer within "
                    f"{self.timeout_s:g} s; is `orin-rl plant-server` running there?"
                ) from None
            reply = json.loads(data)
            if reply.get("seq") == seq:
                if "error" in reply:
                    raise OnlineError(f"plant server: {reply['error']}")
                return reply

    def _call(self, message: dict[str, Any]) -> dict[str, Any]:
        with self._io:
            return self._reply(self._request(message))

    def reset(self, seed: int | None = None) -> np.ndarray:
        self._sent = None
        return np.asarray(self._call({"op": "reset", "seed": seed})["obs"], dtype=np.float32)

    def send(self, action: np.ndarray) -> None:
        self._sent = self._request({"op": "step", "action": np.asarray(action).tolist()})

    def receive(self) -> Feedback:
        if self._sent is None:
            raise OnlineError("receive() before any send() in this episode")
        with self._io:
            r = self._reply(self._sent)
        return Feedback(
            np.asarray(r["obs"], dtype=np.float32),
            float(r["reward"]),
            bool(r["terminated"]),
            bool(r["truncated"]),
        )

    def close(self) -> None:
        self.sock.close()


def serve(
    env_id: str,
    host: str = "127.0.0.1",
    port: int = 5555,
    max_episode_steps: int | None = None,
    ready: threading.Event | None = None,
) -> None:
    """Run ``env_id`` as a plant server until a ``close`` request (blocking)."""
    kwargs = {} if max_episode_steps is None else {"max_episode_steps": max_episode_steps}
    env = gym.make(env_id, **kwargs)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((host, port))
    log.info("plant server: %s on udp://%s:%d", env_id, host, port)
    if ready is not None:
        ready.set()
    try:
        while True:
            data, client = sock.recvfrom(MAX_DATAGRAM)
            seq = None
            try:
                msg = json.loads(data)
                if not isinstance(msg, dict):
                    raise TypeError(f"expected a JSON object, got {type(msg).__name__}")
                op, seq = msg.get("op"), msg.get("seq")
                if op == "spaces":
                    reply = {
                        "observation_space": _box(env.observation_space),
                        "action_space": _box(env.action_space),
                    }
                elif op == "reset":
                    obs, _ = env.reset(seed=msg.get("seed"))
                    reply = {"obs": np.asarray(obs).tolist()}
                elif op == "step":
                    action = np.asarray(msg["action"], dtype=env.action_space.dtype)
                    obs, reward, terminated, truncated, _ = env.step(action)
                    reply = {
                        "obs": np.asarray(obs).tolist(),
                        "reward": float(reward),
                        "terminated": bool(terminated),
                        "truncated": bool(truncated),
                    }
                elif op == "close":
                    sock.sendto(json.dumps({"ok": True, "seq": seq}).encode(), client)
                    return
                else:
                    reply = {"error": f"unknown op {op!r}"}
            except (ValueError, KeyError, TypeError) as exc:  # a bad request, not a dead server
                reply = {"error": f"bad request: {exc}"}  # with its seq, where it had one
            sock.sendto(json.dumps({**reply, "seq": seq}).encode(), client)
    finally:
        sock.close()
        env.close()
