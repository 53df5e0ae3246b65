"""The check of ``BackendConformance`` on the plugin's data helper (``shard``): at 2 and 3 workers,
with a dataset that divides by the world size and one that does not, the ranks' rows cover it,
disjoint where it divides (padding of at most world size - 1 rows where it does not)."""

from __future__ import annotations

from trainkit import ScalingConfig, TrainingFailedError
from trainkit.testing._conformance.checks import _check_shards
from trainkit.testing._conformance.guards import GUARDS as _GUARDS
from trainkit.testing._conformance.hooks import required_hook
from trainkit.testing._conformance.worker_fns import _Collect, _shard_fn

#: dataset sizes the data helper is given: one divides by 2 and 3 ranks, the other by neither
SHARD_SIZES = (12, 13)


class DataChecks:
    """Mixed into ``BackendConformance``."""

    @_GUARDS
    def test_data_helper_splits_the_data_over_the_ranks(self, run_config) -> None:
        shard = required_hook(type(self), "shard")
        for workers in sorted({self.num_workers, 3}):
            collect = _Collect()
            trainer = self.trainer(_shard_fn, run_config(callbacks=[collect]),
                                   self._config(shard=shard, sizes=SHARD_SIZES))
            trainer.scaling_config = ScalingConfig(num_workers=workers)
            try:
                trainer.fit()
            except TrainingFailedError as exc:
                raise AssertionError(f"the data helper (shard) failed at {workers} workers: {exc}") from exc
            (metrics,) = collect.reports
            for size in SHARD_SIZES:
                _check_shards({m["world_rank"]: {"rows": m["rows"][str(size)]} for m in metrics},
                              f"{type(self).__name__}: at {workers} workers, the data helper (shard)", size)
