"""The stages of a learning job (workers/learner.py runs them): prepare, weigh, train, then the gate's verdict and
a commit or a rejection; a removal is a pipeline of the same stages (removal.py). Each stage takes what it works on
as arguments and returns what it made; what outlives a job is in workers/held.py."""
