"""`ltvm bench rope` (vm/attention/rope/bench.py): its three files are written all or none,
and a place they cannot go is refused before the sweeps."""

from __future__ import annotations

import pytest

import vm.attention.rope.bench as rope_bench
from vm.cli import main


def test_a_directory_where_a_file_goes_is_refused_before_the_sweeps(tmp_path, capsys,
                                                                     monkeypatch):
    """The sweeps (minutes each) used to run first, then the table and CSV were written and
    the plot failed on 'Is a directory'."""
    def no_sweep(*args, **kwargs):
        raise AssertionError("a sweep ran")
    monkeypatch.setattr(rope_bench, "time_sweep", no_sweep)
    (tmp_path / "rope_gradient.png").mkdir()
    assert main(["bench", "rope", "--quick", "--sections", "time", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"ltvm: error: cannot write "
                                       f"{tmp_path / 'rope_gradient.png'}: it is a directory\n")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["rope_gradient.png"]


def test_a_failure_while_writing_leaves_the_previous_files(tmp_path, capsys, monkeypatch):
    (tmp_path / "rope_gradient.md").write_text("before\n")

    def full_disk(rows, path):
        raise OSError(28, "No space left on device", str(path))
    monkeypatch.setattr(rope_bench, "plot", full_disk)
    assert main(["bench", "rope", "--quick", "--sections", "error", "--out",
                 str(tmp_path)]) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert [path.name for path in tmp_path.iterdir()] == ["rope_gradient.md"]
    assert (tmp_path / "rope_gradient.md").read_text() == "before\n"


@pytest.mark.parametrize("parents", [1, 2])
def test_a_missing_output_directory_is_made(tmp_path, capsys, parents):
    out = tmp_path.joinpath(*["sub"] * parents)
    assert main(["bench", "rope", "--quick", "--sections", "error", "--out", str(out)]) == 0
    assert sorted(path.name for path in out.iterdir()) == sorted(rope_bench.OUTPUTS)


@pytest.mark.parametrize("options", [["--max-exact-n", "256"], ["--max-exact-n", "511"],
                                     ["--quick", "--max-exact-n", "300"]])
def test_a_time_sweep_with_one_exact_size_is_refused_before_the_sweeps(tmp_path, capsys,
                                                                        monkeypatch, options):
    """--max-exact-n below 512 measured the exact gradient at n = 256 alone; np.polyfit on
    that one point gave a made-up exponent (-0.42) that extrapolated every exact time of the
    table and the plot (and --quick ignored --max-exact-n)."""
    def no_sweep(*args, **kwargs):
        raise AssertionError("a sweep ran")
    monkeypatch.setattr(rope_bench, "time_sweep", no_sweep)
    out = tmp_path / "out"
    assert main(["bench", "rope", "--sections", "time", "--out", str(out), *options]) == 2
    assert capsys.readouterr().err.startswith("ltvm: error: --max-exact-n must be at least 512")
    assert not out.exists()


def test_a_failed_sweep_leaves_no_directory_behind(tmp_path, capsys, monkeypatch):
    """A missing --out (and its missing parents) was made before the sweeps and stayed,
    empty, when a sweep failed."""
    def failing_sweep(*args, **kwargs):
        raise MemoryError
    monkeypatch.setattr(rope_bench, "error_sweep", failing_sweep)
    out = tmp_path / "new" / "out"
    assert main(["bench", "rope", "--quick", "--sections", "error", "--out", str(out)]) == 2
    assert "out of memory" in capsys.readouterr().err and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("parent, message", [("file", "is not a directory"),
                                             ("/proc", "cannot create /proc/x")])
def test_an_out_that_cannot_be_made_is_refused_before_the_sweeps(tmp_path, capsys, monkeypatch,
                                                                 parent, message):
    """Under /proc (where root passes access()) mkdir failed as 'No such file or directory:
    /proc/x', not as the other refusals of an output path."""
    def no_sweep(*args, **kwargs):
        raise AssertionError("a sweep ran")
    monkeypatch.setattr(rope_bench, "error_sweep", no_sweep)
    (tmp_path / "file").write_text("")
    base = tmp_path / parent if parent == "file" else parent
    out = f"{base}/x"
    assert main(["bench", "rope", "--quick", "--sections", "error", "--out", out]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ltvm: error: cannot create") and message in err
