"""Setup for the ROS package tests: the ament_python packages on sys.path (they are not pip-installed), tiny
checkpoints, and message classes checked against the rosbags typestore's Humble and Jazzy definitions."""

from __future__ import annotations

import array
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
if os.environ.get("CI") == "true":
    # CI installs the `ros` extra: a missing rclpy there is a broken setup, not a reason to skip the ROS tests
    import rclpy  # noqa: F401
ROS_PACKAGES = ("simdist_bringup", "simdist_nodes", "simdist_finetune")
for _name in ROS_PACKAGES:
    if str(REPO / "src" / _name) not in sys.path:
        sys.path.insert(0, str(REPO / "src" / _name))

from rosbags.typesys.base import Nodetype  # noqa: E402

from simdist.bags.conversions import typestore_for  # noqa: E402
from simdist.runtime.scratch import write_random_checkpoint  # noqa: E402

torch.set_num_threads(1)


# rclpy's setters: Python type of a scalar, array.array typecode of an unbounded sequence, numpy dtype of a fixed array.
_PRIMITIVES: dict[str, tuple[type, str, Any]] = {
    "float64": (float, "d", np.float64),
    "float32": (float, "f", np.float32),
    "int8": (int, "b", np.int8),
    "uint8": (int, "B", np.uint8),
    "int16": (int, "h", np.int16),
    "uint16": (int, "H", np.uint16),
    "int32": (int, "i", np.int32),
    "uint32": (int, "I", np.uint32),
    "int64": (int, "q", np.int64),
    "uint64": (int, "Q", np.uint64),
    "bool": (bool, "", np.bool_),
    "string": (str, "", None),
}


class StrictMessages:
    """A message factory like `ros_messages()` whose classes take exactly a type's fields, with rclpy's value types.

    Every field must be given (a conversion that forgets one is a bug); `to_typestore` turns a message into the
    typestore's dataclass so it can be CDR-serialised with the distribution's definitions.
    """

    def __init__(self, distro: str) -> None:
        self.distro = distro
        self.typestore = typestore_for(distro)
        self._classes: dict[str, type] = {}

    def __call__(self, name: str) -> type:
        if name not in self._classes:
            self._classes[name] = self._make(name)
        return self._classes[name]

    def _make(self, name: str) -> type:
        _, fields = self.typestore.fielddefs[name]
        factory = self

        def __init__(msg: Any, **values: Any) -> None:
            expected = [f for f, _ in fields]
            assert set(values) == set(expected), f"{name}: fields {sorted(values)} != {sorted(expected)}"
            for field, (kind, detail) in fields:
                factory._check(name, field, kind, detail, values[field])
                setattr(msg, field, values[field])

        return type(name.replace("/", "_"), (), {"__init__": __init__, "msgtype": name, "fields": fields})

    def _check(self, owner: str, field: str, kind: Nodetype, detail: Any, value: Any) -> None:
        where = f"{owner}.{field}"
        if kind == Nodetype.NAME:
            assert type(value) is self(detail), f"{where}: {type(value).__name__} is not {detail}"
        elif kind == Nodetype.BASE:
            self._check_scalar(where, detail[0], value)
        elif kind in (Nodetype.SEQUENCE, Nodetype.ARRAY):
            (inner_kind, inner), size = detail
            if inner_kind == Nodetype.NAME:
                assert isinstance(value, list), f"{where}: a list of {inner} is expected"
                for item in value:
                    assert type(item) is self(inner), f"{where}: item {type(item).__name__} is not {inner}"
                return
            python_type, typecode, dtype = _PRIMITIVES[inner[0]]
            if kind == Nodetype.ARRAY and isinstance(value, np.ndarray):  # rclpy keeps fixed arrays as numpy
                assert value.dtype == dtype and value.shape == (size,), (
                    f"{where}: {value.dtype} {value.shape}"
                )
                return
            if typecode and isinstance(value, array.array):
                assert value.typecode == typecode, f"{where}: typecode {value.typecode} is not {typecode}"
                return
            assert isinstance(value, list | tuple), f"{where}: {type(value).__name__} is not a sequence"
            for item in value:
                self._check_scalar(where, inner[0], item)
            if kind == Nodetype.ARRAY:
                assert len(value) == size, f"{where}: {len(value)} values, the array has {size}"
        else:
            raise AssertionError(f"{where}: unexpected node type {kind}")

    @staticmethod
    def _check_scalar(where: str, primitive: str, value: Any) -> None:
        python_type, _, dtype = _PRIMITIVES[primitive]
        if python_type is int:
            assert isinstance(value, int) and not isinstance(value, bool), f"{where}: {value!r} is not an int"
            info = np.iinfo(dtype)
            assert info.min <= value <= info.max, f"{where}: {value} out of {primitive} range"
        elif python_type is float:
            assert isinstance(value, float), f"{where}: {value!r} is not a float"
        else:
            assert isinstance(value, python_type), f"{where}: {value!r} is not {python_type.__name__}"

    def to_typestore(self, msg: Any) -> Any:
        """The typestore dataclass with the same values (primitive sequences as numpy arrays)."""
        cls = self.typestore.types[msg.msgtype]
        values = {}
        for field, (kind, detail) in msg.fields:
            value = getattr(msg, field)
            if kind == Nodetype.NAME:
                value = self.to_typestore(value)
            elif kind in (Nodetype.SEQUENCE, Nodetype.ARRAY):
                (inner_kind, inner), _ = detail
                if inner_kind == Nodetype.NAME:
                    value = [self.to_typestore(v) for v in value]
                elif inner[0] != "string":
                    value = np.asarray(value, dtype=_PRIMITIVES[inner[0]][2])
                else:
                    value = list(value)
            values[field] = value
        return cls(**values)

    def roundtrip(self, msg: Any) -> Any:
        """Serialise with the distribution's definitions and read back (the typestore dataclass)."""
        data = self.typestore.serialize_cdr(self.to_typestore(msg), msg.msgtype)
        return self.typestore.deserialize_cdr(data, msg.msgtype)


@pytest.fixture(params=["humble", "jazzy"])
def messages(request: pytest.FixtureRequest) -> StrictMessages:
    return StrictMessages(request.param)


@pytest.fixture(scope="session")
def _templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {
        "go2_slope": write_random_checkpoint(root / "go2_slope", "go2_slope"),
        "go2_foam": write_random_checkpoint(root / "go2_foam", "go2_foam"),
        "ur5e_peg": write_random_checkpoint(root / "ur5e_peg", "ur5e_peg"),
    }


@pytest.fixture
def model_for(tmp_path: Path, _templates: dict[str, Path]) -> Any:
    def copy(task: str) -> Path:
        return Path(shutil.copytree(_templates[task], tmp_path / f"model_{task}"))

    return copy
