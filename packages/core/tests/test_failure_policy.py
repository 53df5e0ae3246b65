"""The failure policy alone: how an attempt ended in, what the driver does next out (no Ray)."""

from trainkit._internal.driver.failure_policy import FailurePolicy, Outcome

FAILED = Outcome(error_type="ValueError", failed=True)


def test_a_finished_attempt_finishes():
    assert FailurePolicy(max_failures=0).decide(Outcome()).action == "finish"


def test_max_failures_counts_retries_then_gives_up_naming_the_limit():
    policy = FailurePolicy(max_failures=2)
    assert [policy.decide(FAILED).action for _ in range(3)] == ["retry", "retry", "give_up"]
    assert policy.decide(FAILED).reason == "failure 4 of FailureConfig.max_failures=2: no retries left"


def test_max_failures_zero_gives_up_at_the_first_failure():
    assert FailurePolicy(max_failures=0).decide(FAILED).action == "give_up"


def test_max_failures_minus_one_retries_forever():
    policy = FailurePolicy(max_failures=-1)
    assert {policy.decide(FAILED).action for _ in range(50)} == {"retry"}


def test_an_elastic_resize_restarts_at_its_size_and_is_not_a_failure():
    policy = FailurePolicy(max_failures=0)
    decision = policy.decide(Outcome(resize_to=3))
    assert (decision.action, decision.size) == ("resize", 3)
    assert policy.decide(FAILED).action == "give_up"  # the resize used none of the budget
    # a retry after a failure starts at what fits again, not at the last resize's size
    assert FailurePolicy(max_failures=1).decide(FAILED).size is None


def test_a_preemption_has_its_own_budget_as_in_ray_train():
    policy = FailurePolicy(max_failures=0, max_preemption_failures=1)
    preempted = Outcome(error_type="Preempted", failed=True, preempted=True)
    assert policy.decide(preempted).reason == "preemption 1 of FailureConfig.max_preemption_failures=1"
    decision = policy.decide(preempted)
    assert (decision.action, decision.reason) == (
        "give_up", "preemption 2 of FailureConfig.max_preemption_failures=1: no retries left")
    assert policy.failures == 0 and policy.decide(FAILED).action == "give_up"  # max_failures=0 untouched until now


def test_max_preemption_failures_defaults_to_unlimited():
    policy = FailurePolicy(max_failures=0)
    preempted = Outcome(error_type="Preempted", failed=True, preempted=True)
    assert {policy.decide(preempted).action for _ in range(20)} == {"retry"}


def test_a_stuck_worker_is_retried_showing_where_it_hung():
    policy = FailurePolicy(max_failures=1)
    stuck = policy.decide(Outcome(error_type="WorkerStuck", failed=True))
    assert (stuck.action, stuck.show_where) == ("retry", True)
    assert not FailurePolicy(max_failures=1).decide(FAILED).show_where


def test_a_driver_interruption_stops_whatever_the_budget():
    policy = FailurePolicy(max_failures=-1)
    decision = policy.decide(Outcome(interrupted=True))
    assert (decision.action, decision.reason) == ("interrupted", "interrupted by the user (Ctrl-C)")
    assert policy.failures == 0


def test_a_full_disk_gives_up_at_once_whatever_the_budget_says():
    decision = FailurePolicy(max_failures=-1).decide(Outcome(error_type="StorageError", failed=True,
                                                             storage_full="ENOSPC: /runs/x/checkpoint_000004/blob"))
    assert decision.action == "give_up" and "storage is full (ENOSPC: /runs/x" in decision.reason


def test_storage_full_is_found_among_a_failures_causes():
    import errno

    from trainkit._internal.driver.failures import storage_full as _storage_full
    from trainkit.errors import StorageError, WorkerGroupError

    full = StorageError("upload", "/runs/x/blob", OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert _storage_full(WorkerGroupError("rank 1 raised", {1: full}, rank=1)) == "EDQUOT: /runs/x/blob"
    assert _storage_full(WorkerGroupError("rank 1 raised", {1: ValueError("x")}, rank=1)) is None
