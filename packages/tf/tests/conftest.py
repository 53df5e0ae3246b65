pytest_plugins = ["trainkit.testing"]
