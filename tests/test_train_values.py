"""`ltvm train` refuses data values and learning rates the FLEQ machine cannot hold, naming
the data (they were refused by the assembler at a line of the generated program,
'<ltvm train>:5:5: error: ...', with a caret under text the user never wrote)."""

from __future__ import annotations

import numpy as np
import pytest

from vm.apps.training import TrainingSetup, check_dataset
from vm.cli import main
from vm.common.errors import InputError


@pytest.mark.parametrize("value, message", [
    (1e300, "x[1, 0] = 1e+300 is beyond 2^50"),
    (2.0 ** 64, "x[1, 0] = 1.84467e+19 is beyond 2^50"),
    (1e-320, "x[1, 0] = 9.99989e-321 is below 2.23e-308, the smallest normal double"),
])
def test_data_the_machine_cannot_hold_is_one_error_line_naming_the_entry(tmp_path, capsys,
                                                                         value, message):
    x = np.array([[0.5, 0.25], [value, 0.0], [0.0, 1.0]])
    np.savez(tmp_path / "d.npz", x=x, y=np.zeros((3, 1)))
    assert main(["train", "--data", str(tmp_path / "d.npz"), "--epochs", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ltvm: error: ") and err.count("\n") == 1, err
    assert message in err and "<ltvm train>" not in err


def test_targets_are_checked_too():
    with pytest.raises(InputError, match=r"y\[2, 0\] = -2e\+16 is beyond 2\^50"):
        check_dataset(np.zeros((3, 1)), np.array([0.0, 1.0, -2e16]))


def test_zero_and_the_largest_kept_magnitude_are_accepted():
    x, y = check_dataset(np.array([[0.0], [2.0 ** 50], [-2.0 ** 50]]), np.zeros(3))
    assert x.shape == (3, 1) and y.shape == (3, 1)


@pytest.mark.parametrize("lr", ["5e15", "1e-320"])
def test_a_learning_rate_the_machine_cannot_hold_is_one_error_line(tmp_path, capsys, lr):
    np.savez(tmp_path / "d.npz", x=np.zeros((3, 2)), y=np.zeros((3, 1)))
    assert main(["train", "--data", str(tmp_path / "d.npz"), "--lr", lr]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ltvm: error: the learning rate must lie between") and \
        err.count("\n") == 1, err


def test_the_setup_refuses_such_a_learning_rate_directly():
    with pytest.raises(InputError, match="learning rate must lie between"):
        TrainingSetup(0, 1e16, 1)
