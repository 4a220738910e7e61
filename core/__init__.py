"""What the API process and the workers share: settings, the stores (documents, versions, probes), scoring, the
method registry and the methods' two interfaces, routing (routing/), and the model's loading and its versions in use
(model/)."""
