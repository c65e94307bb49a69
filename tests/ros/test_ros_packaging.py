"""The ROS packages as colcon and `ros2 launch` see them, checked without ROS: package.xml format 3, console
scripts, the bringup's installed launch/config files, and every launch file's nodes and arguments (read with ast)."""

from __future__ import annotations

import ast
import os
import runpy
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import setuptools
from conftest import REPO, ROS_PACKAGES

LAUNCH_DIR = REPO / "launch"
# Keys rosdep resolves for Jazzy and Humble (ROS core packages and the test runner) that these packages use.
KNOWN_KEYS = {
    "rclpy",
    "rcl_interfaces",
    "builtin_interfaces",
    "std_msgs",
    "sensor_msgs",
    "geometry_msgs",
    "launch",
    "launch_ros",
    "ros2launch",
    "python3-pytest",
}
DEPENDS = ("depend", "build_depend", "build_export_depend", "exec_depend", "test_depend", "buildtool_depend")


def _setup_kwargs(package: str) -> dict[str, Any]:
    """What setup.py hands setuptools.setup, run from its folder as colcon does."""
    captured: dict[str, Any] = {}
    cwd = os.getcwd()
    original = setuptools.setup
    setuptools.setup = lambda **kw: captured.update(kw)  # type: ignore[assignment]
    try:
        os.chdir(REPO / "src" / package)
        runpy.run_path("setup.py", run_name="__main__")
    finally:
        setuptools.setup = original  # type: ignore[assignment]
        os.chdir(cwd)
    return captured


def _console_scripts(package: str) -> dict[str, str]:
    scripts = _setup_kwargs(package).get("entry_points", {}).get("console_scripts", [])
    return {name.strip(): target.strip() for name, _, target in (s.partition("=") for s in scripts)}


@pytest.mark.parametrize("package", ROS_PACKAGES)
def test_package_xml_is_format_3_with_known_dependencies(package: str) -> None:
    root = ET.parse(REPO / "src" / package / "package.xml").getroot()
    assert root.tag == "package" and root.get("format") == "3"
    assert root.findtext("name") == package
    for tag in ("version", "description", "license"):
        assert (root.findtext(tag) or "").strip(), tag
    assert root.find("maintainer") is not None and root.find("maintainer").get("email")
    assert root.findtext("export/build_type") == "ament_python"
    for tag in DEPENDS:
        for dep in root.findall(tag):
            assert dep.text in KNOWN_KEYS | set(ROS_PACKAGES), f"{package}: unknown dependency {dep.text}"
    # ament_python needs the marker file and the setup.cfg script dirs for `ros2 run` to find executables
    assert (REPO / "src" / package / "resource" / package).is_file()
    cfg = (REPO / "src" / package / "setup.cfg").read_text()
    assert f"install_scripts=$base/lib/{package}" in cfg and f"script_dir=$base/lib/{package}" in cfg


def test_no_dependency_cycle_and_imports_match_dependencies() -> None:
    """colcon refuses cycles; each package imports only the SimDist ROS packages it declares."""
    declared = {
        p: {d.text for d in ET.parse(REPO / "src" / p / "package.xml").getroot().findall("exec_depend")}
        & set(ROS_PACKAGES)
        for p in ROS_PACKAGES
    }
    for package in ROS_PACKAGES:
        imported = set()
        for source in (REPO / "src" / package / package).glob("*.py"):
            for node in ast.walk(ast.parse(source.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module:
                    imported.add(node.module.split(".")[0])
                elif isinstance(node, ast.Import):
                    imported.update(a.name.split(".")[0] for a in node.names)
        assert (imported & set(ROS_PACKAGES)) - {package} <= declared[package], package
    seen: set[str] = set()

    def visit(p: str, path: tuple[str, ...]) -> None:
        assert p not in path, f"dependency cycle {' -> '.join((*path, p))}"
        for d in declared[p]:
            visit(d, (*path, p))
        seen.add(p)

    for p in ROS_PACKAGES:
        visit(p, ())


@pytest.mark.parametrize("package", ["simdist_nodes", "simdist_finetune"])
def test_console_scripts_point_at_existing_main_functions(package: str) -> None:
    scripts = _console_scripts(package)
    assert scripts
    for name, target in scripts.items():
        module, _, function = target.partition(":")
        path = REPO / "src" / package / (module.replace(".", "/") + ".py")
        tree = ast.parse(path.read_text())
        defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        defined |= {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
        assert function in defined, f"{name}: {target} has no {function}"


def test_bringup_installs_every_launch_file_and_the_config_tree() -> None:
    data_files = _setup_kwargs("simdist_bringup")["data_files"]
    installed = {
        os.path.normpath(os.path.join(target, os.path.basename(f))): (
            REPO / "src" / "simdist_bringup" / f
        ).resolve()
        for target, files in data_files
        for f in files
    }
    for source in LAUNCH_DIR.glob("*.launch.py"):
        assert installed[f"share/simdist_bringup/launch/{source.name}"] == source.resolve()
    for source in (REPO / "config").rglob("*.yaml"):
        relative = source.relative_to(REPO / "config")
        assert installed[f"share/simdist_bringup/config/{relative}"] == source.resolve()
    assert "share/simdist_bringup/package.xml" in installed


# -- launch files ------------------------------------------------------------------------------------------------------


def _calls(tree: ast.AST, name: str) -> list[ast.Call]:
    return [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and (getattr(n.func, "id", None) == name or getattr(n.func, "attr", None) == name)
    ]


def _keywords(call: ast.Call) -> dict[str, ast.expr]:
    return {k.arg: k.value for k in call.keywords if k.arg}


LAUNCH_FILES = sorted(LAUNCH_DIR.glob("*.launch.py"))


def test_the_expected_launch_files_exist() -> None:
    names = {p.name for p in LAUNCH_FILES}
    assert {
        "ur5e_peg.launch.py",
        "go2_slope.launch.py",
        "go2_foam.launch.py",
        "simdist_stack.launch.py",
    } <= names


def _run_launch_file(path: Path) -> Any:
    namespace = runpy.run_path(str(path))
    return namespace, namespace["generate_launch_description"]()


@pytest.mark.parametrize("task", ["ur5e_peg", "go2_slope", "go2_foam"])
def test_task_launch_file_declares_and_forwards_every_stack_argument(task: str) -> None:
    from fake_launch import fake_launch
    from simdist_bringup.stack import ARGUMENTS

    with fake_launch():
        _, description = _run_launch_file(LAUNCH_DIR / f"{task}.launch.py")
    declared = {
        a.args[0]: a.kwargs for a in description.args[0] if type(a).__name__ == "DeclareLaunchArgument"
    }
    assert set(declared) == {a.name for a in ARGUMENTS} - {"task"}
    real = {"ur5e_peg": "real", "go2_slope": "ptfe", "go2_foam": "foam"}[task]  # the calibrated profiles
    assert declared["profile"]["default_value"] == real
    for name, kwargs in declared.items():
        assert len(kwargs["description"]) > 10, name
        if "choices" in kwargs:
            assert kwargs["default_value"] in kwargs["choices"], name
    (include,) = [a for a in description.args[0] if type(a).__name__ == "IncludeLaunchDescription"]
    forwarded = dict(include.kwargs["launch_arguments"])
    assert forwarded.pop("task") == task
    assert {k: v.args[0] for k, v in forwarded.items()} == {k: k for k in declared}


@pytest.mark.parametrize(
    ("values", "executables"),
    [
        ({"task": "go2_slope"}, ["sim_robot_node", "planner_node", "logger_node"]),
        (
            {"task": "ur5e_peg", "robot": "real", "camera": "0"},
            ["proprio_node", "planner_node", "camera_node", "logger_node"],
        ),
        ({"task": "go2_foam", "robot": "real", "log": "false"}, ["proprio_node", "planner_node"]),
    ],
)
def test_stack_launch_file_starts_the_nodes_and_shuts_down_when_a_required_one_exits(
    values: dict[str, str], executables: list[str]
) -> None:
    from fake_launch import Context, fake_launch
    from simdist_bringup.stack import ARGUMENTS

    with fake_launch():
        namespace, description = _run_launch_file(LAUNCH_DIR / "simdist_stack.launch.py")
        declared = [a.args[0] for a in description.args[0] if type(a).__name__ == "DeclareLaunchArgument"]
        assert declared == [a.name for a in ARGUMENTS]
        context = Context({a.name: a.default for a in ARGUMENTS if a.default is not None} | values, REPO)
        actions = namespace["launch_setup"](context)
    nodes = [a for a in actions if type(a).__name__ == "Node"]
    assert [n.kwargs["executable"] for n in nodes] == executables
    scripts = {p: set(_console_scripts(p)) for p in ("simdist_nodes", "simdist_finetune")}
    for node in nodes:
        assert node.kwargs["executable"] in scripts[node.kwargs["package"]]
        (parameters,) = node.kwargs["parameters"]
        assert all(isinstance(v, str | int | float | bool) for v in parameters.values())
    handlers = [a.args[0] for a in actions if type(a).__name__ == "RegisterEventHandler"]
    watched = {h.kwargs["target_action"].kwargs["executable"] for h in handlers}
    assert watched == {executables[0], "planner_node"}  # the robot node and the planner
    for handler in handlers:
        (emit,) = handler.kwargs["on_exit"]
        assert type(emit.kwargs["event"]).__name__ == "Shutdown"
    planner = next(n for n in nodes if n.kwargs["executable"] == "planner_node").kwargs["parameters"][0]
    assert planner["camera"] == ("camera_node" in executables)
