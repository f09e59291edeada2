"""The names every part shares (slicemeter/common.py)."""
from __future__ import annotations

from datetime import date

import pytest

from slicemeter.common import DNS_LABEL_RE, GPU_UUID_RE, ConfigError, month_bounds, month_window, named
from slicemeter.exporter.sources.pods import AnnotationError, parse_vgpu_allocated

UUID = "3f0c1a2b-4d5e-6f70-8192-a3b4c5d6e7f8"


@pytest.mark.parametrize("uuid", [f"GPU-{UUID}", f"MIG-{UUID}", f"MIG-GPU-{UUID}/1/0", f"GPU-{UUID.upper()}"])
def test_gpu_uuids_as_nvml_writes_them(uuid):
    assert GPU_UUID_RE.match(uuid)


@pytest.mark.parametrize("uuid", ["GPU-1", f"GPU-{UUID}x", f"GPU-{UUID[:-1]}", f"MIG-{UUID}/1/0", f"NVD-{UUID}",
                                  f"GPU-{UUID}\n", f"GPU-{UUID[:8]}-{UUID[9:]}-0000"])
def test_other_strings_are_not_gpu_uuids(uuid):
    assert not GPU_UUID_RE.match(uuid)


def test_a_grant_names_an_nvml_uuid():
    assert parse_vgpu_allocated(f"GPU-{UUID},NVIDIA,1024,30:;")[0][0].uuid == f"GPU-{UUID}"
    with pytest.raises(AnnotationError, match="not a GPU UUID"):
        parse_vgpu_allocated("GPU-1,NVIDIA,1024,30:;")


def test_dns_label():
    assert DNS_LABEL_RE.match("team-a") and DNS_LABEL_RE.match("a" * 63)
    assert not any(DNS_LABEL_RE.match(s) for s in ("a" * 64, "-a", "a-", "A", "a_b", "", "a\n"))


def test_month():
    assert month_bounds("2026-12") == (date(2026, 12, 1), date(2027, 1, 1))
    assert month_window("2028-02")[2] == 29 * 24
    for bad in ("2026-13", "2026-1", "26-11", "2026-11'; DROP TABLE x", "2026-11\n", "", None):
        with pytest.raises(ValueError, match="month must be YYYY-MM"):
            month_bounds(bad)


def test_library_names_the_value_the_command_the_flag():
    with pytest.raises(ConfigError, match=r"^--month: month must be YYYY-MM, got '2026-13'$"):
        with named("--month"):
            month_bounds("2026-13")


def test_a_command_run_in_process_leaves_the_process_arguments_alone(tmp_path):
    """The dashboard reads `--db` from sys.argv: a command run in-process must not leave its own there."""
    import sys

    from slicemeter.cli import main

    before = list(sys.argv)
    assert main(["export", "--db", str(tmp_path / "none.duckdb"), "--month", "2026-11", "--out", str(tmp_path)]) == 2
    assert sys.argv == before
