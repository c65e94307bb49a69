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


@pytest.mark.parametrize("path", LAUNCH_FILES, ids=lambda p: p.name)
def test_launch_file_nodes_and_arguments(path: Path) -> None:
    tree = ast.parse(path.read_text())
    assert any(isinstance(n, ast.FunctionDef) and n.name == "generate_launch_description" for n in tree.body)
    scripts = {p: set(_console_scripts(p)) for p in ("simdist_nodes", "simdist_finetune")}
    for call in _calls(tree, "Node"):
        kw = _keywords(call)
        package, executable = kw["package"], kw["executable"]
        assert isinstance(package, ast.Constant) and isinstance(executable, ast.Constant), "literal names"
        assert executable.value in scripts.get(package.value, set()), f"{package.value}/{executable.value}"
    declared = []
    for call in _calls(tree, "DeclareLaunchArgument"):
        kw = _keywords(call)
        name = call.args[0]
        assert isinstance(name, ast.Constant)
        declared.append(name.value)
        description = kw.get("description")
        assert isinstance(description, ast.Constant) and len(description.value) > 10, name.value
        if "choices" in kw and "default_value" in kw:
            choices = [c.value for c in kw["choices"].elts]  # type: ignore[attr-defined]
            assert kw["default_value"].value in choices, name.value  # type: ignore[attr-defined]
    # every LaunchConfiguration read in the file is declared in it
    used = {
        c.args[0].value for c in _calls(tree, "LaunchConfiguration") if isinstance(c.args[0], ast.Constant)
    }
    loop_names = {
        e.value
        for n in ast.walk(tree)
        if isinstance(n, ast.List)
        for e in n.elts
        if isinstance(e, ast.Constant)
    }
    assert used <= set(declared), used - set(declared)
    assert len(declared) == len(set(declared))
    if path.name != "simdist_stack.launch.py":
        # a thin wrapper: includes the shared stack and forwards only arguments the stack declares
        stack = ast.parse((LAUNCH_DIR / "simdist_stack.launch.py").read_text())
        stack_args = {c.args[0].value for c in _calls(stack, "DeclareLaunchArgument")}
        assert _calls(tree, "IncludeLaunchDescription") and "simdist_stack.launch.py" in path.read_text()
        assert set(declared) <= stack_args and loop_names & stack_args
        hardware = "robot_ip" if path.name.startswith("ur5e") else "network_interface"
        assert hardware in declared
        assert _calls(tree, "Node") == []
    else:
        assert _calls(tree, "OpaqueFunction") and _calls(tree, "FindPackageShare")
        task = next(c for c in _calls(tree, "DeclareLaunchArgument") if c.args[0].value == "task")
        assert "default_value" not in _keywords(task)  # required
