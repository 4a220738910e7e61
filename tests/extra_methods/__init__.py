"""Method folders outside the `methods` package, discovered the way `methods` discovers its own."""
