"""The wire's discovery options (issue 55): ``--dds-peers`` (unicast discovery, multicast off:
what QEMU's user mode and multicast-less networks need) lets two processes meet on lo, and a
reader counts its matched writers through the C API where the binding (0.10.x) has no
``get_matched_publications``. DDS domains 70 and 71, loopback only, bounded in time."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.robot.conftest import require_dds

require_dds()

from orin_rl.robot import unitree_msgs as msgs  # noqa: E402
from orin_rl.robot import wire  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def peers():
    wire.use_peers(["127.0.0.1"])
    yield
    wire.use_peers(None)


def test_peers_turn_multicast_off_and_list_the_addresses(peers):
    xml = wire._domain_xml("lo", None)
    assert "<AllowMulticast>false</AllowMulticast>" in xml
    assert '<Peer address="127.0.0.1"/>' in xml and "<ParticipantIndex>auto" in xml
    wire.use_peers(None)
    assert "Peer" not in wire._domain_xml("lo", None)


WRITER = textwrap.dedent("""
    import sys, time
    from orin_rl.robot import unitree_msgs as msgs, wire
    wire.use_peers(sys.argv[2].split(",") if sys.argv[2] else None)
    p = wire.participant(int(sys.argv[1]), "lo")
    out = wire.Endpoint(p, msgs.LOWSTATE, msgs.HgLowState, "writer")
    data = msgs.HgLowState().serialize()
    end = time.monotonic() + 15
    while time.monotonic() < end:
        out.write(data)
        time.sleep(0.01)
""")


def _received_from_a_writer(domain: int, writer_peers: str, seconds: float = 8.0) -> int:
    """Messages this process (peers on) takes from a writer in another process on lo."""
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(domain), writer_peers], cwd=ROOT)
    try:
        p = wire.participant(domain, "lo")
        reader = wire.Endpoint(p, msgs.LOWSTATE, msgs.HgLowState, "reader")
        got, end = 0, time.monotonic() + seconds
        while time.monotonic() < end and got < 20:
            got += reader.take_latest() is not None
            time.sleep(0.005)
        return got
    finally:
        writer.kill()
        writer.wait(timeout=10)


def test_two_processes_meet_by_unicast_with_multicast_off(peers):
    """Both ends configured as under QEMU (multicast off, unicast to 127.0.0.1) meet on lo:
    CycloneDDS takes the domain's XML (the mutation that moves AllowMulticast into Discovery
    makes the domain fail to start) and discovery works without multicast. On this host
    CycloneDDS 11 also finds localhost with the peers list or the participant index removed
    (both mutations pass here): the XML test above pins those two."""
    assert _received_from_a_writer(70, "127.0.0.1") >= 20


def test_matched_writers_through_the_c_api_equals_the_bindings_count(monkeypatch):
    """The 0.10.x fallback (the subscription-matched status from libddsc) counts what 11.x's
    ``get_matched_publications`` counts: one writer matched, then none once it is gone."""
    p = wire.participant(71, "lo")
    reader = wire.Endpoint(p, msgs.LOWSTATE, msgs.HgLowState, "reader")
    writer = wire.Endpoint(p, msgs.LOWSTATE, msgs.HgLowState, "writer")
    end = time.monotonic() + 5
    while reader.matched_writers() < 1 and time.monotonic() < end:
        time.sleep(0.05)
    assert reader.matched_writers() == len(reader.entity.get_matched_publications()) == 1

    class Binding010:  # the reader as 0.10.x's binding has it: no get_matched_publications
        def __init__(self, entity):
            self._ref = entity._ref

    monkeypatch.setattr(reader, "entity", Binding010(reader.entity))
    assert reader.matched_writers() == 1
    writer.entity.__del__()  # the writer deleted: the current count drops to 0
    end = time.monotonic() + 5
    while reader.matched_writers() > 0 and time.monotonic() < end:
        time.sleep(0.05)
    assert reader.matched_writers() == 0


def test_release_domains_deletes_what_the_domain_held():
    """A command's last step: the domain it configured is deleted, and with it its readers
    (their next take fails: the entity is gone) and CycloneDDS's threads; the domain can be
    configured again after (mutation: release_domains returning at once)."""
    from cyclonedds.core import DDSException

    p = wire.participant(72, "lo")
    reader = wire.Endpoint(p, msgs.LOWSTATE, msgs.HgLowState, "reader")
    assert reader.take_latest() is None
    wire.release_domains()
    assert 72 not in wire._DOMAINS
    with pytest.raises(DDSException):
        reader.take_latest()
    again = wire.Endpoint(wire.participant(72, "lo"), msgs.LOWSTATE, msgs.HgLowState, "reader")
    assert again.take_latest() is None
    wire.release_domains()
