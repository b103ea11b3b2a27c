"""The /v1 front tests: a package, so the package-scoped service in its conftest ends with it."""
