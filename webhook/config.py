"""The admin's `config.yaml`, parsed and validated once into immutable objects.

One ConfigMap configures webhook and scheduler alike (schema in ARCHITECTURE.md). Validation
collects every problem, each naming its path and the offending value, because an admin
fixing a rejected edit wants the whole list at once; unknown keys are errors so a typo
cannot silently disable a rule.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal, TypeVar, cast

import yaml

from scheduler_core import names, objects, podgroups, profile, utilization
from webhook import selectors

MODEL_ANNOTATION = "gpu.nvidia.com/model"
MEMORY_ANNOTATION = "gpu.nvidia.com/memory"
SPOT_ANNOTATION = "gpu-scheduler.io/spot"
MILLI_ANNOTATION = "gpu-scheduler.io/gpu-milli"
DEVICES_ANNOTATION = "gpu-scheduler.io/gpu-devices"
CONFIG_KEY = "config.yaml"

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
SPOT_POLICIES = ("prefer", "avoid", "require", "forbid")
PROMETHEUS_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")

# Annotations a rule must set through its dedicated field, never through `set.annotations`.
_RESERVED_ANNOTATIONS = {
    MODEL_ANNOTATION: "set.gpuModel",
    MEMORY_ANNOTATION: "set.gpuMemoryMiB",
    SPOT_ANNOTATION: "set.spot",
    profile.DELETION_COST_ANNOTATION: "set.deletionCost",
    profile.RULE_ANNOTATION: "nothing (the webhook writes it)",
    profile.INITIAL_COST_ANNOTATION: "nothing (the webhook writes it)",
    podgroups.GROUP_ANNOTATION: "set.podGroup",
    podgroups.MIN_MEMBER_ANNOTATION: "set.podGroup",
    DEVICES_ANNOTATION: "nothing (the scheduler writes it)",
}


class ConfigError(ValueError):
    """An invalid configuration; `problems` lists every `path: message`."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class ValueSource:
    """A pod label or annotation whose value a rule copies (`{label: KEY}` or `{annotation: KEY}`)."""

    kind: Literal["label", "annotation"]
    key: str  # label-key syntax, checked when the config loads

    def __str__(self) -> str:
        return f"{self.kind} {self.key}"


@dataclass(frozen=True)
class PodGroupAction:
    """`set.podGroup`: a gang named by a pod label or annotation, for jobs whose operator emits no PodGroup.

    Written as gpu-scheduler.io/pod-group and gpu-scheduler.io/pod-group-min-member, both or neither
    (webhook.rules.pod_group_annotations). Values are copied as the pod has them: the scheduler, not the
    webhook, judges them, and says on the pod what is wrong (scheduler_core.podgroups.membership).
    """

    name_from: ValueSource  # its value names the group
    min_member: int | None = None  # a fixed count, 1..MAX_MIN_MEMBER; exactly one of this and min_member_from
    min_member_from: ValueSource | None = None  # its value, as text, is the count


@dataclass(frozen=True)
class RuleActions:
    """What a matching rule writes onto the pod (the rule's `set`)."""

    gpu_model: str | None = None  # -> gpu.nvidia.com/model
    gpu_memory_mib: int | None = None  # -> gpu.nvidia.com/memory, MiB per GPU
    spot: str | None = None  # -> gpu-scheduler.io/spot: prefer | avoid | require | forbid
    deletion_cost: int | None = None  # -> pod-deletion-cost; None: admission.deletionCost.initial
    annotations: tuple[tuple[str, str], ...] = ()  # further annotations, never overwriting
    labels: tuple[tuple[str, str], ...] = ()  # labels, never overwriting
    pod_group: PodGroupAction | None = None  # -> gpu-scheduler.io/pod-group and -min-member, from the pod's values

    @cached_property
    def annotation_items(self) -> tuple[tuple[str, str], ...]:
        """Every annotation the rule sets alike on every pod: not deletion cost, the rule name, nor a pod group.
        Worked out once per configuration, not per admitted pod."""
        items = []
        if self.gpu_model is not None:
            items.append((MODEL_ANNOTATION, self.gpu_model))
        if self.gpu_memory_mib is not None:
            items.append((MEMORY_ANNOTATION, str(self.gpu_memory_mib)))
        if self.spot is not None:
            items.append((SPOT_ANNOTATION, self.spot))
        return (*items, *self.annotations)


@dataclass(frozen=True)
class Rule:
    """One admission rule; the first rule whose selectors and bounds all match wins."""

    name: str
    namespace_selector: selectors.LabelSelector | None = None  # None: any namespace
    pod_selector: selectors.LabelSelector | None = None  # None: any pod
    min_gpus: int | None = None  # bounds on the pod's GPU request, inclusive
    max_gpus: int | None = None
    actions: RuleActions = field(default_factory=RuleActions)
    device_classes: tuple[str, ...] | None = None  # None: any pod; else only pods asking devices of one of these


@dataclass(frozen=True)
class Admission:
    gpu_resources: tuple[str, ...] = ("nvidia.com/gpu",)  # requesting any makes a GPU pod
    override_scheduler_name: bool = False  # replace a non-default schedulerName the pod has
    initial_deletion_cost: int = -50  # deletion cost when the rule sets none
    rules: tuple[Rule, ...] = ()
    device_classes: tuple[str, ...] = ()  # DeviceClasses whose devices are GPUs: asking any through DRA makes a GPU pod

    @cached_property
    def selects_namespaces(self) -> bool:
        """Whether any rule has a namespaceSelector, so that a pod's namespace labels must be looked up."""
        return any(rule.namespace_selector is not None for rule in self.rules)

    @cached_property
    def reads_claims(self) -> bool:
        """Whether a pod's DRA demand matters (GPU classes, or a rule with deviceClasses), so that its
        ResourceClaims and ResourceClaimTemplates must be looked up."""
        return bool(self.device_classes) or any(rule.device_classes is not None for rule in self.rules)


@dataclass(frozen=True)
class Config:
    scheduler_name: str = "gpu-scheduler"
    admission: Admission = field(default_factory=Admission)
    scheduling: profile.Scheduling = field(default_factory=profile.Scheduling)  # what the core is told


def loads(text: str) -> Config:
    """Parse `config.yaml` text, or a whole ConfigMap manifest holding it under `data`."""
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        raise ConfigError([f"not valid YAML: {objects.describe_yaml_error(err)}"]) from err
    if len(documents) > 1:
        kinds = ", ".join(str(d["kind"]) for d in documents if isinstance(d, Mapping) and d.get("kind"))
        raise ConfigError([f"holds {len(documents)} YAML documents{f' ({kinds})' if kinds else ''}; expected one: "
                           f"config.yaml, "
                           f"or a ConfigMap holding it under data.{CONFIG_KEY}"])
    document = documents[0] if documents else None
    if isinstance(document, Mapping) and "kind" in document:
        if document.get("kind") == "ConfigMap":
            return from_configmap(document)
        raise ConfigError([f"this is a {document.get('kind')} ({document.get('apiVersion') or 'no apiVersion'}), "
                           f"not a gpu-scheduler config: "
                           f"expected config.yaml (schedulerName, admission, scheduling) or a ConfigMap holding "
                           f"it under data.{CONFIG_KEY}"])
    return parse(document)


def from_configmap(configmap: Mapping[str, Any]) -> Config:
    """The config held by a ConfigMap object (as the API returns it)."""
    data = configmap.get("data") or {}
    if not isinstance(data, Mapping) or CONFIG_KEY not in data:
        raise ConfigError([f"data.{CONFIG_KEY}: missing; the ConfigMap must hold the config under this key"])
    text = data[CONFIG_KEY]
    if not isinstance(text, str):
        raise ConfigError([f"data.{CONFIG_KEY}: must be a string, got {_show(text)}"])
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError([f"data.{CONFIG_KEY}: not valid YAML: {objects.describe_yaml_error(err)}"]) from err
    return parse(document)


def parse(document: object) -> Config:
    """Validate a decoded document; raises ConfigError listing every problem."""
    check = _Checker()
    if document is None:
        raise ConfigError(["the config is empty; expected a mapping with schedulerName, admission, scheduling"])
    top = check.mapping(document, "", {"schedulerName", "admission", "scheduling"})
    if top is None:
        raise ConfigError(check.problems)
    scheduler_name = check.optional(top, "schedulerName", "", _dns_subdomain, Config.scheduler_name)
    admission = _admission(check, top.get("admission", {}), "admission")
    scheduling = _scheduling(check, top.get("scheduling", {}), "scheduling")
    if check.problems:
        raise ConfigError(check.problems)
    assert admission is not None and scheduling is not None
    return Config(scheduler_name=scheduler_name, admission=admission, scheduling=scheduling)


T = TypeVar("T")


class _Checker:
    """Collects `path: message` problems while the parse goes on."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def fail(self, path: str, message: str) -> None:
        self.problems.append(f"{path or '<top level>'}: {message}")

    def mapping(self, value: object, path: str, allowed: set[str]) -> Mapping[str, Any] | None:
        if not isinstance(value, Mapping):
            self.fail(path, f"must be a mapping, got {_show(value)}")
            return None
        for key in value:
            if key not in allowed:
                self.fail(_join(path, str(key)), f"unknown field; expected one of {', '.join(sorted(allowed))}")
        return value

    def optional(
        self,
        parent: Mapping[str, Any],
        key: str,
        path: str,
        convert: Callable[[_Checker, object, str], T | None],
        default: T,
    ) -> T:
        if key not in parent:
            return default
        converted = convert(self, parent[key], _join(path, key))
        return default if converted is None else converted


def _admission(check: _Checker, value: object, path: str) -> Admission | None:
    fields = {"gpuResources", "deviceClasses", "overrideSchedulerName", "deletionCost", "rules"}
    section = check.mapping(value, path, fields)
    if section is None:
        return None
    gpu_resources = check.optional(section, "gpuResources", path, _resource_names, Admission.gpu_resources)
    device_classes = check.optional(section, "deviceClasses", path, _device_classes, Admission.device_classes)
    override = check.optional(section, "overrideSchedulerName", path, _boolean, False)
    initial = Admission.initial_deletion_cost
    if "deletionCost" in section:
        cost_path = _join(path, "deletionCost")
        cost = check.mapping(section["deletionCost"], cost_path, {"initial"})
        if cost is not None:
            initial = check.optional(cost, "initial", cost_path, _int32, initial)
    rules: list[Rule] = []
    raw_rules = section.get("rules", [])
    if not isinstance(raw_rules, list):
        check.fail(_join(path, "rules"), f"must be a list, got {_show(raw_rules)}")
        raw_rules = []
    seen: dict[str, int] = {}
    for index, raw in enumerate(raw_rules):
        rule_path = f"{_join(path, 'rules')}[{index}]"
        rule = _rule(check, raw, rule_path)
        if rule is None:
            continue
        if rule.name in seen:
            check.fail(f"{rule_path}.name", f"duplicate rule name {_show(rule.name)} (also rules[{seen[rule.name]}])")
        seen.setdefault(rule.name, index)
        rules.append(rule)
    return Admission(
        gpu_resources=gpu_resources,
        override_scheduler_name=override,
        initial_deletion_cost=initial,
        rules=tuple(rules),
        device_classes=device_classes,
    )


def _rule(check: _Checker, value: object, path: str) -> Rule | None:
    fields = {"name", "namespaceSelector", "podSelector", "minGPUs", "maxGPUs", "deviceClasses", "set"}
    raw = check.mapping(value, path, fields)
    if raw is None:
        return None
    before = len(check.problems)
    if "name" not in raw:
        check.fail(_join(path, "name"), "required")
    name = check.optional(raw, "name", path, _label_value_name, "")
    namespace_selector = check.optional(raw, "namespaceSelector", path, _selector, None)
    pod_selector = check.optional(raw, "podSelector", path, _selector, None)
    min_gpus = check.optional(raw, "minGPUs", path, _non_negative_int, None)
    max_gpus = check.optional(raw, "maxGPUs", path, _non_negative_int, None)
    if min_gpus is not None and max_gpus is not None and min_gpus > max_gpus:
        check.fail(_join(path, "maxGPUs"), f"must be at least minGPUs ({min_gpus}), got {max_gpus}")
    device_classes = check.optional(raw, "deviceClasses", path, _rule_device_classes, None)
    actions = check.optional(raw, "set", path, _actions, RuleActions())
    if len(check.problems) > before:
        return None
    return Rule(name, namespace_selector, pod_selector, min_gpus, max_gpus, actions, device_classes)


def _actions(check: _Checker, value: object, path: str) -> RuleActions | None:
    fields = {"gpuModel", "gpuMemoryMiB", "spot", "deletionCost", "annotations", "labels", "podGroup"}
    raw = check.mapping(value, path, fields)
    if raw is None:
        return None
    actions = RuleActions(
        gpu_model=check.optional(raw, "gpuModel", path, _gpu_model, None),
        gpu_memory_mib=check.optional(raw, "gpuMemoryMiB", path, _positive_int, None),
        spot=check.optional(raw, "spot", path, _one_of(SPOT_POLICIES), None),
        deletion_cost=check.optional(raw, "deletionCost", path, _int32, None),
        annotations=check.optional(raw, "annotations", path, _annotations, ()),
        labels=check.optional(raw, "labels", path, _labels, ()),
        pod_group=check.optional(raw, "podGroup", path, _pod_group, None),
    )
    for key, _ in actions.annotations:
        if key in _RESERVED_ANNOTATIONS:
            check.fail(
                f"{_join(path, 'annotations')}.{key}",
                f"reserved annotation; set it with {_RESERVED_ANNOTATIONS[key]}",
            )
    return actions


def _pod_group(check: _Checker, value: object, path: str) -> PodGroupAction | None:
    before = len(check.problems)
    raw = check.mapping(value, path, {"nameFrom", "minMember", "minMemberFrom"})
    if raw is None:
        return None
    if "nameFrom" not in raw:
        check.fail(_join(path, "nameFrom"), "required")
    name_from = check.optional(raw, "nameFrom", path, _value_source, None)
    given = [key for key in ("minMember", "minMemberFrom") if key in raw]
    if len(given) != 1:
        check.fail(path, f"must have exactly one of minMember and minMemberFrom, got {'both' if given else 'neither'}")
    min_member = check.optional(raw, "minMember", path, _min_member, None)
    min_member_from = check.optional(raw, "minMemberFrom", path, _value_source, None)
    if len(check.problems) > before or name_from is None:
        return None
    return PodGroupAction(name_from, min_member=min_member, min_member_from=min_member_from)


def _scheduling(check: _Checker, value: object, path: str) -> profile.Scheduling | None:
    section = check.mapping(
        value, path, {"nodePolicy", "gpuPolicy", "weights", "warmup", "localityLabels", "utilizationMaxAgeSeconds",
                      "utilization"}
    )
    if section is None:
        return None
    warmup = profile.Warmup()
    if "warmup" in section:
        warm_path = _join(path, "warmup")
        raw = check.mapping(section["warmup"], warm_path, {"seconds", "cost"})
        if raw is not None:
            warmup = profile.Warmup(
                seconds=check.optional(raw, "seconds", warm_path, _non_negative_int, profile.Warmup.seconds),
                cost=check.optional(raw, "cost", warm_path, _int32, profile.Warmup.cost),
            )
    return profile.Scheduling(
        node_policy=check.optional(section, "nodePolicy", path, _one_of(profile.POLICIES), "binpack"),
        gpu_policy=check.optional(section, "gpuPolicy", path, _one_of(profile.POLICIES), "binpack"),
        weights=check.optional(section, "weights", path, _weights, ()),
        warmup=warmup,
        locality_labels=check.optional(section, "localityLabels", path, _resource_names,
                                       profile.Scheduling.locality_labels),
        utilization_max_age_seconds=check.optional(
            section, "utilizationMaxAgeSeconds", path, _positive_int, profile.Scheduling.utilization_max_age_seconds
        ),
        prometheus=check.optional(section, "utilization", path, _utilization, None),
    )


def _utilization(check: _Checker, value: object, path: str) -> profile.PrometheusSource | None:
    section = check.mapping(value, path, {"prometheus"})
    if section is None or "prometheus" not in section:
        return None
    return _prometheus(check, section["prometheus"], _join(path, "prometheus"))


def _prometheus(check: _Checker, value: object, path: str) -> profile.PrometheusSource | None:
    section = check.mapping(value, path, {
        "url", "query", "unit", "nodeLabel", "nodePattern", "refreshSeconds", "maxAgeSeconds", "timeoutSeconds",
        "caFile", "certFile", "keyFile", "insecureSkipVerify", "bearerTokenFile"})
    if section is None:
        return None
    before = len(check.problems)
    if "url" not in section:
        check.fail(_join(path, "url"), "required: the Prometheus base URL, e.g. http://prometheus.monitoring.svc:9090")
    default = profile.PrometheusSource
    source = profile.PrometheusSource(
        url=check.optional(section, "url", path, _http_url, ""),
        query=check.optional(section, "query", path, _string, default.query),
        unit=check.optional(section, "unit", path, _one_of(utilization.UNITS), default.unit),
        node_label=check.optional(section, "nodeLabel", path, _prometheus_label, default.node_label),
        node_pattern=check.optional(section, "nodePattern", path, _node_pattern, None),
        refresh_seconds=check.optional(section, "refreshSeconds", path, _positive_seconds, default.refresh_seconds),
        max_age_seconds=check.optional(section, "maxAgeSeconds", path, _positive_seconds, default.max_age_seconds),
        timeout_seconds=check.optional(section, "timeoutSeconds", path, _positive_seconds, default.timeout_seconds),
        ca_file=check.optional(section, "caFile", path, _string, None),
        cert_file=check.optional(section, "certFile", path, _string, None),
        key_file=check.optional(section, "keyFile", path, _string, None),
        insecure_skip_verify=check.optional(section, "insecureSkipVerify", path, _boolean, False),
        bearer_token_file=check.optional(section, "bearerTokenFile", path, _string, None),
    )
    if "maxAgeSeconds" in section or "refreshSeconds" in section:
        if source.max_age_seconds <= source.refresh_seconds:
            check.fail(_join(path, "maxAgeSeconds"), f"must be more than refreshSeconds ({source.refresh_seconds:g}), "
                       f"or every reading goes stale before the next refresh; got {source.max_age_seconds:g}")
    if (source.cert_file is None) != (source.key_file is None):
        check.fail(_join(path, "certFile" if source.cert_file is None else "keyFile"),
                   "certFile and keyFile go together (a client certificate and its key)")
    return source if len(check.problems) == before else None


def _http_url(check: _Checker, value: object, path: str) -> str | None:
    if isinstance(value, str):
        parsed = urllib.parse.urlsplit(value)
        if parsed.scheme in ("http", "https") and parsed.hostname and not parsed.query and not parsed.fragment:
            return value.rstrip("/")
    check.fail(path, f"must be an http:// or https:// URL without a query, e.g. http://prometheus:9090, got "
                     f"{_show(value)}")
    return None


def _prometheus_label(check: _Checker, value: object, path: str) -> str | None:
    if isinstance(value, str) and PROMETHEUS_LABEL.fullmatch(value):
        return value
    check.fail(path, f"must be a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*), got {_show(value)}")
    return None


def _node_pattern(check: _Checker, value: object, path: str) -> str | None:
    if not isinstance(value, str) or not value:
        check.fail(path, f"must be a regular expression, got {_show(value)}")
        return None
    try:
        pattern = re.compile(value)
    except re.error as err:
        check.fail(path, f"not a valid regular expression ({err}): {_show(value)}")
        return None
    if pattern.groups > 1:
        check.fail(path, f"must have at most one group (the node name), got {pattern.groups}: {_show(value)}")
        return None
    return value


def _positive_seconds(check: _Checker, value: object, path: str) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 86400:
        return float(value)
    check.fail(path, f"must be a number of seconds above 0 (at most 86400), got {_show(value)}")
    return None


# Value converters: (checker, value, path) -> parsed value, or None after reporting a problem.


def _boolean(check: _Checker, value: object, path: str) -> bool | None:
    if isinstance(value, bool):
        return value
    check.fail(path, f"must be true or false, got {_show(value)}")
    return None


def _integer(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _positive_int(check: _Checker, value: object, path: str) -> int | None:
    number = _integer(value)
    if number is None or number <= 0:
        check.fail(path, f"must be a positive integer, got {_show(value)}")
        return None
    return number


def _non_negative_int(check: _Checker, value: object, path: str) -> int | None:
    number = _integer(value)
    if number is None or number < 0:
        check.fail(path, f"must be an integer >= 0, got {_show(value)}")
        return None
    return number


def _int32(check: _Checker, value: object, path: str) -> int | None:
    number = _integer(value)
    if number is None or not INT32_MIN <= number <= INT32_MAX:
        check.fail(path, f"must be an integer from {INT32_MIN} to {INT32_MAX}, got {_show(value)}")
        return None
    return number


def _min_member(check: _Checker, value: object, path: str) -> int | None:
    number = _integer(value)
    if number is None or not 1 <= number <= podgroups.MAX_MIN_MEMBER:
        check.fail(path, f"must be an integer from 1 to {podgroups.MAX_MIN_MEMBER}, got {_show(value)}")
        return None
    return number


def _string(check: _Checker, value: object, path: str) -> str | None:
    if isinstance(value, str) and value:
        return value
    check.fail(path, f"must be a non-empty string, got {_show(value)}")
    return None


def _one_of(choices: tuple[str, ...]) -> Callable[[_Checker, object, str], Any]:
    def convert(check: _Checker, value: object, path: str) -> str | None:
        if isinstance(value, str) and value in choices:
            return value
        check.fail(path, f"must be one of {', '.join(choices)}, got {_show(value)}")
        return None

    return convert


def _name(problem_of: Callable[[str], str | None]) -> Callable[[_Checker, object, str], str | None]:
    """A string `problem_of` finds nothing wrong with (a DNS subdomain, a label key)."""
    def convert(check: _Checker, value: object, path: str) -> str | None:
        text = _string(check, value, path)
        if text is None:
            return None
        problem = problem_of(text)
        if problem:
            check.fail(path, f"{problem}, got {_show(text)}")
            return None
        return text
    return convert


_dns_subdomain = _name(names.dns_subdomain_problem)
_qualified_name = _name(names.qualified_name_problem)


def _label_value_name(check: _Checker, value: object, path: str) -> str | None:
    """Rule names end up in an annotation and in metrics labels: keep them label-shaped."""
    text = _string(check, value, path)
    if text is None:
        return None
    problem = names.label_value_problem(text)
    if problem:
        check.fail(path, f"{problem}, got {_show(text)}")
        return None
    return text


def _gpu_model(check: _Checker, value: object, path: str) -> str | None:
    text = _string(check, value, path)
    if text is None:
        return None
    if any(not token.strip() for token in text.split("|")):
        check.fail(path, f"must be model names separated by '|', like A100|H100, got {_show(text)}")
        return None
    return text


def _resource_names(check: _Checker, value: object, path: str) -> tuple[str, ...] | None:
    """A non-empty list of qualified names (resource names, label keys)."""
    if not isinstance(value, list) or not value:
        check.fail(path, f"must be a non-empty list of names, got {_show(value)}")
        return None
    result = []
    for index, item in enumerate(value):
        item_path = f"{path}[{index}]"
        text = _string(check, item, item_path)
        if text is None:
            continue
        problem = names.qualified_name_problem(text)
        if problem:
            check.fail(item_path, f"{problem}, got {_show(text)}")
            continue
        result.append(text)
    return tuple(result) if len(result) == len(value) else None


def _device_classes(check: _Checker, value: object, path: str, *, empty: bool = True) -> tuple[str, ...] | None:
    """A list of DeviceClass names (DNS subdomains, as the apiserver names DeviceClasses), each once."""
    if not isinstance(value, list) or (not value and not empty):
        wanted = "a list" if empty else "a non-empty list"
        check.fail(path, f"must be {wanted} of DeviceClass names, got {_show(value)}")
        return None
    result: list[str] = []
    seen: dict[str, int] = {}
    for index, item in enumerate(value):
        item_path = f"{path}[{index}]"
        if not isinstance(item, str) or not item or names.dns_subdomain_problem(item):
            check.fail(item_path, f"must be a DeviceClass name (a DNS subdomain), got {_show(item)}")
        elif item in seen:
            check.fail(item_path, f"duplicate DeviceClass {_show(item)} (also {path.rpartition('.')[2]}[{seen[item]}])")
        else:
            seen[item] = index
            result.append(item)
    return tuple(result) if len(result) == len(value) else None


def _rule_device_classes(check: _Checker, value: object, path: str) -> tuple[str, ...] | None:
    """A rule's deviceClasses: an empty list would match no pod, so it is refused."""
    return _device_classes(check, value, path, empty=False)


def _string_map(
    check: _Checker,
    value: object,
    path: str,
    value_problem: Callable[[str], str | None] | None,
) -> tuple[tuple[str, str], ...] | None:
    if not isinstance(value, Mapping):
        check.fail(path, f"must be a mapping of strings, got {_show(value)}")
        return None
    items = []
    ok = True
    for key, item in value.items():
        item_path = f"{path}.{key}"
        key_problem = names.qualified_name_problem(key) if isinstance(key, str) else "must be a string"
        if key_problem:
            check.fail(item_path, f"invalid key: {key_problem}")
            ok = False
            continue
        if not isinstance(item, str):
            check.fail(item_path, f"must be a string (quote it in YAML), got {_show(item)}")
            ok = False
            continue
        problem = value_problem(item) if value_problem else None
        if problem:
            check.fail(item_path, f"{problem}, got {_show(item)}")
            ok = False
            continue
        items.append((key, item))
    return tuple(items) if ok else None


def _annotations(check: _Checker, value: object, path: str) -> tuple[tuple[str, str], ...] | None:
    return _string_map(check, value, path, None)


def _labels(check: _Checker, value: object, path: str) -> tuple[tuple[str, str], ...] | None:
    return _string_map(check, value, path, names.label_value_problem)


def _value_source(check: _Checker, value: object, path: str) -> ValueSource | None:
    """`{label: KEY}` or `{annotation: KEY}`: exactly one, and a key the apiserver would accept."""
    if not isinstance(value, Mapping):
        check.fail(path, f"must be {{label: KEY}} or {{annotation: KEY}}, got {_show(value)}")
        return None
    before = len(check.problems)
    check.mapping(value, path, {"label", "annotation"})
    if len(check.problems) > before:
        return None
    if len(value) != 1:
        check.fail(path, f"must be {{label: KEY}} or {{annotation: KEY}}, got {_show(value)}")
        return None
    kind, raw = next(iter(value.items()))
    key_path = _join(path, kind)
    key = _qualified_name(check, raw, key_path)
    if key is None:
        return None
    return ValueSource("label" if kind == "label" else "annotation", key)


def _weights(check: _Checker, value: object, path: str) -> tuple[tuple[str, int], ...] | None:
    if not isinstance(value, Mapping):
        check.fail(path, f"must be a mapping of plugin name to weight, got {_show(value)}")
        return None
    weights = []
    for key, raw in value.items():
        if key not in profile.SCORE_PLUGINS:
            check.fail(f"{path}.{key}", f"unknown score plugin; expected one of {', '.join(profile.SCORE_PLUGINS)}")
            continue
        weight = _non_negative_int(check, raw, f"{path}.{key}")
        if weight is not None:
            weights.append((str(key), weight))
    return tuple(weights) if len(weights) == len(value) else None


def _selector(check: _Checker, value: object, path: str) -> selectors.LabelSelector | None:
    raw = check.mapping(value, path, {"matchLabels", "matchExpressions"})
    if raw is None:
        return None
    before = len(check.problems)
    requirements: list[selectors.Requirement] = []
    match_labels: tuple[tuple[str, str], ...] = check.optional(raw, "matchLabels", path, _labels, ())
    for key, label_value in match_labels:
        requirements.append(selectors.Requirement(key, "In", frozenset([label_value])))
    expressions = raw.get("matchExpressions", [])
    if not isinstance(expressions, list):
        check.fail(_join(path, "matchExpressions"), f"must be a list, got {_show(expressions)}")
        expressions = []
    for index, expression in enumerate(expressions):
        requirement = _requirement(check, expression, f"{_join(path, 'matchExpressions')}[{index}]")
        if requirement is not None:
            requirements.append(requirement)
    if len(check.problems) > before:
        return None
    return selectors.LabelSelector(tuple(requirements))


def _requirement(check: _Checker, value: object, path: str) -> selectors.Requirement | None:
    raw = check.mapping(value, path, {"key", "operator", "values"})
    if raw is None:
        return None
    before = len(check.problems)
    key = raw.get("key")
    if not isinstance(key, str) or names.qualified_name_problem(key):
        problem = names.qualified_name_problem(key) if isinstance(key, str) else "required, a label key"
        check.fail(f"{path}.key", f"{problem}, got {_show(key)}")
    operator = raw.get("operator")
    if operator not in selectors.OPERATORS:
        check.fail(f"{path}.operator", f"must be one of {', '.join(selectors.OPERATORS)}, got {_show(operator)}")
    values = raw.get("values", [])
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        check.fail(f"{path}.values", f"must be a list of strings, got {_show(values)}")
    elif operator in ("In", "NotIn") and not values:
        check.fail(f"{path}.values", f"must be non-empty for operator {operator}")
    elif operator in ("Exists", "DoesNotExist") and values:
        check.fail(f"{path}.values", f"must be empty for operator {operator}, got {_show(values)}")
    if len(check.problems) > before:
        return None
    return selectors.Requirement(str(key), cast(selectors.Operator, operator), frozenset(values))


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _show(value: object) -> str:
    """A value as the user wrote it: JSON for scalars, so strings show their quotes."""
    try:
        return json.dumps(value, default=str)
    except (TypeError, ValueError):
        return repr(value)

