"""The API process's serving runtime: the version watcher and stores it serves from (runtime.py), batched decoding
(batching.py, batch_cache.py, generation.py), and the forgetting report. The workers never import it."""
