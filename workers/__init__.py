"""What runs in a worker: the learning job, the update methods and the gate."""
