"""kube-scheduler's own ImageLocality Score cases (tests/data/upstream/imagelocality.yaml) against the core's
`image-locality`, and its image name normalisation."""

import hashlib

import pytest

from scheduler_core import pods
from tests.unit import upstream

TABLE = upstream.load("imagelocality")
DIGEST = "sha256:" + hashlib.sha256(b"root").hexdigest()


@upstream.each_case(TABLE)
def test_image_locality_scores_as_kube_scheduler(case):
    upstream.check(TABLE, case)


@pytest.mark.parametrize(("name", "normalized"), [
    ("root", "root:latest"),  # upstream's TestNormalizedImageName
    ("gcr.io:5000/root", "gcr.io:5000/root:latest"),
    ("root:tag", "root:tag"),
    (f"root@{DIGEST}", f"root@{DIGEST}"),
])
def test_an_image_without_a_tag_is_named_latest(name, normalized):
    assert pods.normalized_image(name) == normalized
