"""Dynamic Resource Allocation (resource.k8s.io/v1): devices published in ResourceSlices, claimed by pods through
ResourceClaims, allocated as kube-scheduler v1.36.3 allocates them.

`slices` reads ResourceSlices, `pools` gathers the pools a node can use, `claims` reads claims and DeviceClasses,
`cel` evaluates their selectors, `capacity` is consumable capacity, `allocator` finds the devices, `policy` is our
device order and the pod's GPU annotations as limits, and `state` keeps the watched objects and what our own
decisions assumed of them, and answers DynamicResources' PreFilter and Filter.
"""
