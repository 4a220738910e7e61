"""`ckl`: the command line, on top of service/, workers/ and bench/ (service and workers never import it)."""
