"""The tests' helpers: shared builders, servers on loopback, the crash harness and the scripts it runs."""
