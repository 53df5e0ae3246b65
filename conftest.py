# trainkit's own fixtures (ray_cluster, run_config) for every test directory of this repository.
pytest_plugins = ["trainkit.testing", "pytester"]
