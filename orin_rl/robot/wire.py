"""A numpy codec for the Unitree messages' CDR bytes: the wire at 500 Hz from Python.

cyclonedds-python (de)serialises an ``IdlStruct`` in Python field by field: for G1's LowState_
(35 nested motor structs) about 0.9 ms each way on this project's CPU box, half a core at
Unitree's 500 Hz. The bytes themselves are fixed: a final struct of fixed-size fields is, in
XCDR1, the 4-byte encapsulation header (``00 01 00 00``, little-endian CDR) and then each
primitive aligned to its own size (structs add no alignment of their own). ``Layout`` walks
the ``IdlStruct`` annotations once and finds every leaf field's byte offsets; ``decode`` and
``encode`` then gather and scatter whole fields with numpy (microseconds). ``tests/robot``
holds the bytes equal to cyclonedds's own serialiser and to Unitree's IDL-generated types.

``Endpoint`` writes and takes those bytes through cyclonedds's C layer (the same calls its
``DataWriter.write`` and ``DataReader.take`` make after their Python (de)serialisation).
"""

from __future__ import annotations

import logging
import typing
from typing import Any

import numpy as np

_PRIMITIVES = {
    "uint8": "u1",
    "int8": "i1",
    "uint16": "<u2",
    "int16": "<i2",
    "uint32": "<u4",
    "int32": "<i4",
    "float32": "<f4",
    "float64": "<f8",
    "uint64": "<u8",
    "int64": "<i8",
}
log = logging.getLogger(__name__)

HEADER = b"\x00\x01\x00\x00"
"""XCDR1 encapsulation, little-endian."""


class Layout:
    """Byte offsets of every leaf field of a fixed-size final ``IdlStruct`` in its CDR bytes.

    Leaves are named by path, ``[]`` marking an array of structs (``motor_state[].q``); each a numpy
    dtype and the offsets of its elements, in order (``shape`` gives their array shape)."""

    def __init__(self, cls: type):
        self.cls = cls
        self.fields: dict[str, tuple[np.dtype, np.ndarray, tuple[int, ...]]] = {}
        self._leaves: dict[str, list[int]] = {}
        self._shapes: dict[str, tuple[int, ...]] = {}
        self._dtypes: dict[str, np.dtype] = {}
        end = self._walk(cls, 0, "", ())
        self.size = len(HEADER) + end
        for name, offsets in self._leaves.items():
            self.fields[name] = (
                self._dtypes[name],
                np.asarray(offsets, dtype=np.intp) + len(HEADER),
                self._shapes[name],
            )
        self._gather = {
            name: (dtype, offsets[:, None] + np.arange(dtype.itemsize), shape)
            for name, (dtype, offsets, shape) in self.fields.items()
        }

    def _walk(self, cls: type, offset: int, prefix: str, shape: tuple[int, ...]) -> int:
        hints = typing.get_type_hints(cls, include_extras=True)
        for name in cls.__dataclass_fields__:
            offset = self._member(hints[name], offset, f"{prefix}{name}", shape)
        return offset

    def _member(self, hint: Any, offset: int, path: str, shape: tuple[int, ...]) -> int:
        args = typing.get_args(hint)
        meta = args[1] if len(args) > 1 else None
        if isinstance(meta, str) and meta in _PRIMITIVES:
            dtype = np.dtype(_PRIMITIVES[meta])
            offset += -offset % dtype.itemsize
            self._leaves.setdefault(path, []).append(offset)
            self._dtypes[path], self._shapes[path] = dtype, shape
            return offset + dtype.itemsize
        if meta is not None and hasattr(meta, "subtype") and hasattr(meta, "length"):
            sub = meta.subtype
            for _ in range(meta.length):
                if isinstance(sub, type):
                    offset = self._walk(sub, offset, f"{path}[].", (*shape, meta.length))
                else:
                    offset = self._member(sub, offset, path, (*shape, meta.length))
            return offset
        if isinstance(hint, type) and hasattr(hint, "__dataclass_fields__"):
            return self._walk(hint, offset, f"{path}.", shape)
        raise TypeError(f"{path}: {hint!r} is not a fixed-size CDR field")

    def decode(self, data: bytes, names: typing.Iterable[str]) -> dict[str, np.ndarray]:
        """The named leaves of a message's bytes, as arrays of their shapes."""
        raw = np.frombuffer(data, dtype=np.uint8)
        out = {}
        for name in names:
            dtype, index, shape = self._gather[name]
            out[name] = raw[index].view(dtype).reshape(shape)
        return out

    def encode(self, values: dict[str, Any], into: bytearray | None = None) -> bytearray:
        """A message's bytes with the named leaves set (the rest zero, or left as ``into``)."""
        buf = into if into is not None else bytearray(HEADER + bytes(self.size - len(HEADER)))
        raw = np.frombuffer(buf, dtype=np.uint8)
        for name, value in values.items():
            dtype, index, shape = self._gather[name]
            array = np.ascontiguousarray(np.broadcast_to(np.asarray(value, dtype=dtype), shape))
            raw[index] = array.reshape(-1).view(np.uint8).reshape(index.shape)
        return buf


def binding_major() -> int:
    """The CycloneDDS Python binding's major release (0 for 0.10.x, 11 for 11.0.x)."""
    from importlib import metadata

    return int(metadata.version("cyclonedds").split(".")[0])


class Endpoint:
    """One topic's reader or writer on a participant, moving raw CDR bytes."""

    def __init__(self, participant: Any, topic_name: str, cls: type, kind: str, depth: int = 1):
        from cyclonedds._clayer import ddspy_take, ddspy_write
        from cyclonedds.core import DDSException, InstanceState, Policy, Qos, SampleState, ViewState
        from cyclonedds.pub import DataWriter
        from cyclonedds.sub import DataReader
        from cyclonedds.topic import Topic

        self.topic = Topic(participant, topic_name, cls)
        qos = Qos(Policy.History.KeepLast(depth))
        if kind == "reader":
            self.entity = DataReader(participant, self.topic, qos=qos)
        else:
            self.entity = DataWriter(participant, self.topic, qos=qos)
        # bound once: these run at 500 Hz
        self._write, self._take, self._error = ddspy_write, ddspy_take, DDSException
        # The binding's C layer: 11.x takes (reader, mask, n); 0.10.x (Debian's and Ubuntu's
        # CycloneDDS, what aarch64 builds against) takes (reader, n), every sample state.
        mask = SampleState.Any | ViewState.Any | InstanceState.Any
        self._take_args = (mask, 8) if binding_major() >= 11 else (8,)

    def write(self, data: bytes | bytearray) -> None:
        """Publish one message's CDR bytes."""
        ret = self._write(self.entity._ref, bytes(data))
        if ret < 0:
            raise self._error(ret, f"writing {self.topic.name}")

    def matched_writers(self) -> int:
        """How many writers this reader is matched with now (0.10.x has no
        ``get_matched_publications``: the subscription-matched status' current count)."""
        get = getattr(self.entity, "get_matched_publications", None)
        if get is not None:
            return len(get())
        import ctypes

        from cyclonedds.internal import dds_c_t, load_cyclonedds

        status = dds_c_t.subscription_matched_status()
        ret = load_cyclonedds().dds_get_subscription_matched_status(
            self.entity._ref, ctypes.byref(status)
        )
        if ret < 0:
            raise self._error(ret, f"matched writers of {self.topic.name}")
        return int(status.current_count)

    def take_latest(self) -> bytes | None:
        """The newest message's bytes not taken yet, or None."""
        ret = self._take(self.entity._ref, *self._take_args)
        if isinstance(ret, int):
            raise self._error(ret, f"taking {self.topic.name}")
        latest = None
        for data, info in ret:
            if info.valid_data:
                latest = data
        return latest


_PEERS: list[str] = []
"""Unicast discovery peers for the domains this process configures (``use_peers``)."""
_DOMAINS: dict[int, tuple[Any, str | None]] = {}
"""Domains configured by this process (CycloneDDS configures a domain once a process)."""
_BY_NAME: dict[int, str | None] = {}
"""The vendors each configured domain matches by type name."""

FAST_DDS_VENDOR = "1.15"
"""eProsima's RTPS vendor id (Fast DDS: ROS 2's default RMW)."""


def check_interface(interface: str | None) -> None:
    """A network interface this machine has, or a one-line error (before CycloneDDS, which
    prints its own lines and takes seconds to give up on a name it cannot find)."""
    import socket

    from orin_rl.robot import RobotError

    names = [name for _, name in socket.if_nameindex()]
    if interface and interface not in names:
        raise RobotError(
            f"no network interface {interface!r} on this machine (it has {', '.join(names)}): "
            "name one of them (lo for a twin here, the robot's network one, e.g. eth0)"
        )


def use_peers(addresses: list[str] | None) -> None:
    """Discover by unicast to ``addresses`` with multicast off, in every domain this process
    configures from now on (``--dds-peers``): for networks without multicast, and for QEMU's
    user-mode emulation, which lacks ``IP_MULTICAST_IF`` (tools/aarch64_check.sh). Both ends
    need it: a peer that announces itself by multicast alone is not heard."""
    _PEERS[:] = list(addresses or [])


def release_domains() -> None:
    """Delete every CycloneDDS entity this process holds (readers, writers, topics,
    participants), then the domains it configured, and with them CycloneDDS's threads: a
    command's last step (``run --plant``, ``sim-robot``). Left to the interpreter's exit, the
    arm64 plant under QEMU crashed in the teardown (SIGSEGV, heap corruption) after writing its
    report, 3 runs of 3, also with the domains alone deleted first; with every entity deleted
    first it exits with its own code. The binding has no public delete: ``__del__`` is it,
    called while the object lives (the garbage collector's call deletes nothing: the weak
    registry it checks has dropped the entity by then, in 0.10.2 as in 11.0.1)."""
    import gc
    import sys

    if "cyclonedds.core" not in sys.modules:  # nothing of the wire was made (or can be)
        return
    from cyclonedds.core import Entity

    gc.collect()
    domains = [domain for domain, _ in _DOMAINS.values()]
    for entity in list(Entity._entities.values()):
        if all(entity is not domain for domain in domains):
            entity.__del__()
    for domain in domains:
        domain.__del__()
    _DOMAINS.clear()
    _BY_NAME.clear()


def _domain_xml(interface: str | None, by_name: str | None) -> str:
    interfaces = (
        "<Interfaces>"
        f'<NetworkInterface name="{interface}" priority="default" multicast="default"/>'
        "</Interfaces>"
        if interface
        else ""
    )
    multicast = "<AllowMulticast>false</AllowMulticast>" if _PEERS else ""
    general = f"<General>{interfaces}{multicast}</General>" if interfaces or multicast else ""
    # auto: each participant takes the first free index, i.e. a well-known unicast port, which
    # is where the peers' discovery messages go.
    discovery = (
        "<Discovery><ParticipantIndex>auto</ParticipantIndex><Peers>"
        + "".join(f'<Peer address="{address}"/>' for address in _PEERS)
        + "</Peers></Discovery>"
        if _PEERS
        else ""
    )
    compatibility = (
        f"<Compatibility><IgnoreTypeInformation>{by_name}</IgnoreTypeInformation></Compatibility>"
        if by_name
        else ""
    )
    return f"<CycloneDDS><Domain>{general}{discovery}{compatibility}</Domain></CycloneDDS>"


def _configure(domain: int, interface: str | None, by_name: str | None) -> Any:
    """The domain's configuration; without ``by_name`` where this CycloneDDS lacks the option."""
    from cyclonedds.core import DDSException
    from cyclonedds.domain import Domain

    try:
        return Domain(domain, _domain_xml(interface, by_name))
    except DDSException:
        if not by_name:
            raise
    log.warning(
        "this CycloneDDS has no Compatibility/IgnoreTypeInformation (CycloneDDS >= 11 has): "
        "ROS 2 nodes on Fast DDS may not receive topics with sequences (joint_states, "
        "diagnostics) from it"
    )
    return Domain(domain, _domain_xml(interface, None))


def participant(domain: int, interface: str | None, match_by_name: str | None = None) -> Any:
    """A DDS participant on ``domain``, bound to network ``interface`` (``lo``: this machine
    only) where given; Unitree's SDK configures CycloneDDS the same way. ``match_by_name``:
    RTPS vendor ids (``FAST_DDS_VENDOR``) whose endpoints match on type names, their type
    information ignored (CycloneDDS cannot resolve Fast DDS's for types with sequences, so
    would never match them). A process configures each domain once: later participants on it
    share that configuration."""
    from cyclonedds.core import DDSException
    from cyclonedds.domain import DomainParticipant

    from orin_rl.robot import RobotError

    check_interface(interface)
    if match_by_name and domain in _DOMAINS and _BY_NAME.get(domain) != match_by_name:
        log.warning(
            "DDS domain %d was configured in this process before, without matching vendor %s "
            "by type name: its ROS 2 topics may not reach Fast DDS nodes; create the ROS 2 "
            "bridge first, or give it its own domain",
            domain,
            match_by_name,
        )
    if (interface or match_by_name or _PEERS) and domain not in _DOMAINS:
        _BY_NAME[domain] = match_by_name
        try:
            _DOMAINS[domain] = (_configure(domain, interface, match_by_name), interface)
        except DDSException as exc:
            raise RobotError(
                f"DDS cannot start on interface {interface!r} (domain {domain}): {exc}; name "
                "an interface this machine has (`ip link`: lo for a twin here, the robot's "
                "network one, e.g. eth0)"
            ) from None
    elif interface and _DOMAINS[domain][1] != interface:
        raise RobotError(
            f"DDS domain {domain} is bound to {_DOMAINS[domain][1]} in this process, not "
            f"{interface}: use another domain id"
        )
    try:
        return DomainParticipant(domain)
    except DDSException as exc:
        raise RobotError(f"DDS cannot join domain {domain}: {exc}") from None
