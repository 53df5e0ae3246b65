"""Ray itself: the embedded cluster, its lean workers and reaper, placement (TPU slices, Tune bundles), addresses."""
