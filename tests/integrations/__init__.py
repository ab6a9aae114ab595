"""Integration tests: real worker processes of each framework, on real brokers."""
