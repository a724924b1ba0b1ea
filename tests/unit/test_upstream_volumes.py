"""kube-scheduler's own tables of the four volume plugins (VolumeBinding, VolumeZone, VolumeRestrictions,
NodeVolumeLimits), ported as data: tests/data/upstream/{volumebinding,volumezone,volumerestrictions,
nodevolumelimits}.yaml."""

from tests.unit import upstream

test_volume_binding_as_upstream = upstream.test_of("volumebinding")
test_volume_zone_as_upstream = upstream.test_of("volumezone")
test_volume_restrictions_as_upstream = upstream.test_of("volumerestrictions")
test_node_volume_limits_as_upstream = upstream.test_of("nodevolumelimits")
