"""GPU selection for a sidecar: --gpus, $DSMON_GPUS, the visible-devices variables, @FILE.

The poller runs against FakeNvml (eight GPUs of two models, and a node whose GPUs carry the
UUIDs of a real ``nvidia-smi -L`` listing, tests/data/nvidia_smi_list_mig/). Every sample
must keep the GPU's real NVML index and UUID, whatever selected it.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from fakes import FakeNvml, a100, eight_gpus_two_models, h100
from locations import DATA

from cli.main import main
from collectors.gpu.nvml import NvmlPoller
from collectors.gpu.selection import (
    GpuId,
    Selection,
    SelectionError,
    choose_selection,
    items_in,
    match,
    parse_selection,
)

SMI_LIST = DATA / "nvidia_smi_list_mig" / "nvidia-smi-L.txt"
# The UUIDs of that listing, read by hand from the file.
LISTED = (
    "GPU-513536b6-7d19-9063-b049-1e69664bb298",
    "GPU-d8594bd4-0fc3-8595-e355-7c98138f3b95",
    "GPU-5e375e7e-b41f-155b-dcdc-534524c356fc",
    "GPU-69ec2344-ebac-b028-f88f-452abb3d7f11",
)
MIGS = [
    "MIG-ce861fb0-a248-58ce-a9a8-f9adbc22a66a",
    "MIG-a45882f0-9215-5733-a0c1-49286ab31cb5",
    "MIG-f00d722c-f4e1-52c9-aa31-750441ae1bfe",
    "MIG-930574a9-d43a-5d2b-95da-3e68384c8d6b",
]


def sampled(select: Selection | None, nvml: FakeNvml | None = None) -> list[tuple[int, str]]:
    p = NvmlPoller(nvml or eight_gpus_two_models(), run="z2", node="n1", select=select)
    assert p.start()
    return [(s.gpu_index, s.uuid or "") for s in p.poll()]


def shared_node() -> FakeNvml:
    """Eight GPUs: four H100s of another job, then the four A100s of the real listing."""
    gpus = [h100(i) for i in range(4)] + [a100(i) for i in range(4, 8)]
    for gpu, uuid in zip(gpus[4:], LISTED, strict=True):
        gpu.uuid = uuid
    gpus[4].migs = MIGS
    return FakeNvml(gpus)


def test_select_by_uuids_keeps_real_indices_and_uuids() -> None:
    select = parse_selection("GPU-a100-0005, GPU-h100-0001", "--gpus")
    assert select == Selection("--gpus", ("GPU-a100-0005", "GPU-h100-0001"))
    assert sampled(select) == [(1, "GPU-h100-0001"), (5, "GPU-a100-0005")]


def test_select_by_indices() -> None:
    assert sampled(parse_selection("6,2", "--gpus")) == [(2, "GPU-h100-0002"), (6, "GPU-a100-0006")]


def test_all_selects_every_gpu() -> None:
    assert parse_selection(" ALL ", "--gpus") is None
    assert [i for i, _ in sampled(None)] == list(range(8))


def test_unknown_uuid_is_warned_once_and_the_others_are_sampled(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="collectors.gpu.nvml")
    p = NvmlPoller(
        eight_gpus_two_models(),
        run="z2",
        select=parse_selection("GPU-h100-0003,GPU-0badc0de,MIG-0badc0de,9", "--gpus"),
    )
    assert p.start()
    polls = [p.poll() for _ in range(3)]
    assert [[(s.gpu_index, s.uuid) for s in samples] for samples in polls] == [
        [(3, "GPU-h100-0003")]
    ] * 3
    seen = ", ".join(
        [f"GPU-h100-{i:04d}" for i in range(4)] + [f"GPU-a100-{i:04d}" for i in range(4, 8)]
    )
    assert [r.getMessage() for r in caplog.records if "--gpus" in r.getMessage()] == [
        f"dsmon: --gpus: no GPU here matches 'GPU-0badc0de'; skipped ({seen})",
        f"dsmon: --gpus: no GPU here matches 'MIG-0badc0de'; skipped ({seen})",
        f"dsmon: --gpus: no GPU here matches '9'; skipped ({seen})",
    ]


def test_ambiguous_uuid_prefix_selects_nothing() -> None:
    gpus = [GpuId(0, "GPU-h100-0000"), GpuId(1, "GPU-h100-0001")]
    assert match(["GPU-h100-000", "gpu-H100-0001"], gpus) == ([1], ["GPU-h100-000"])


def test_mig_uuid_selects_the_gpu_that_holds_it() -> None:
    nvml = shared_node()
    assert sampled(Selection("--gpus", (MIGS[2],)), nvml) == [(4, LISTED[0])]
    old_form = f"MIG-{LISTED[1]}/1/0"  # CUDA 11.0's MIG-GPU-<uuid>/<gi>/<ci>
    assert sampled(parse_selection(old_form, "--gpus"), shared_node()) == [(5, LISTED[1])]


def test_nvidia_smi_listing_gives_its_uuids() -> None:
    assert items_in(SMI_LIST.read_text()) == (
        LISTED[0],
        *MIGS,
        *LISTED[1:],
    )
    assert items_in(f"{LISTED[2]},{LISTED[3]}\n") == LISTED[2:]  # $NVIDIA_VISIBLE_DEVICES


def test_file_written_after_start_is_waited_for(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="collectors.gpu.nvml")
    gpus_txt = tmp_path / "gpus.txt"
    select = choose_selection(f"@{gpus_txt}", {})
    assert select == Selection("--gpus", file=str(gpus_txt))
    p = NvmlPoller(shared_node(), run="z2", select=select)
    assert p.start()
    assert p.poll() == [] and p.poll() == []
    gpus_txt.write_text(SMI_LIST.read_text()[:40])  # the shell is still writing it
    assert p.poll() == []
    gpus_txt.write_text(SMI_LIST.read_text())
    assert [(s.gpu_index, s.uuid) for s in p.poll()] == list(zip(range(4, 8), LISTED, strict=True))
    assert [r.getMessage() for r in caplog.records if "--gpus" in r.getMessage()] == [
        f"dsmon: --gpus: waiting for {gpus_txt} to list the GPUs"
    ]


@pytest.mark.parametrize(
    ("flag", "env", "want"),
    [
        ("1", {"DSMON_GPUS": "2", "CUDA_VISIBLE_DEVICES": "3"}, Selection("--gpus", ("1",))),
        (None, {"DSMON_GPUS": "2", "CUDA_VISIBLE_DEVICES": "3"}, Selection("$DSMON_GPUS", ("2",))),
        (
            None,
            {"DSMON_GPUS": " ", "CUDA_VISIBLE_DEVICES": "3"},
            Selection("$CUDA_VISIBLE_DEVICES", ("3",)),
        ),
        (
            None,
            {
                "CUDA_VISIBLE_DEVICES": "0,1",
                "NVIDIA_VISIBLE_DEVICES": "GPU-a100-0004,GPU-a100-0005",
            },
            Selection("$CUDA_VISIBLE_DEVICES", ("0", "1")),
        ),
        (
            None,
            {"CUDA_VISIBLE_DEVICES": "", "NVIDIA_VISIBLE_DEVICES": "GPU-a100-0004,GPU-a100-0005"},
            Selection("$NVIDIA_VISIBLE_DEVICES", ("GPU-a100-0004", "GPU-a100-0005")),
        ),
        (None, {"CUDA_VISIBLE_DEVICES": "-1", "NVIDIA_VISIBLE_DEVICES": "all"}, None),
        (None, {"NVIDIA_VISIBLE_DEVICES": "void"}, None),
        (None, {"NVIDIA_VISIBLE_DEVICES": "none"}, None),
        (None, {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"}, None),
        ("all", {"NVIDIA_VISIBLE_DEVICES": "GPU-a100-0004"}, None),
        (None, {"DSMON_GPUS": "@/logs/gpus.txt"}, Selection("$DSMON_GPUS", file="/logs/gpus.txt")),
    ],
)
def test_precedence_of_flag_and_environment(
    flag: str | None, env: dict[str, str], want: Selection | None
) -> None:
    assert choose_selection(flag, env) == want


def test_environment_selection_drives_the_poller() -> None:
    select = choose_selection(None, {"NVIDIA_VISIBLE_DEVICES": "GPU-a100-0004,GPU-a100-0005"})
    assert sampled(select) == [(4, "GPU-a100-0004"), (5, "GPU-a100-0005")]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("h100", "--gpus: 'h100' is not a GPU index, a GPU-/MIG- UUID, 'all' or @FILE"),
        ("0,-1", "--gpus: '-1' is not a GPU index, a GPU-/MIG- UUID, 'all' or @FILE"),
        (",", "--gpus: ',' is not a GPU index, a GPU-/MIG- UUID, 'all' or @FILE"),
        ("@", "--gpus: '@' needs a file name"),
    ],
)
def test_bad_selection_is_refused(text: str, message: str) -> None:
    with pytest.raises(SelectionError) as err:
        parse_selection(text, "--gpus")
    assert str(err.value) == message


def test_collect_refuses_a_bad_gpus_value_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DSMON_TOKEN", "gpu-select-token-0123456789")
    base = ["collect", "--log", str(tmp_path / "train.log"), "--state-dir", str(tmp_path / "s")]
    assert main([*base, "--server", "http://127.0.0.1:1", "--gpus", "h100"]) == 1
    assert capsys.readouterr().err == (
        "dsmon: --gpus: 'h100' is not a GPU index, a GPU-/MIG- UUID, 'all' or @FILE\n"
    )
    monkeypatch.setenv("DSMON_GPUS", "first")
    assert main([*base, "--server", "http://127.0.0.1:1"]) == 1
    assert capsys.readouterr().err == (
        "dsmon: $DSMON_GPUS: 'first' is not a GPU index, a GPU-/MIG- UUID, 'all' or @FILE\n"
    )


@pytest.mark.gpu
def test_real_nvml_selects_by_uuid_and_by_index() -> None:
    pynvml = pytest.importorskip("pynvml")
    every = NvmlPoller(pynvml, run="real", node="gpu-host")
    if not every.start():
        pytest.skip("no NVIDIA driver or GPU here")
    try:
        last = every.poll()[-1]
    finally:
        every.close()
    assert last.uuid and last.uuid.startswith("GPU-")
    for text in (last.uuid, last.uuid[:12], str(last.gpu_index)):
        one = NvmlPoller(pynvml, run="real", select=parse_selection(text, "--gpus"))
        assert one.start()
        try:
            assert [(s.gpu_index, s.uuid) for s in one.poll()] == [(last.gpu_index, last.uuid)]
        finally:
            one.close()
