"""The RTDE wire protocol (TCP 30004) of a UR e-Series controller, protocol version 2, as Universal Robots' RTDE
guide defines it: pure functions and classes over bytes, no sockets (the emulator, `simdist.robots.ur5e.emulator`,
does the I/O).

A packet is a header, uint16 size (header included) and uint8 type, both big-endian, then the payload. The types:
REQUEST_PROTOCOL_VERSION 'V', GET_URCONTROL_VERSION 'v', TEXT_MESSAGE 'M', DATA_PACKAGE 'U',
CONTROL_PACKAGE_SETUP_OUTPUTS 'O', CONTROL_PACKAGE_SETUP_INPUTS 'I', CONTROL_PACKAGE_START 'S',
CONTROL_PACKAGE_PAUSE 'P'. A setup request names variables (comma-separated; outputs prefixed by a double, the
frequency); the reply is a recipe id and the variables' types, NOT_FOUND for a name the controller does not have
(the recipe is then refused: id 0) and IN_USE for an input another client already writes. A data package is the
recipe id, then each variable big-endian in the recipe's order.

`OUTPUT_TYPES` / `INPUT_TYPES` hold the variables of PolyScope 5.x that ur_rtde 1.6.5 asks for and many more; a
name outside them is NOT_FOUND, as on a controller that does not have it.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

HEADER = struct.Struct(">HB")
PROTOCOL_VERSION = 2
NOT_FOUND = "NOT_FOUND"
IN_USE = "IN_USE"
MAX_PACKET = 0xFFFF


class PackageType(enum.IntEnum):
    REQUEST_PROTOCOL_VERSION = ord("V")
    GET_URCONTROL_VERSION = ord("v")
    TEXT_MESSAGE = ord("M")
    DATA_PACKAGE = ord("U")
    CONTROL_PACKAGE_SETUP_OUTPUTS = ord("O")
    CONTROL_PACKAGE_SETUP_INPUTS = ord("I")
    CONTROL_PACKAGE_START = ord("S")
    CONTROL_PACKAGE_PAUSE = ord("P")


class TextLevel(enum.IntEnum):
    EXCEPTION = 0
    ERROR = 1
    WARNING = 2
    INFO = 3


# RTDE type name -> struct format (big-endian) of one value
TYPE_FORMATS: dict[str, str] = {
    "BOOL": "?",
    "UINT8": "B",
    "UINT32": "I",
    "UINT64": "Q",
    "INT32": "i",
    "DOUBLE": "d",
    "VECTOR3D": "3d",
    "VECTOR6D": "6d",
    "VECTOR6INT32": "6i",
    "VECTOR6UINT32": "6I",
}


class ProtocolError(ValueError):
    """A packet or payload that does not follow the RTDE protocol (one line: what is wrong)."""


def _registers(prefix: str, kind: str, count: int, start: int = 0) -> dict[str, str]:
    return {f"{prefix}_{i}": kind for i in range(start, start + count)}


OUTPUT_TYPES: dict[str, str] = {
    "timestamp": "DOUBLE",
    **{
        name: "VECTOR6D"
        for name in (
            "target_q",
            "target_qd",
            "target_qdd",
            "target_current",
            "target_moment",
            "actual_q",
            "actual_qd",
            "actual_current",
            "actual_current_window",
            "actual_current_as_torque",
            "joint_control_output",
            "actual_TCP_pose",
            "actual_TCP_speed",
            "actual_TCP_force",
            "target_TCP_pose",
            "target_TCP_speed",
            "joint_temperatures",
            "actual_joint_voltage",
            "ft_raw_wrench",
            "payload_inertia",
        )
    },
    "actual_digital_input_bits": "UINT64",
    "actual_digital_output_bits": "UINT64",
    "actual_execution_time": "DOUBLE",
    "robot_mode": "INT32",
    "joint_mode": "VECTOR6INT32",
    "safety_mode": "INT32",
    "safety_status": "INT32",
    "actual_tool_accelerometer": "VECTOR3D",
    "speed_scaling": "DOUBLE",
    "target_speed_fraction": "DOUBLE",
    "actual_momentum": "DOUBLE",
    "actual_main_voltage": "DOUBLE",
    "actual_robot_voltage": "DOUBLE",
    "actual_robot_current": "DOUBLE",
    "runtime_state": "UINT32",
    "elbow_position": "VECTOR3D",
    "elbow_velocity": "VECTOR3D",
    "robot_status_bits": "UINT32",
    "safety_status_bits": "UINT32",
    "analog_io_types": "UINT32",
    "standard_analog_input0": "DOUBLE",
    "standard_analog_input1": "DOUBLE",
    "standard_analog_output0": "DOUBLE",
    "standard_analog_output1": "DOUBLE",
    "io_current": "DOUBLE",
    "euromap67_input_bits": "UINT32",
    "euromap67_output_bits": "UINT32",
    "euromap67_24V_voltage": "DOUBLE",
    "euromap67_24V_current": "DOUBLE",
    "tool_mode": "UINT32",
    "tool_analog_input_types": "UINT32",
    "tool_analog_input0": "DOUBLE",
    "tool_analog_input1": "DOUBLE",
    "tool_output_voltage": "INT32",
    "tool_output_current": "DOUBLE",
    "tool_temperature": "DOUBLE",
    "tool_force_scalar": "DOUBLE",
    "tool_output_mode": "UINT8",
    "tool_digital_output0_mode": "UINT8",
    "tool_digital_output1_mode": "UINT8",
    "payload": "DOUBLE",
    "payload_cog": "VECTOR3D",
    "script_control_line": "UINT32",
    "joint_position_deviation_ratio": "DOUBLE",
    "collision_detection_ratio": "DOUBLE",
    "time_scale_source": "INT32",
    "output_bit_registers0_to_31": "UINT32",
    "output_bit_registers32_to_63": "UINT32",
    "input_bit_registers0_to_31": "UINT32",
    "input_bit_registers32_to_63": "UINT32",
    **_registers("output_bit_register", "BOOL", 64, start=64),
    **_registers("output_int_register", "INT32", 48),
    **_registers("output_double_register", "DOUBLE", 48),
    **_registers("input_bit_register", "BOOL", 64, start=64),
    **_registers("input_int_register", "INT32", 48),
    **_registers("input_double_register", "DOUBLE", 48),
}

INPUT_TYPES: dict[str, str] = {
    "speed_slider_mask": "UINT32",
    "speed_slider_fraction": "DOUBLE",
    "standard_digital_output_mask": "UINT8",
    "standard_digital_output": "UINT8",
    "configurable_digital_output_mask": "UINT8",
    "configurable_digital_output": "UINT8",
    "tool_digital_output_mask": "UINT8",
    "tool_digital_output": "UINT8",
    "standard_analog_output_mask": "UINT8",
    "standard_analog_output_type": "UINT8",
    "standard_analog_output_0": "DOUBLE",
    "standard_analog_output_1": "DOUBLE",
    "input_bit_registers0_to_31": "UINT32",
    "input_bit_registers32_to_63": "UINT32",
    "external_force_torque": "VECTOR6D",
    **_registers("input_bit_register", "BOOL", 64, start=64),
    **_registers("input_int_register", "INT32", 48),
    **_registers("input_double_register", "DOUBLE", 48),
}


# -- packets ----------------------------------------------------------------------------------------------------------
def encode(ptype: int, payload: bytes = b"") -> bytes:
    """One packet: header (size, type) and payload."""
    size = HEADER.size + len(payload)
    if size > MAX_PACKET:
        raise ProtocolError(f"RTDE packet of {size} bytes exceeds the 16-bit size field")
    return HEADER.pack(size, int(ptype)) + payload


def split_packets(buffer: bytes) -> tuple[list[tuple[int, bytes]], bytes]:
    """The complete packets at the start of `buffer` as (type, payload), and the bytes left over."""
    packets: list[tuple[int, bytes]] = []
    offset = 0
    while len(buffer) - offset >= HEADER.size:
        size, ptype = HEADER.unpack_from(buffer, offset)
        if size < HEADER.size:
            raise ProtocolError(f"RTDE packet header declares {size} bytes, less than the header itself")
        if len(buffer) - offset < size:
            break
        packets.append((ptype, bytes(buffer[offset + HEADER.size : offset + size])))
        offset += size
    return packets, bytes(buffer[offset:])


# -- control payloads -------------------------------------------------------------------------------------------------
def parse_protocol_request(payload: bytes) -> int:
    if len(payload) != 2:
        raise ProtocolError(f"REQUEST_PROTOCOL_VERSION carries a uint16, got {len(payload)} bytes")
    return struct.unpack(">H", payload)[0]


def accepted(ok: bool) -> bytes:
    """The one-byte reply of REQUEST_PROTOCOL_VERSION, START and PAUSE."""
    return struct.pack(">B", 1 if ok else 0)


def controller_version(major: int, minor: int, bugfix: int, build: int) -> bytes:
    return struct.pack(">IIII", major, minor, bugfix, build)


def text_message(message: str, source: str = "simdist", level: TextLevel = TextLevel.INFO) -> bytes:
    """A protocol-v2 TEXT_MESSAGE payload: length-prefixed message and source, then the warning level."""
    msg, src = message.encode()[:255], source.encode()[:255]
    return struct.pack(">B", len(msg)) + msg + struct.pack(">B", len(src)) + src + struct.pack(">B", level)


def parse_text_message(payload: bytes) -> tuple[str, str, int]:
    try:
        n = payload[0]
        msg = payload[1 : 1 + n].decode(errors="replace")
        m = payload[1 + n]
        src = payload[2 + n : 2 + n + m].decode(errors="replace")
        return msg, src, payload[2 + n + m]
    except IndexError:
        raise ProtocolError("TEXT_MESSAGE payload is shorter than its lengths say") from None


def _names(text: bytes) -> list[str]:
    try:
        decoded = text.decode("ascii")
    except UnicodeDecodeError:
        raise ProtocolError("setup variable names are not ASCII") from None
    names = [n.strip() for n in decoded.split(",") if n.strip()]
    if not names:
        raise ProtocolError("setup request names no variables")
    return names


def parse_output_setup(payload: bytes) -> tuple[float, list[str]]:
    """CONTROL_PACKAGE_SETUP_OUTPUTS (v2): (frequency in Hz, variable names)."""
    if len(payload) < 8:
        raise ProtocolError("SETUP_OUTPUTS must start with a double (the frequency)")
    (frequency,) = struct.unpack(">d", payload[:8])
    return frequency, _names(payload[8:])


def parse_input_setup(payload: bytes) -> list[str]:
    return _names(payload)


def setup_reply(recipe_id: int, types: Sequence[str]) -> bytes:
    return struct.pack(">B", recipe_id) + ",".join(types).encode("ascii")


def parse_setup_reply(payload: bytes) -> tuple[int, list[str]]:
    if not payload:
        raise ProtocolError("setup reply is empty")
    return payload[0], payload[1:].decode("ascii").split(",")


def output_setup_request(frequency: float, names: Iterable[str]) -> bytes:
    return struct.pack(">d", frequency) + ",".join(names).encode("ascii")


# -- recipes and data packages ----------------------------------------------------------------------------------------
def types_of(names: Sequence[str], table: Mapping[str, str]) -> list[str]:
    """Each name's RTDE type from `table`, NOT_FOUND where it has none."""
    return [table.get(name, NOT_FOUND) for name in names]


@dataclass
class Recipe:
    """An accepted recipe: its id, variable names and types, and the struct that packs its data packages."""

    recipe_id: int
    names: list[str]
    types: list[str]
    frequency: float = 0.0
    _struct: struct.Struct = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if len(self.names) != len(self.types):
            raise ProtocolError("a recipe needs one type per name")
        bad = [t for t in self.types if t not in TYPE_FORMATS]
        if bad:
            raise ProtocolError(f"recipe has types RTDE cannot carry: {bad}")
        self._struct = struct.Struct(">B" + "".join(TYPE_FORMATS[t] for t in self.types))

    @property
    def size(self) -> int:
        """Payload bytes of one data package (recipe id included)."""
        return self._struct.size

    def pack(self, values: Mapping[str, Any]) -> bytes:
        """A DATA_PACKAGE payload from {name: value} (vectors as sequences)."""
        flat: list[Any] = [self.recipe_id]
        for name, kind in zip(self.names, self.types, strict=True):
            value = values[name]
            if kind.startswith("VECTOR"):
                flat.extend(value)
            else:
                flat.append(value)
        try:
            return self._struct.pack(*flat)
        except struct.error as exc:
            raise ProtocolError(f"cannot pack recipe {self.recipe_id}: {exc}") from None

    def unpack(self, payload: bytes) -> dict[str, Any]:
        """{name: value} from a DATA_PACKAGE payload of this recipe (vectors as tuples)."""
        if len(payload) != self._struct.size:
            raise ProtocolError(
                f"data package for recipe {self.recipe_id} has {len(payload)} bytes, the recipe packs {self._struct.size}"
            )
        flat = self._struct.unpack(payload)
        if flat[0] != self.recipe_id:
            raise ProtocolError(f"data package carries recipe id {flat[0]}, expected {self.recipe_id}")
        out: dict[str, Any] = {}
        index = 1
        for name, kind in zip(self.names, self.types, strict=True):
            fmt = TYPE_FORMATS[kind]
            count = int(fmt[:-1]) if len(fmt) > 1 else 1
            out[name] = tuple(flat[index : index + count]) if count > 1 else flat[index]
            index += count
        return out


def recipe_id_of(payload: bytes) -> int:
    """The recipe id a DATA_PACKAGE payload starts with."""
    if not payload:
        raise ProtocolError("DATA_PACKAGE is empty (no recipe id)")
    return payload[0]
