"""The example scripts refuse arguments they cannot run with, in one argparse line (exit 2):
--rounds 0 was an IndexError, --noise 0 an InputError traceback, --explore above --rounds
printed nan, and test_time_scaling.py --samples -1 printed tables of zeros."""

from __future__ import annotations

import re

import pytest

from example_scripts import EXAMPLES, run_example


@pytest.mark.parametrize("script, arguments, message", [
    ("self_correction.py", ["--rounds", "0"], "--rounds: must be at least 1"),
    ("self_correction.py", ["--noise", "0"], "--noise: must be positive"),
    ("self_correction.py", ["--rounds", "2", "--explore", "5"], "no round of --rounds 2"),
    ("test_time_scaling.py", ["--samples", "-1"], "--samples: must be at least 1"),
])
def test_an_example_refuses_arguments_it_cannot_run_with(script, arguments, message):
    done = run_example(script, *arguments, timeout=120)
    assert done.returncode == 2 and message in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_rope_gradient_help_names_the_script_before_the_command_it_runs():
    """Its --help was `ltvm bench rope`'s alone: usage and default --out of another
    program."""
    done = run_example("rope_gradient.py", "--help", timeout=120)
    first, *rest = done.stdout.splitlines()
    assert done.returncode == 0 and first.startswith("python examples/rope_gradient.py")
    assert "--out examples/out" in first and any(line.startswith("usage:") for line in rest)


def undescribed_options(help_text: str) -> list[str]:
    """The options argparse's --help lists with no text beside them or on the line below."""
    lines = help_text.splitlines()
    found = []
    for index, line in enumerate(lines):
        if line.startswith("  -") and len(re.split(r"\s{2,}", line.strip(), maxsplit=1)) == 1:
            below = lines[index + 1] if index + 1 < len(lines) else ""
            if not below.startswith(" " * 8):
                found.append(line.strip())
    return found


def test_undescribed_options_are_found_in_help_text():
    text = ("options:\n  -h, --help  show this help\n  --seed SEED\n  --out OUT\n"
            "  --a-long-option-name LONG\n                        what it does\n")
    assert undescribed_options(text) == ["--seed SEED", "--out OUT"]


@pytest.mark.parametrize("script", sorted(path.name for path in EXAMPLES.glob("*.py")))
def test_every_option_of_an_example_says_what_it_does(script):
    """self_correction.py and test_time_scaling.py listed --instances, --rounds, --explore,
    --noise, --seed, --out and --samples with no word of what they set or default to."""
    done = run_example(script, "--help", timeout=120)
    assert done.returncode == 0 and undescribed_options(done.stdout) == []
