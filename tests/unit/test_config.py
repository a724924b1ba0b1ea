"""config.yaml validation: valid documents, and invalid ones with their exact messages."""

import textwrap

import pytest

from scheduler_core import names, profile
from webhook import config


def load(text: str) -> config.Config:
    return config.loads(textwrap.dedent(text))


def problems(text: str) -> list[str]:
    with pytest.raises(config.ConfigError) as caught:
        load(text)
    return caught.value.problems


def test_defaults_fill_what_the_document_leaves_out():
    settings = load("schedulerName: gpu-scheduler\n")
    assert settings == config.Config()
    assert settings.admission.gpu_resources == ("nvidia.com/gpu",)
    assert settings.admission.initial_deletion_cost == -50
    assert settings.scheduling.warmup == profile.Warmup(seconds=60, cost=0)


def test_the_design_example_parses_into_rules():
    settings = load(
        """
        schedulerName: gpu-scheduler
        admission:
          gpuResources: [nvidia.com/gpu, amd.com/gpu]
          overrideSchedulerName: true
          deletionCost: {initial: -10}
          rules:
            - name: a100-training
              namespaceSelector:
                matchLabels: {team: research}
              podSelector:
                matchExpressions: [{key: job-type, operator: In, values: [training]}]
              minGPUs: 2
              maxGPUs: 8
              set:
                gpuModel: A100
                gpuMemoryMiB: 40960
                deletionCost: -100
                spot: avoid
                annotations: {example.com/owner: ml}
                labels: {tier: gold}
            - name: any-gpu
              set: {}
        scheduling:
          nodePolicy: spread
          gpuPolicy: binpack
          weights: {gpu-placement: 3}
          warmup: {seconds: 120, cost: 10}
        """
    )
    first = settings.admission.rules[0]
    assert first.name == "a100-training"
    assert first.min_gpus == 2 and first.max_gpus == 8
    assert first.namespace_selector is not None and first.namespace_selector.matches({"team": "research"})
    assert first.actions.annotation_items == (
        ("gpu.nvidia.com/model", "A100"),
        ("gpu.nvidia.com/memory", "40960"),
        ("gpu-scheduler.io/spot", "avoid"),
        ("example.com/owner", "ml"),
    )
    assert first.actions.labels == (("tier", "gold"),)
    assert settings.admission.override_scheduler_name is True
    assert settings.admission.gpu_resources == ("nvidia.com/gpu", "amd.com/gpu")
    assert settings.scheduling.node_policy == "spread"
    assert settings.scheduling.weights == (("gpu-placement", 3),)
    assert settings.scheduling.weight_of("gpu-placement") == 3 and settings.scheduling.weight_of("spot") == 2
    assert settings.scheduling.weight_of("inter-pod-affinity") == 2  # kube-scheduler's default profile
    assert settings.scheduling.weight_of("pod-topology-spread") == 2  # likewise
    assert settings.scheduling.warmup == profile.Warmup(seconds=120, cost=10)


def test_device_classes_parse_for_admission_and_for_rules():
    settings = load(
        """
        admission:
          deviceClasses: [gpu.nvidia.com, mig.nvidia.com]
          rules:
            - {name: dra, deviceClasses: [gpu.nvidia.com], minGPUs: 2}
            - {name: any-gpu}
        """
    )
    admission = settings.admission
    assert admission.device_classes == ("gpu.nvidia.com", "mig.nvidia.com")
    assert [rule.device_classes for rule in admission.rules] == [("gpu.nvidia.com",), None]
    assert admission.reads_claims and admission.gpu_resources == ("nvidia.com/gpu",)


@pytest.mark.parametrize(
    ("text", "reads"),
    [
        ("schedulerName: gpu-scheduler", False),
        ("admission: {deviceClasses: []}", False),
        ("admission: {deviceClasses: [gpu.nvidia.com]}", True),
        ("admission: {rules: [{name: a, deviceClasses: [gpu.nvidia.com]}]}", True),
    ],
)
def test_claims_are_read_only_when_a_field_asks_for_dra_demand(text, reads):
    admission = load(text).admission
    assert admission.reads_claims is reads
    assert admission.device_classes == (("gpu.nvidia.com",) if "deviceClasses: [gpu" in text and "rules" not in text
                                        else ())


def test_the_dra_example_is_valid_and_targets_dra_pods():
    from pathlib import Path

    settings = config.loads((Path(__file__).parents[2] / "examples" / "config-dra.yaml").read_text())
    assert settings.admission.device_classes == ("gpu.nvidia.com", "mig.nvidia.com")
    assert [(rule.name, rule.device_classes) for rule in settings.admission.rules] == [
        ("dra-training", ("gpu.nvidia.com",)), ("dra-mig", ("mig.nvidia.com",)), ("any-gpu", None)]


def test_a_configmap_manifest_is_read_from_its_config_yaml_key():
    settings = load(
        """
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: gpu-scheduler-config, namespace: gpu-scheduler}
        data:
          config.yaml: |
            schedulerName: my-gpu-scheduler
        """
    )
    assert settings.scheduler_name == "my-gpu-scheduler"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ["the config is empty; expected a mapping with schedulerName, admission, scheduling"]),
        ("[1, 2]", ['<top level>: must be a mapping, got [1, 2]']),
        ("schedulerName: [", None),  # YAML error, message from the parser
        ("schedulr: x", ["schedulr: unknown field; expected one of admission, schedulerName, scheduling"]),
        ("schedulerName: Gpu_Scheduler",
         ["schedulerName: must be a lowercase RFC 1123 subdomain (a-z, 0-9, '-', '.'), got \"Gpu_Scheduler\""]),
        ("admission: {gpuResources: []}",
         ["admission.gpuResources: must be a non-empty list of names, got []"]),
        ("admission: {gpuResources: ['nvidia.com/gpu', 'bad key!']}",
         [f"admission.gpuResources[1]: name part {names.NAME_RULE}, got \"bad key!\""]),
        ("admission: {overrideSchedulerName: 'yes'}",
         ["admission.overrideSchedulerName: must be true or false, got \"yes\""]),
        ("admission: {deletionCost: {initial: 2147483648}}",
         ["admission.deletionCost.initial: must be an integer from -2147483648 to 2147483647, got 2147483648"]),
        ("admission: {deletionCost: {initial: '-5'}}",
         ["admission.deletionCost.initial: must be an integer from -2147483648 to 2147483647, got \"-5\""]),
        ("admission: {deletionCost: {inital: -5}}",
         ["admission.deletionCost.inital: unknown field; expected one of initial"]),
        ("admission: {rules: {name: a}}", ['admission.rules: must be a list, got {"name": "a"}']),
        ("admission: {rules: [{set: {}}]}", ["admission.rules[0].name: required"]),
        ("admission: {rules: [{name: a}, {name: a}]}",
         ['admission.rules[1].name: duplicate rule name "a" (also rules[0])']),
        ("admission: {rules: [{name: a, set: {gpuMemoryMiB: 40Gi}}]}",
         ['admission.rules[0].set.gpuMemoryMiB: must be a positive integer, got "40Gi"']),
        ("admission: {rules: [{name: a, set: {gpuMemoryMiB: 0}}]}",
         ["admission.rules[0].set.gpuMemoryMiB: must be a positive integer, got 0"]),
        ("admission: {rules: [{name: a, set: {gpuMemoryMiB: true}}]}",
         ["admission.rules[0].set.gpuMemoryMiB: must be a positive integer, got true"]),
        ("admission: {rules: [{name: a, set: {deletionCost: -2147483649}}]}",
         ["admission.rules[0].set.deletionCost: must be an integer from -2147483648 to 2147483647, "
          "got -2147483649"]),
        ("admission: {rules: [{name: a, set: {gpuModel: 'A100||H100'}}]}",
         ["admission.rules[0].set.gpuModel: must be model names separated by '|', like A100|H100, "
          "got \"A100||H100\""]),
        ("admission: {rules: [{name: a, set: {spot: maybe}}]}",
         ['admission.rules[0].set.spot: must be one of prefer, avoid, require, forbid, got "maybe"']),
        ("admission: {rules: [{name: a, set: {gpuModle: A100}}]}",
         ["admission.rules[0].set.gpuModle: unknown field; expected one of annotations, deletionCost, "
          "gpuMemoryMiB, gpuModel, labels, podGroup, spot"]),
        ("admission: {rules: [{name: a, set: {annotations: {gpu.nvidia.com/model: A100}}}]}",
         ["admission.rules[0].set.annotations.gpu.nvidia.com/model: reserved annotation; set it with "
          "set.gpuModel"]),
        ("admission: {rules: [{name: a, set: {annotations: {controller.kubernetes.io/pod-deletion-cost: '1'}}}]}",
         ["admission.rules[0].set.annotations.controller.kubernetes.io/pod-deletion-cost: reserved annotation; "
          "set it with set.deletionCost"]),
        ("admission: {rules: [{name: a, set: {annotations: {example.com/n: 3}}}]}",
         ["admission.rules[0].set.annotations.example.com/n: must be a string (quote it in YAML), got 3"]),
        ("admission: {rules: [{name: a, set: {labels: {tier: 'not a label value'}}}]}",
         [f"admission.rules[0].set.labels.tier: {names.VALUE_RULE}, got \"not a label value\""]),
        ("admission: {rules: [{name: a, set: {labels: {/tier: x}}}]}",
         ["admission.rules[0].set.labels./tier: invalid key: prefix part must be non-empty"]),
        ("admission: {rules: [{name: a, minGPUs: 4, maxGPUs: 2}]}",
         ["admission.rules[0].maxGPUs: must be at least minGPUs (4), got 2"]),
        ("admission: {rules: [{name: a, minGPUs: -1}]}",
         ["admission.rules[0].minGPUs: must be an integer >= 0, got -1"]),
        ("admission: {rules: [{name: 'my rule'}]}",
         [f"admission.rules[0].name: {names.VALUE_RULE}, got \"my rule\""]),
        ("admission: {rules: [{name: a, podSelector: {matchExpressions: [{key: k, operator: Equals}]}}]}",
         ['admission.rules[0].podSelector.matchExpressions[0].operator: must be one of In, NotIn, Exists, '
          'DoesNotExist, got "Equals"']),
        ("admission: {rules: [{name: a, podSelector: {matchExpressions: [{key: k, operator: In}]}}]}",
         ["admission.rules[0].podSelector.matchExpressions[0].values: must be non-empty for operator In"]),
        ("admission: {rules: [{name: a, podSelector: {matchExpressions: [{key: k, operator: Exists, values: [x]}]}}]}",
         ['admission.rules[0].podSelector.matchExpressions[0].values: must be empty for operator Exists, '
          'got ["x"]']),
        ("admission: {rules: [{name: a, namespaceSelector: {matchLabels: {team: true}}}]}",
         ["admission.rules[0].namespaceSelector.matchLabels.team: must be a string (quote it in YAML), got true"]),
        ("admission: {rules: [{name: a, namespaceSelector: {matchLabel: {team: x}}}]}",
         ["admission.rules[0].namespaceSelector.matchLabel: unknown field; expected one of matchExpressions, "
          "matchLabels"]),
        ("admission: {deviceClasses: gpu.nvidia.com}",
         ['admission.deviceClasses: must be a list of DeviceClass names, got "gpu.nvidia.com"']),
        ("admission: {deviceClasses: [gpu.nvidia.com, 'x y']}",
         ['admission.deviceClasses[1]: must be a DeviceClass name (a DNS subdomain), got "x y"']),
        ("admission: {deviceClasses: [GPU.nvidia.com, 3, '']}",
         ['admission.deviceClasses[0]: must be a DeviceClass name (a DNS subdomain), got "GPU.nvidia.com"',
          "admission.deviceClasses[1]: must be a DeviceClass name (a DNS subdomain), got 3",
          'admission.deviceClasses[2]: must be a DeviceClass name (a DNS subdomain), got ""']),
        (f"admission: {{deviceClasses: [{'a' * 254}]}}",
         [f'admission.deviceClasses[0]: must be a DeviceClass name (a DNS subdomain), got "{"a" * 254}"']),
        ("admission: {deviceClasses: [gpu.nvidia.com, mig.nvidia.com, gpu.nvidia.com]}",
         ['admission.deviceClasses[2]: duplicate DeviceClass "gpu.nvidia.com" (also deviceClasses[0])']),
        ("admission: {rules: [{name: a}, {name: b, deviceClasses: ['x y']}]}",
         ['admission.rules[1].deviceClasses[0]: must be a DeviceClass name (a DNS subdomain), got "x y"']),
        ("admission: {rules: [{name: a, deviceClasses: []}]}",
         ["admission.rules[0].deviceClasses: must be a non-empty list of DeviceClass names, got []"]),
        ("admission: {rules: [{name: a, deviceClasses: gpu.nvidia.com}]}",
         ['admission.rules[0].deviceClasses: must be a non-empty list of DeviceClass names, got "gpu.nvidia.com"']),
        ("admission: {rules: [{name: a, deviceClasses: [a.b, a.b]}]}",
         ['admission.rules[0].deviceClasses[1]: duplicate DeviceClass "a.b" (also deviceClasses[0])']),
        ("admission: {rules: [{name: a, deviceClass: [gpu.nvidia.com]}]}",
         ["admission.rules[0].deviceClass: unknown field; expected one of deviceClasses, maxGPUs, minGPUs, name, "
          "namespaceSelector, podSelector, set"]),
        ("admission: {deviceclasses: [gpu.nvidia.com]}",
         ["admission.deviceclasses: unknown field; expected one of deletionCost, deviceClasses, gpuResources, "
          "overrideSchedulerName, rules"]),
        ("scheduling: {nodePolicy: pack}",
         ['scheduling.nodePolicy: must be one of binpack, spread, got "pack"']),
        ("scheduling: {weights: {gpu-placement: -1}}",
         ["scheduling.weights.gpu-placement: must be an integer >= 0, got -1"]),
        ("scheduling: {weights: {gpu: 1}}",
         ["scheduling.weights.gpu: unknown score plugin; expected one of gpu-placement, zone-balance, node-resources, "
          "balanced-allocation, image-locality, gpu-utilization, spot, locality, node-affinity, taint-toleration, "
          "inter-pod-affinity, pod-topology-spread, dynamic-resources, dra-devices, dra-demand, random, bestfit, "
          "dotproduct, gpupacking, fgd, gpu-fragmentation, group-room"]),
        ("scheduling: {weights: {inter-pod-affinity: 1.5}}",
         ["scheduling.weights.inter-pod-affinity: must be an integer >= 0, got 1.5"]),
        ("scheduling: {weights: {pod-topology-spread: -2}}",
         ["scheduling.weights.pod-topology-spread: must be an integer >= 0, got -2"]),
        ("scheduling: {localityLabels: []}", ["scheduling.localityLabels: must be a non-empty list of names, got []"]),
        ("scheduling: {utilizationMaxAgeSeconds: 0}",
         ["scheduling.utilizationMaxAgeSeconds: must be a positive integer, got 0"]),
        ("scheduling: {warmup: {seconds: 1.5}}",
         ["scheduling.warmup.seconds: must be an integer >= 0, got 1.5"]),
    ],
)
def test_invalid_documents_name_the_path_and_the_value(text, expected):
    found = problems(text)
    if expected is None:
        assert len(found) == 1 and found[0].startswith("not valid YAML:")
    else:
        assert found == expected


@pytest.mark.parametrize(
    ("pod_group", "expected"),
    [
        ("{nameFrom: {label: training.kubeflow.org/job-name}, minMember: 8}",
         config.PodGroupAction(config.ValueSource("label", "training.kubeflow.org/job-name"), min_member=8)),
        ("{nameFrom: {annotation: example.com/gang}, minMember: 1}",
         config.PodGroupAction(config.ValueSource("annotation", "example.com/gang"), min_member=1)),
        ("{nameFrom: {label: job}, minMember: 100000}",
         config.PodGroupAction(config.ValueSource("label", "job"), min_member=100000)),
        ("{nameFrom: {label: job}, minMemberFrom: {annotation: example.com/replicas}}",
         config.PodGroupAction(config.ValueSource("label", "job"),
                               min_member_from=config.ValueSource("annotation", "example.com/replicas"))),
        ("{nameFrom: {label: job}, minMemberFrom: {label: replicas}}",
         config.PodGroupAction(config.ValueSource("label", "job"),
                               min_member_from=config.ValueSource("label", "replicas"))),
    ],
)
def test_set_pod_group_valid_forms(pod_group, expected):
    settings = load(f"admission: {{rules: [{{name: a, set: {{podGroup: {pod_group}}}}}]}}")
    actions = settings.admission.rules[0].actions
    assert actions.pod_group == expected
    assert actions.annotation_items == ()  # written per pod, from its own values (webhook.rules)


P = "admission.rules[0].set.podGroup"


@pytest.mark.parametrize(
    ("pod_group", "expected"),
    [
        ("8", [f"{P}: must be a mapping, got 8"]),
        ("{}", [f"{P}.nameFrom: required", f"{P}: must have exactly one of minMember and minMemberFrom, got neither"]),
        ("{minMember: 8}", [f"{P}.nameFrom: required"]),
        ("{nameFrom: {label: job}}", [f"{P}: must have exactly one of minMember and minMemberFrom, got neither"]),
        ("{nameFrom: {label: job}, minMember: 8, minMemberFrom: {label: n}}",
         [f"{P}: must have exactly one of minMember and minMemberFrom, got both"]),
        ("{nameFrom: {label: job}, minMembers: 8}",
         [f"{P}.minMembers: unknown field; expected one of minMember, minMemberFrom, nameFrom",
          f"{P}: must have exactly one of minMember and minMemberFrom, got neither"]),
        ("{nameFrom: {label: job}, minMember: 8x}",
         [f'{P}.minMember: must be an integer from 1 to 100000, got "8x"']),
        ("{nameFrom: {label: job}, minMember: '8'}", [f'{P}.minMember: must be an integer from 1 to 100000, got "8"']),
        ("{nameFrom: {label: job}, minMember: 0}", [f"{P}.minMember: must be an integer from 1 to 100000, got 0"]),
        ("{nameFrom: {label: job}, minMember: -2}", [f"{P}.minMember: must be an integer from 1 to 100000, got -2"]),
        ("{nameFrom: {label: job}, minMember: 100001}",
         [f"{P}.minMember: must be an integer from 1 to 100000, got 100001"]),
        ("{nameFrom: {label: job}, minMember: 2.5}", [f"{P}.minMember: must be an integer from 1 to 100000, got 2.5"]),
        ("{nameFrom: {label: job}, minMember: true}",
         [f"{P}.minMember: must be an integer from 1 to 100000, got true"]),
        ("{nameFrom: job, minMember: 8}", [f'{P}.nameFrom: must be {{label: KEY}} or {{annotation: KEY}}, got "job"']),
        ("{nameFrom: {}, minMember: 8}", [f"{P}.nameFrom: must be {{label: KEY}} or {{annotation: KEY}}, got {{}}"]),
        ("{nameFrom: {label: a, annotation: b}, minMember: 8}",
         [f'{P}.nameFrom: must be {{label: KEY}} or {{annotation: KEY}}, got {{"label": "a", "annotation": "b"}}']),
        ("{nameFrom: {lable: job}, minMember: 8}",
         [f"{P}.nameFrom.lable: unknown field; expected one of annotation, label"]),
        ("{nameFrom: {label: 'bad key!'}, minMember: 8}",
         [f'{P}.nameFrom.label: name part {names.NAME_RULE}, got "bad key!"']),
        ("{nameFrom: {label: ''}, minMember: 8}", [f'{P}.nameFrom.label: must be a non-empty string, got ""']),
        ("{nameFrom: {annotation: 3}, minMember: 8}", [f"{P}.nameFrom.annotation: must be a non-empty string, got 3"]),
        ("{nameFrom: {label: job}, minMemberFrom: {annotation: /replicas}}",
         [f'{P}.minMemberFrom.annotation: prefix part must be non-empty, got "/replicas"']),
        ("{nameFrom: {label: job}, minMemberFrom: 8}",
         [f"{P}.minMemberFrom: must be {{label: KEY}} or {{annotation: KEY}}, got 8"]),
        ("{nameFrom: {label: 'Bad_Prefix/job'}, minMember: 0}",
         [f"{P}.nameFrom.label: prefix part {names.SUBDOMAIN_RULE}, got \"Bad_Prefix/job\"",
          f"{P}.minMember: must be an integer from 1 to 100000, got 0"]),
    ],
)
def test_set_pod_group_invalid_forms_name_the_path_and_the_value(pod_group, expected):
    assert problems(f"admission: {{rules: [{{name: a, set: {{podGroup: {pod_group}}}}}]}}") == expected


@pytest.mark.parametrize("key", ["gpu-scheduler.io/pod-group", "gpu-scheduler.io/pod-group-min-member"])
def test_the_group_annotations_are_reserved_for_set_pod_group(key):
    assert problems(f"admission: {{rules: [{{name: a, set: {{annotations: {{{key}: x}}}}}}]}}") == [
        f"admission.rules[0].set.annotations.{key}: reserved annotation; set it with set.podGroup"
    ]


def test_every_problem_is_reported_not_just_the_first():
    found = problems(
        """
        schedulerName: BAD
        admission:
          deletionCost: {initial: x}
          rules:
            - {name: a, set: {gpuMemoryMiB: "40Gi"}}
            - {name: b, minGPUs: x}
        scheduling: {gpuPolicy: tight}
        """
    )
    assert [p.split(":")[0] for p in found] == [
        "schedulerName",
        "admission.deletionCost.initial",
        "admission.rules[0].set.gpuMemoryMiB",
        "admission.rules[1].minGPUs",
        "scheduling.gpuPolicy",
    ]


@pytest.mark.parametrize(
    ("manifest", "expected"),
    [
        ({"kind": "ConfigMap", "data": {}},
         ["data.config.yaml: missing; the ConfigMap must hold the config under this key"]),
        ({"kind": "ConfigMap", "data": {"config.yaml": "a: ["}}, None),
        ({"kind": "ConfigMap", "data": {"config.yaml": "admission: {rules: [{name: 1x_}]}"}},
         [f"admission.rules[0].name: {names.VALUE_RULE}, got \"1x_\""]),
    ],
)
def test_configmap_problems(manifest, expected):
    with pytest.raises(config.ConfigError) as caught:
        config.from_configmap(manifest)
    if expected is None:
        assert caught.value.problems[0].startswith("data.config.yaml: not valid YAML:")
    else:
        assert caught.value.problems == expected


def test_the_bundled_example_is_valid():
    from pathlib import Path

    settings = config.loads((Path(__file__).parents[2] / "examples" / "config.yaml").read_text())
    assert [rule.name for rule in settings.admission.rules][-1] == "any-gpu"
