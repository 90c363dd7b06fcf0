"""The last mile to a robot: the deploy contract, observations from the robot's state, a
safety state machine, and a robot's own wire (Unitree SDK2 over DDS) with a twin on it.

Torch-free: a robot's deploy image carries numpy, onnxruntime and (for the DDS wire) the
``cyclonedds`` extra. Only ``twin`` needs more (MuJoCo and, to build the task's model, mjlab).

- ``contract``: what ``policy.json``'s ``deploy`` section holds and how it is checked.
- ``observations``: the policy's input from a robot state, as the task's observation manager
  computes it.
- ``safety``: passive → stand-up → policy, with latched stops.
- ``crc``, ``unitree_msgs``: Unitree's CRC and message types (from Unitree's IDL).
- ``unitree``: the plant that ``orin-rl run --plant unitree-g1`` drives.
- ``twin``: ``orin-rl sim-robot``, MuJoCo speaking the same wire.
"""

from __future__ import annotations

from orin_rl.errors import OrinError

ROBOT_HINT = (
    "pip install 'orin-rl[robot]' (aarch64, a Jetson: no wheel, bash jetson/deploy.sh builds it)"
)


class RobotError(OrinError, RuntimeError):
    """The robot path cannot start or continue (contract, wire, state machine)."""


def require_cyclonedds():
    """``cyclonedds``, or a one-line error naming the extra."""
    try:
        import cyclonedds
        import cyclonedds.idl
    except ImportError:
        raise RobotError(
            f"the DDS wire needs cyclonedds, which is not installed: {ROBOT_HINT}"
        ) from None
    return cyclonedds
