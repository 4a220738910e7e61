"""What runs in a worker: the learning job, the gate, a document's training examples, and Train-Attention."""
