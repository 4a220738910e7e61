"""What the API process and the workers share: settings, the stores, versions, probes, scoring, the method
registry and interfaces, and the model (loading, serving, batched decoding)."""
