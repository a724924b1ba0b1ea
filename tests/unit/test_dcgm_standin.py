"""The dcgm-exporter stand-in (tests/e2e/dcgm.py) writes what dcgm-exporter 4.5.3-4.8.2 writes, so what the
monitoring tests prove about our queries holds for the real exporter's output."""

import math
import threading
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e import dcgm

NODE_UUID = dcgm.derived_uuid("gpu-node-1", 0)


@pytest.fixture
def exporter():
    with dcgm.DcgmExporter() as running:
        yield running


def _families(text):
    return {family.name: family for family in text_string_to_metric_families(text)}


def test_a_gpu_reads_as_dcgm_exporter_writes_it():
    """Line for line as the release's template renders it: HELP and TYPE from default-counters.csv, the labels in
    the template's order, the driver version label field, integer fields printed as integers."""
    gpu = dcgm.GPU(hostname="gpu-node-1", index=0, uuid="GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52",
                   model="NVIDIA A100-SXM4-40GB", pci_bus_id="00000000:07:00.0", driver_version="580.65.06",
                   values={"DCGM_FI_DEV_GPU_UTIL": 42, "DCGM_FI_DEV_FB_USED": 1024})
    labels = ('gpu="0",UUID="GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52",pci_bus_id="00000000:07:00.0",'
              'device="nvidia0",modelName="NVIDIA A100-SXM4-40GB",Hostname="gpu-node-1",'
              'DCGM_FI_DRIVER_VERSION="580.65.06"')
    assert dcgm.render([gpu]) == (
        "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n"
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
        f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} 42\n"
        "# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).\n"
        "# TYPE DCGM_FI_DEV_FB_USED gauge\n"
        f"DCGM_FI_DEV_FB_USED{{{labels}}} 1024\n"
    )


def test_pod_mapping_appends_container_namespace_and_pod_after_the_label_fields():
    gpu = dcgm.GPU(hostname="n", index=3, uuid="GPU-x", model="m", pci_bus_id="p", driver_version="d",
                   values={"DCGM_FI_DEV_GPU_UTIL": 7}, pod=dcgm.Pod("team-a", "train-0", "trainer"))
    line = dcgm.render([gpu]).splitlines()[-1]
    assert line == ('DCGM_FI_DEV_GPU_UTIL{gpu="3",UUID="GPU-x",pci_bus_id="p",device="nvidia3",modelName="m",'
                    'Hostname="n",DCGM_FI_DRIVER_VERSION="d",container="trainer",namespace="team-a",pod="train-0"} 7')


@pytest.mark.parametrize(("value", "served"), [
    (42, "42"),
    (42.9, "42"),  # an integer field: %d
    (-5, "-5"),
    (1e9, "1000000000"),
    (float("nan"), "NaN"),
    (float("inf"), "+Inf"),
    ("1e9", "1e9"),  # a str is served verbatim
    ("NaN", "NaN"),
])
def test_util_values_are_served_as_dcgm_exporter_formats_them_and_odd_ones_verbatim(value, served):
    assert dcgm.format_value(dcgm.FIELDS[1], value) == served


def test_a_float_field_prints_six_decimals_as_go_does():
    power = dcgm.Field("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", integer=False)
    assert dcgm.format_value(power, 61.5) == "61.500000"


def test_a_blank_value_leaves_its_line_and_an_empty_counter_its_help_out():
    gpu = dcgm.GPU(hostname="n", index=0, uuid="u", model="m", pci_bus_id="p", driver_version="d",
                   values={"DCGM_FI_DEV_GPU_UTIL": None, "DCGM_FI_DEV_FB_FREE": 100})
    assert [line for line in dcgm.render([gpu]).splitlines() if not line.startswith("#")] == [
        'DCGM_FI_DEV_FB_FREE{gpu="0",UUID="u",pci_bus_id="p",device="nvidia0",modelName="m",Hostname="n",'
        'DCGM_FI_DRIVER_VERSION="d"} 100']
    assert dcgm.render([]) == ""


def test_the_served_text_parses_with_the_expected_labels_and_values(exporter):
    exporter.set_gpu("gpu-node-1", 0, util=42, fb_used=1024, fb_free=39936, sm_clock=1410)
    exporter.set_gpu("gpu-node-1", 1, util=0, model="NVIDIA H100 80GB HBM3", uuid="GPU-fixed")
    exporter.set_gpu("gpu-node-2", 0, util="NaN")
    with urllib.request.urlopen(exporter.url, timeout=5) as response:
        assert response.headers["Content-Type"] == "text/plain; charset=utf-8"
        text = response.read().decode()
    families = _families(text)
    assert set(families) == {"DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_FREE",
                             "DCGM_FI_DEV_FB_USED"}
    util = families["DCGM_FI_DEV_GPU_UTIL"]
    assert (util.type, util.documentation) == ("gauge", "GPU utilization (in %).")
    by_gpu = {(s.labels["Hostname"], s.labels["gpu"]): s for s in util.samples}
    first = by_gpu[("gpu-node-1", "0")]
    assert first.labels == {"gpu": "0", "UUID": NODE_UUID, "pci_bus_id": "00000000:07:00.0", "device": "nvidia0",
                            "modelName": "NVIDIA A100-SXM4-40GB", "Hostname": "gpu-node-1",
                            "DCGM_FI_DRIVER_VERSION": "580.65.06"}
    assert first.value == 42
    assert by_gpu[("gpu-node-1", "1")].labels["modelName"] == "NVIDIA H100 80GB HBM3"
    assert by_gpu[("gpu-node-1", "1")].labels["UUID"] == "GPU-fixed"
    assert math.isnan(by_gpu[("gpu-node-2", "0")].value)
    assert {s.value for s in families["DCGM_FI_DEV_FB_USED"].samples if s.labels["gpu"] == "0"
            and s.labels["Hostname"] == "gpu-node-1"} == {1024}
    assert exporter.scrapes == 1


def test_uuids_are_derived_from_node_and_index_in_nvidias_spelling():
    assert dcgm.derived_uuid("gpu-node-1", 0) == NODE_UUID
    assert dcgm.derived_uuid("gpu-node-1", 1) != NODE_UUID
    assert NODE_UUID.startswith("GPU-") and len(NODE_UUID) == len("GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52")


def test_a_removed_node_is_no_longer_served_and_other_paths_are_404(exporter):
    exporter.set_gpu("gpu-node-1", 0)
    exporter.set_gpu("gpu-node-2", 0)
    exporter.remove_node("gpu-node-1")
    assert {s.labels["Hostname"] for s in _families(exporter.body())["DCGM_FI_DEV_GPU_UTIL"].samples} == {"gpu-node-2"}
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(exporter.url.replace("/metrics", "/other"), timeout=5)
    assert raised.value.code == 404


def test_the_lowercase_hostname_label_of_upstream_main_can_be_served():
    with dcgm.DcgmExporter(hostname_label="hostname") as lowercase:
        lowercase.set_gpu("gpu-node-1", 0)
        sample = _families(lowercase.body())["DCGM_FI_DEV_GPU_UTIL"].samples[0]
    assert sample.labels["hostname"] == "gpu-node-1" and "Hostname" not in sample.labels


def test_setting_gpus_while_it_serves_never_gives_a_torn_answer(exporter):
    """Scrapes and updates from several threads: every answer parses, each GPU once per counter."""
    stop = threading.Event()

    def churn():
        index = 0
        while not stop.is_set():
            exporter.set_gpu(f"node-{index % 5}", index % 8, util=index % 101)
            if index % 7 == 0:
                exporter.remove_node(f"node-{index % 5}")
            index += 1

    writers = [threading.Thread(target=churn) for _ in range(2)]
    for writer in writers:
        writer.start()
    try:
        for _ in range(30):
            with urllib.request.urlopen(exporter.url, timeout=5) as response:
                families = _families(response.read().decode())
            for family in families.values():
                keys = [(s.labels["Hostname"], s.labels["gpu"]) for s in family.samples]
                assert len(keys) == len(set(keys))
    finally:
        stop.set()
        for writer in writers:
            writer.join()
