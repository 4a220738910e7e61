"""Knowledge state: adapters, the version store, probes and their scoring."""
