"""The integration tests' shared harness: one module a concern (README.md is the map)."""
