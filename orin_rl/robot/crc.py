"""Unitree's CRC-32 of a low-level command, table-driven (numpy), without Unitree's library.

Unitree SDK2 (``crc.h`` in C++, ``utils/crc.py`` in Python) packs the message as the C struct
(little-endian, 4-byte aligned), reads it as uint32 words, drops the last (the ``crc`` field
itself) and runs this over the words, most significant bit first:

    crc = 0xFFFFFFFF
    for each word, for each bit b from 31 down to 0:
        crc = (crc << 1) ^ (POLY if crc's top bit was set else 0)    (mod 2^32)
        if bit b of the word is set: crc ^= POLY

with POLY = 0x04C11DB7, no reflection, no final XOR. That is linear over GF(2) in the initial
value and the data bits, so for a fixed message length the CRC is a constant XOR the
contributions of each byte at each position: ``Crc32(n_words)`` tabulates them once (one
(4n, 256) uint32 table) and a CRC is then one gather and one XOR-reduce (tens of
microseconds for G1's 250 words; the bit loop in Python takes milliseconds, too slow for a
500 Hz command stream).
"""

from __future__ import annotations

import struct
from functools import lru_cache

import numpy as np

POLY = 0x04C11DB7
INIT = 0xFFFFFFFF
MASK = 0xFFFFFFFF

HG_LOWCMD_FORMAT = "<2B2x" + "B3x5fI" * 35 + "5I"
"""``unitree_hg`` LowCmd_ as Unitree's CRC packs it (1,004 bytes): mode_pr, mode_machine, 35 ×
(mode, q, dq, tau, kp, kd, reserve), reserve[4], crc."""


def crc32_words_reference(words: list[int]) -> int:
    """The bit loop itself (module docstring): the reference the tables are tested against."""
    crc = INIT
    for current in words:
        bit = 1 << 31
        for _ in range(32):
            crc = ((crc << 1) & MASK) ^ (POLY if crc & 0x80000000 else 0)
            if current & bit:
                crc ^= POLY
            bit >>= 1
    return crc


def _shift(x: np.ndarray) -> np.ndarray:
    """One bit step with no data: (x << 1) ^ POLY where x's top bit was set."""
    return ((x << np.uint64(1)) & np.uint64(MASK)) ^ np.where(
        x & np.uint64(0x80000000), np.uint64(POLY), np.uint64(0)
    )


def _advance_tables() -> np.ndarray:
    """(4, 256): the 32-bit-step map A applied to each byte at each position (A is linear,
    so A(x) is the XOR of its four bytes' entries)."""
    values = np.arange(256, dtype=np.uint64)
    tables = np.zeros((4, 256), dtype=np.uint64)
    for position in range(4):
        x = values << np.uint64(8 * position)
        for _ in range(32):
            x = _shift(x)
        tables[position] = x
    return tables


def _advance(x: np.ndarray, tables: np.ndarray) -> np.ndarray:
    out = np.zeros_like(x)
    for position in range(4):
        out ^= tables[position][(x >> np.uint64(8 * position)) & np.uint64(0xFF)]
    return out


def _data_tables() -> np.ndarray:
    """(4, 256): what a word's byte at each position XORs in during its own 32 steps: bit b
    of the word adds POLY after step 31 − b, shifted b more times."""
    powers = np.zeros(32, dtype=np.uint64)  # S^b(POLY)
    x = np.array([POLY], dtype=np.uint64)
    for b in range(32):
        powers[b] = x[0]
        x = _shift(x)
    tables = np.zeros((4, 256), dtype=np.uint64)
    for position in range(4):
        for value in range(256):
            acc = 0
            for k in range(8):
                if value >> k & 1:
                    acc ^= int(powers[8 * position + k])
            tables[position, value] = acc
    return tables


class Crc32:
    """Unitree's CRC of messages of ``n_words`` words (the ``crc`` word excluded)."""

    def __init__(self, n_words: int):
        advance, data = _advance_tables(), _data_tables()
        table = np.zeros((n_words, 4, 256), dtype=np.uint64)
        table[-1] = data
        for k in range(n_words - 2, -1, -1):  # word k is followed by n − 1 − k advances
            table[k] = _advance(table[k + 1], advance)
        self.table = table.reshape(n_words * 4, 256).astype(np.uint32)
        self._rows = np.arange(n_words * 4) * 256
        constant = np.array([INIT], dtype=np.uint64)
        for _ in range(n_words):
            constant = _advance(constant, advance)
        self.constant = np.uint32(constant[0])
        self.n_words = n_words

    def of_bytes(self, packed: bytes | np.ndarray) -> int:
        """CRC of the packed message (``4 * (n_words + 1)`` bytes, the crc word last)."""
        data = np.frombuffer(packed, dtype=np.uint8)[: self.n_words * 4]
        if data.size != self.n_words * 4:
            raise ValueError(f"expected {4 * (self.n_words + 1)} bytes, got {len(packed)}")
        picked = self.table.reshape(-1)[self._rows + data]
        return int(np.bitwise_xor.reduce(picked) ^ self.constant)


@lru_cache(maxsize=4)
def crc_for(n_words: int) -> Crc32:
    """One table per message length, made once (about 10 ms for G1's 250 words)."""
    return Crc32(n_words)


HG_LOWCMD_STRUCT = np.dtype(
    [
        ("mode_pr", "u1"),
        ("mode_machine", "u1"),
        (
            "motor_cmd",
            [
                ("mode", "u1"),
                ("q", "<f4"),
                ("dq", "<f4"),
                ("tau", "<f4"),
                ("kp", "<f4"),
                ("kd", "<f4"),
                ("reserve", "<u4"),
            ],
            (35,),
        ),
        ("reserve", "<u4", (4,)),
        ("crc", "<u4"),
    ],
    align=True,
)
"""The C struct ``HG_LOWCMD_FORMAT`` packs, as a numpy record (fill it, then ``of_bytes``)."""
if HG_LOWCMD_STRUCT.itemsize != struct.calcsize(HG_LOWCMD_FORMAT):  # numpy's C alignment
    raise ImportError("HG_LOWCMD_STRUCT does not match Unitree's packed LowCmd_ layout")

MOTOR_FIELDS = ("mode", "q", "dq", "tau", "kp", "kd", "reserve")
"""A ``unitree_hg`` MotorCmd_'s fields, in order."""


def hg_lowcmd_crc_of(mode_pr: int, mode_machine: int, motors: dict, reserve=(0, 0, 0, 0)) -> int:
    """Unitree's CRC of a ``unitree_hg`` LowCmd_ given as values: ``motors`` maps each of
    ``MOTOR_FIELDS`` to its 35 values (a missing field is zero). What the plant publishes and
    what the twin checks."""
    packed = np.zeros((), dtype=HG_LOWCMD_STRUCT)
    packed["mode_pr"], packed["mode_machine"], packed["reserve"] = mode_pr, mode_machine, reserve
    for name, values in motors.items():
        packed["motor_cmd"][name] = values
    return crc_for(HG_LOWCMD_STRUCT.itemsize // 4 - 1).of_bytes(packed.tobytes())


def hg_lowcmd_crc(cmd) -> int:
    """Unitree's ``CRC().Crc(cmd)`` of a ``unitree_hg`` LowCmd_ object (ours or Unitree's)."""
    motors = {k: [getattr(m, k) for m in cmd.motor_cmd] for k in MOTOR_FIELDS}
    return hg_lowcmd_crc_of(cmd.mode_pr, cmd.mode_machine, motors, list(cmd.reserve))
