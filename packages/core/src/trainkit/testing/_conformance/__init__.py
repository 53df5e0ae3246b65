"""The conformance suites, by concern; ``trainkit.testing.conformance`` is their public module."""
