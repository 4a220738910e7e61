"""The API process: HTTP only (routes, protocol models, errors, middleware, metrics) over core.Runtime."""
