"""The project's robot models against reference numbers (forward kinematics, masses, limits)."""

import mujoco
import numpy as np
import pytest

from simdist.paths import assets_dir

# Foot centres relative to the base for one joint configuration per leg, computed from the published Go2 model.
GO2_FEET = {
    "FR": ([0.1, 0.8, -1.6], [0.1934, -0.11189, -0.30485]),
    "FL": ([-0.2, 1.0, -2.0], [0.1934, 0.09437, -0.24455]),
    "RR": ([0.3, 0.5, -1.2], [-0.1583, -0.03435, -0.36243]),
    "RL": ([0.0, 1.2, -2.4], [-0.1934, 0.142, -0.15436]),
}
# UR5e tool flange (tool0) position and tool axis for random joint angles, from the published kinematics.
UR5E_FLANGE = [
    ([0.3, -1.2, 1.4, -1.8, -1.6, 0.5], [-0.31467, 0.5737, 0.38424], [0.01927, 0.03651, -0.99915]),
    ([-2.0, -0.5, -2.2, 1.0, 2.5, -3.0], [0.12248, 0.00321, 0.60652], [-0.40351, -0.69639, 0.59348]),
    ([1.0, -2.0, 0.7, 0.3, -0.4, 1.7], [-0.11468, -0.19507, 0.84037], [-0.3206, -0.88873, -0.32768]),
]


def _load(name: str) -> tuple[mujoco.MjModel, mujoco.MjData]:
    model = mujoco.MjModel.from_xml_path(str(assets_dir() / name))
    return model, mujoco.MjData(model)


def test_go2_joint_order_and_limits():
    model, _ = _load("go2.xml")
    names = [model.joint(i).name for i in range(1, model.njnt)]
    assert names == [
        f"{leg}_{part}_joint" for leg in ("FR", "FL", "RR", "RL") for part in ("hip", "thigh", "calf")
    ]
    assert [model.actuator(i).name for i in range(model.nu)] == [n.removesuffix("_joint") for n in names]
    force = model.actuator_forcerange[:, 1]
    np.testing.assert_allclose(force, [23.7, 23.7, 45.43] * 4)
    np.testing.assert_allclose(model.actuator_gainprm[:, 0], 25.0)
    np.testing.assert_allclose(model.actuator_biasprm[:, 2], -0.5)
    assert model.opt.timestep <= 0.005
    np.testing.assert_allclose(model.jnt_range[3], [-2.7227, -0.83776])  # FR calf


def test_go2_forward_kinematics_and_mass():
    model, data = _load("go2.xml")
    data.qpos[:7] = [0, 0, 0.445, 1, 0, 0, 0]
    for leg, (q, _) in GO2_FEET.items():
        for j, part in enumerate(("hip", "thigh", "calf")):
            data.qpos[model.joint(f"{leg}_{part}_joint").qposadr[0]] = q[j]
    mujoco.mj_kinematics(model, data)
    base = data.body("base").xpos
    for leg, (_, expected) in GO2_FEET.items():
        calf = data.body(f"{leg}_calf")
        foot = calf.xpos + calf.xmat.reshape(3, 3) @ [0, 0, -0.213]
        np.testing.assert_allclose(foot - base, expected, atol=1e-4, err_msg=leg)
    assert sum(model.body_mass) == pytest.approx(15.2064, abs=1e-3)


def test_ur5e_flange_within_1mm_of_reference():
    model, data = _load("ur5e.xml")
    assert [model.joint(i).name for i in range(model.njnt)] == [
        "shoulder_pan",
        "shoulder_lift",
        "elbow",
        "wrist_1",
        "wrist_2",
        "wrist_3",
    ]
    for q, pos, axis in UR5E_FLANGE:
        data.qpos[:] = q
        mujoco.mj_kinematics(model, data)
        flange = data.site("flange")
        assert np.linalg.norm(flange.xpos - pos) < 1e-3
        np.testing.assert_allclose(flange.xmat.reshape(3, 3)[:, 2], axis, atol=1e-3)
    assert sum(model.body_mass) == pytest.approx(20.9939, abs=1e-3)
