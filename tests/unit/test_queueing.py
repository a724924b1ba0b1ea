"""The scheduling queue: order, backoff, parking until the cluster changes."""

from scheduler_core.queueing import SchedulingQueue


def test_priority_then_arrival():
    q = SchedulingQueue()
    q.add("low-1", 0)
    q.add("high", 100)
    q.add("low-2", 0)
    assert [q.pop(0), q.pop(0), q.pop(0), q.pop(0)] == ["high", "low-1", "low-2", None]


def test_a_failed_pod_backs_off_exponentially_up_to_the_cap():
    q = SchedulingQueue(initial_backoff=1, max_backoff=4)
    q.add("p")
    waits = []
    now = 0.0
    for _ in range(5):
        assert q.pop(now) == "p"
        q.failed("p", now, unschedulable=False)
        assert q.pop(now) is None
        wait = q.next_ready_in(now)
        waits.append(wait)
        now += wait
    assert waits == [1, 2, 4, 4, 4]


def test_an_unschedulable_pod_parks_until_the_cluster_changes():
    q = SchedulingQueue(initial_backoff=1, max_park=300)
    q.add("p")
    assert q.pop(0) == "p"
    q.failed("p", 0, unschedulable=True)
    assert q.pop(10) is None and q.parked() == 1
    assert q.cluster_changed() == 1
    assert q.pop(0.5) is None  # still backing off
    assert q.pop(1.0) == "p"


def test_parked_pods_are_retried_after_max_park():
    q = SchedulingQueue(initial_backoff=1, max_park=60)
    q.add("p")
    q.pop(0)
    q.failed("p", 0, unschedulable=True)
    assert q.next_ready_in(0) == 60
    q.flush_parked(59)
    assert q.pop(59) is None
    q.flush_parked(60)
    assert q.pop(60) == "p"


def test_updates_removal_and_done():
    q = SchedulingQueue()
    q.add("a")
    q.add("a")  # an update of a queued pod does not duplicate it
    q.add("b")
    q.remove("b")
    assert q.pop(0) == "a" and q.pop(0) is None
    q.done("a")
    assert len(q) == 0 and q.next_ready_in(0) is None


def test_a_priority_change_reorders():
    q = SchedulingQueue()
    q.add("a", 0)
    q.add("b", 0)
    q.add("b", 10)
    assert q.pop(0) == "b" and q.pop(0) == "a" and q.pop(0) is None


def test_an_update_of_a_parked_pod_does_not_wake_it():
    q = SchedulingQueue()
    q.add("p")
    q.pop(0)
    q.failed("p", 0, unschedulable=True)
    q.add("p")
    assert q.pop(100) is None and q.parked() == 1
