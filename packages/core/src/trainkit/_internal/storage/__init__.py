"""A run's files on a local disk or an object store: the commit protocol, the lease, the logs, the trust boundary."""
