"""The `gym` root command: help, version, sub-commands mounted from each package."""

from importlib.metadata import version


def test_help_lists_every_subcommand_with_a_line_of_explanation(gym_env):
    result = gym_env.run("--help")
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    for command in ("devnet", "contracts", "demo"):
        line = next((x for x in lines if x.strip("│ ").startswith(command + " ")), None)
        assert line is not None, f"{command} missing from gym --help"
        assert len(line.strip("│ ").split(None, 1)[1]) > 10  # a real explanation


def test_devnet_help_explains_up_status_down(gym_env):
    result = gym_env.run("devnet", "--help")
    assert result.returncode == 0
    for command in ("up", "status", "down"):
        assert f" {command} " in result.stdout


def test_version(gym_env):
    result = gym_env.run("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"gym {version('zoo-gym')}"


def test_unknown_command_is_a_usage_error(gym_env):
    result = gym_env.run("frobnicate")
    assert result.returncode == 2 and "No such command" in result.stderr
